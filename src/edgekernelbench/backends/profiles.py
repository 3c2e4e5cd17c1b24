"""Backend profiles as data: the built-in data/profiles.toml, extended or overridden by the user's own TOML
(~/.config/edgekernelbench/profiles.toml, $EKB_PROFILES), then extended by a run directory's
RUN_DIR/profiles.toml, which may add profiles but replaces one only when the user asks for it (whoever
works in the run directory, an agent say, writes that file). No TVM import here."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from pathlib import Path

from ..errors import EKBError
from ..files import UntrustedFileError, read_regular
from ..rundir import PROFILES
from .base import BackendProfile

BUILTIN = Path(__file__).parent / "data" / "profiles.toml"
RUN_DIR_PROFILES = PROFILES  # RUN_DIR/profiles.toml (rundir.py)
MAX_PROFILE_BYTES = 1 << 20
OVERRIDE_FLAG = "--run-dir-profiles-override"  # the commands' flag that lets a run directory replace one
KINDS = ("host", "cross", "gpu")
RUN_MODES = ("local", "emulated", "remote", "compile-only")
_FIELDS = {f.name for f in dataclasses.fields(BackendProfile)} - {"name", "source"}


class ProfileError(EKBError):
    pass


def user_profiles_path() -> Path:
    """The user's own profiles file (`ekb peak` stores measured peaks there)."""
    return Path.home() / ".config" / "edgekernelbench" / "profiles.toml"


def user_profile_files() -> list[Path]:
    """The user's own profile files that exist: ~/.config/edgekernelbench/profiles.toml, then each of
    $EKB_PROFILES (one path, or several separated by os.pathsep; workers get the parent's list)."""
    files = [user_profiles_path()]
    files += [Path(f) for f in os.environ.get("EKB_PROFILES", "").split(os.pathsep) if f]
    return [f for f in files if f.is_file()]


def _from_dict(name: str, d: dict, source: str, base: BackendProfile | None) -> BackendProfile:
    unknown = set(d) - _FIELDS
    if unknown:
        raise ProfileError(f"{source}: profile [{name}] has unknown keys {sorted(unknown)}")
    merged = dataclasses.asdict(base) if base else {}
    merged.update(d)
    merged.update(name=name, source=source)
    if "target" not in merged or not isinstance(merged["target"], dict) or "kind" not in merged["target"]:
        raise ProfileError(f"{source}: profile [{name}] needs target = {{ kind = ... }}")
    if merged.get("kind", "host") not in KINDS:
        raise ProfileError(f"{source}: profile [{name}] kind must be one of {KINDS}")
    if merged.get("run", "local") not in RUN_MODES:
        raise ProfileError(f"{source}: profile [{name}] run must be one of {RUN_MODES}")
    merged["emulator"] = tuple(merged.get("emulator") or ())
    return BackendProfile(**merged)


def _tables(text: str, path: Path) -> dict[str, dict]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(f"{path}: cannot read profiles ({e})") from e
    for name, table in data.items():
        if not isinstance(table, dict):
            raise ProfileError(f"{path}: top-level key '{name}' must be a [table]")
    return data


def _run_dir_tables(run_dir: Path) -> tuple[Path, dict[str, dict]]:
    """RUN_DIR/profiles.toml's tables ({} when there is none), read as untrusted: a plain file, no link,
    at most MAX_PROFILE_BYTES."""
    path = Path(run_dir) / RUN_DIR_PROFILES
    if not os.path.lexists(path):
        return path, {}
    try:
        text = read_regular(path, MAX_PROFILE_BYTES).decode()
    except (UntrustedFileError, UnicodeDecodeError) as e:
        raise ProfileError(f"cannot read the run directory's profiles: {e}") from None
    return path, _tables(text, path)


def _among(path: Path, files: list[Path]) -> bool:
    try:
        return any(os.path.samefile(path, f) for f in files)
    except OSError:  # `path` is not there (or cannot be looked at: read as untrusted then)
        return False


def load_profiles(
    run_dir: Path | None = None, *, run_dir_override: bool = False
) -> dict[str, BackendProfile]:
    """All profiles by name: the built-in ones; a [name] table in one of the user's files
    (`user_profile_files`) overrides keys of the profile of that name or adds one. With `run_dir`, its
    profiles.toml adds profiles; a name already defined is a ProfileError (the one place that decides it)
    unless `run_dir_override`, which lets its tables override keys as the user's files do. A run
    directory's file that is one of the user's files (named in $EKB_PROFILES) counts as the user's."""
    profiles: dict[str, BackendProfile] = {}
    users = user_profile_files()
    for path in [BUILTIN, *users]:
        try:
            text = path.read_text()
        except OSError as e:
            raise ProfileError(f"{path}: cannot read profiles ({e})") from e
        source = "built-in" if path == BUILTIN else str(path)
        for name, table in _tables(text, path).items():
            profiles[name] = _from_dict(name, table, source, profiles.get(name))
    if run_dir is not None and not _among(Path(run_dir) / RUN_DIR_PROFILES, users):
        path, tables = _run_dir_tables(run_dir)
        clash = sorted(set(tables) & set(profiles))
        if clash and not run_dir_override:
            where = ", ".join(f"[{n}] ({profiles[n].source})" for n in clash)
            raise ProfileError(
                f"{path} redefines {where}: a run directory's profiles may add profiles, not replace "
                f"them (rename it, or pass {OVERRIDE_FLAG} to let it)"
            )
        for name, table in tables.items():
            profiles[name] = _from_dict(name, table, str(path), profiles.get(name))
    return profiles
