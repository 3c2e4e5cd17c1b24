"""Each package's public API (its __init__'s __all__): every name resolves to what its module defines, none is
a module, and importing the package alone imports no TVM (the exports load when first used)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import types

import pytest

PACKAGES = ["agents", "backends", "generators", "harness", "problems", "report"]


@pytest.mark.parametrize("name", PACKAGES)
def test_exports_resolve(name):
    pkg = importlib.import_module(f"edgekernelbench.{name}")
    assert pkg.__all__, f"edgekernelbench.{name} exports nothing"
    for export in pkg.__all__:
        value = getattr(pkg, export)
        assert not isinstance(value, types.ModuleType), f"{name}.{export} is a module"
        assert export in dir(pkg)
    with pytest.raises(AttributeError):
        pkg.no_such_name  # noqa: B018


def test_importing_a_package_imports_no_tvm():
    code = (
        "import sys, json, importlib\n"
        f"for p in {PACKAGES!r}: importlib.import_module('edgekernelbench.' + p)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m == 'tvm' or m.startswith('tvm.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
