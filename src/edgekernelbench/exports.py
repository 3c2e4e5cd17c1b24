"""A package's public API, imported when first used (PEP 562): `import edgekernelbench.harness` stays cheap
(no TVM) and `edgekernelbench.harness.JudgeConfig` still works. Each package's __init__ names its exports:

    __getattr__, __dir__, __all__ = lazy_exports(__name__, {"JudgeConfig": ".config", ...})

An export never has a submodule's name (the import system binds a submodule to that attribute)."""

from __future__ import annotations

import importlib
import sys


def lazy_exports(package: str, exports: dict[str, str]):
    """(__getattr__, __dir__, __all__) for `package`: each name of `exports` comes from its module (relative
    to the package), imported on first access and then kept on the package."""

    def __getattr__(name: str):
        where = exports.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__, sorted(exports)
