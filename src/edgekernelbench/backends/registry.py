"""Backend profiles by name."""

from __future__ import annotations

import difflib

from ..errors import UnknownBackend
from .base import Backend


def backend_names() -> list[str]:
    return ["host-cpu"]


def get_backend(name: str, threads: int | None = None) -> Backend:
    if name == "host-cpu":
        from .host import LocalBackend, host_profile

        return LocalBackend(host_profile(threads or 1))
    close = difflib.get_close_matches(name, backend_names(), n=2)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise UnknownBackend(f"unknown backend '{name}'{hint}; available: {', '.join(backend_names())}")
