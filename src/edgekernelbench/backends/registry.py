"""Backends by profile name. A profile's kind picks the Backend class; adding a kind = adding a file."""

from __future__ import annotations

import difflib
from pathlib import Path

from ..errors import UnknownBackend
from .base import Backend, BackendProfile
from .hostinfo import resolve_host
from .profiles import load_profiles


def backend_names(run_dir: Path | None = None, *, run_dir_override: bool = False) -> list[str]:
    return list(load_profiles(run_dir, run_dir_override=run_dir_override))


def get_profile(
    name: str, threads: int | None = None, run_dir: Path | None = None, *, run_dir_override: bool = False
) -> BackendProfile:
    """The profile `name` (with `threads`) among the built-in ones, the user's, and with `run_dir` its
    profiles.toml's (load_profiles: a run directory may add profiles; it replaces one only with
    `run_dir_override`). UnknownBackend when there is none."""
    profiles = load_profiles(run_dir, run_dir_override=run_dir_override)
    if name not in profiles:
        close = difflib.get_close_matches(name, list(profiles), n=2)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UnknownBackend(f"unknown backend '{name}'{hint}; available: {', '.join(profiles)}")
    return resolve_host(profiles[name].with_threads(threads))


def as_profile(backend: str | BackendProfile, threads: int | None = None) -> BackendProfile:
    """The profile of `backend`: a BackendProfile as it is (with `threads`), a name looked up. A command
    resolves its backends once and passes the profiles down; library callers may still pass names."""
    if isinstance(backend, BackendProfile):
        return backend.with_threads(threads)
    return get_profile(backend, threads)


def get_backend(
    name: str, threads: int | None = None, run_dir: Path | None = None, tracker: str | None = None
) -> Backend:
    """The Backend of profile `name` (see backend_for)."""
    return backend_for(get_profile(name, threads, run_dir), tracker)


def backend_for(profile: BackendProfile, tracker: str | None = None) -> Backend:
    """`tracker` (HOST:PORT of a TVM RPC tracker): a profile with an rpc_key runs on a device registered
    under that key when the tracker has one (a profile with run = "remote" always does, on the default
    tracker when none is given); otherwise as its profile says (e.g. emulated)."""
    if tracker or profile.run == "remote":
        from .rpc import remote_backend

        remote = remote_backend(profile, tracker)
        if remote is not None:
            return remote
    if profile.kind == "gpu":
        from .gpu import GPUBackend

        return GPUBackend(profile)
    if profile.kind == "cross":
        from .cross import CrossBackend

        return CrossBackend(profile)
    from .host import LocalBackend

    return LocalBackend(profile)
