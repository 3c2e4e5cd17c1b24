"""Backend profiles as data: the built-in data/profiles.toml, extended or overridden by the user's TOML
($EKB_PROFILES, ~/.config/edgekernelbench/profiles.toml, RUN_DIR/profiles.toml). No TVM import here."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from pathlib import Path

from ..errors import EKBError
from .base import BackendProfile

BUILTIN = Path(__file__).parent / "data" / "profiles.toml"
KINDS = ("host", "cross", "gpu")
RUN_MODES = ("local", "emulated", "remote", "compile-only")
_FIELDS = {f.name for f in dataclasses.fields(BackendProfile)} - {"name", "source"}


class ProfileError(EKBError):
    pass


def user_profile_files(run_dir: Path | None = None) -> list[Path]:
    files = [Path.home() / ".config" / "edgekernelbench" / "profiles.toml"]
    # EKB_PROFILES: one path, or several separated by os.pathsep (workers get the parent's list)
    files += [Path(f) for f in os.environ.get("EKB_PROFILES", "").split(os.pathsep) if f]
    if run_dir is not None:
        files.append(Path(run_dir) / "profiles.toml")
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


def load_profiles(run_dir: Path | None = None) -> dict[str, BackendProfile]:
    """All profiles by name; a [name] table in a user file overrides keys of the built-in profile."""
    profiles: dict[str, BackendProfile] = {}
    for path in [BUILTIN, *user_profile_files(run_dir)]:
        try:
            data = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ProfileError(f"{path}: cannot read profiles ({e})") from e
        for name, table in data.items():
            if not isinstance(table, dict):
                raise ProfileError(f"{path}: top-level key '{name}' must be a [table]")
            source = "built-in" if path == BUILTIN else str(path)
            profiles[name] = _from_dict(name, table, source, profiles.get(name))
    return profiles
