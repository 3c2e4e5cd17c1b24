"""Backends by profile name. A profile's kind picks the Backend class; adding a kind = adding a file."""

from __future__ import annotations

import difflib
from pathlib import Path

from ..errors import UnknownBackend
from .base import Backend, BackendProfile
from .profiles import load_profiles


def backend_names(run_dir: Path | None = None) -> list[str]:
    return list(load_profiles(run_dir))


def get_profile(name: str, threads: int | None = None, run_dir: Path | None = None) -> BackendProfile:
    profiles = load_profiles(run_dir)
    if name not in profiles:
        close = difflib.get_close_matches(name, list(profiles), n=2)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UnknownBackend(f"unknown backend '{name}'{hint}; available: {', '.join(profiles)}")
    return profiles[name].with_threads(threads)


def get_backend(name: str, threads: int | None = None, run_dir: Path | None = None) -> Backend:
    profile = get_profile(name, threads, run_dir)
    from .host import LocalBackend

    return LocalBackend(profile)
