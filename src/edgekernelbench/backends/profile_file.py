"""Writing figures into a user profile TOML (tomllib only reads). `ekb peak` stores measured peaks
with `store_peak`; the rest of the file -- other tables, other keys, comments -- is kept as it is."""

from __future__ import annotations

import json
import math
import re
import tomllib
from pathlib import Path

from .profiles import ProfileError

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_HEADER = re.compile(r"^\s*\[\[?\s*(?P<name>[^\]]+?)\s*\]\]?\s*(#.*)?$")


def toml_key(name: str) -> str:
    return name if _BARE_KEY.match(name) else json.dumps(name)


def toml_value(v) -> str:
    """A TOML literal for a str, bool, int or finite float (strings as JSON strings: valid TOML), a list
    of those, or a dict of them as an inline table (None values left out: TOML has no null)."""
    if isinstance(v, list | tuple):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        items = [f"{toml_key(str(k))} = {toml_value(x)}" for k, x in v.items() if x is not None]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ProfileError(f"cannot store a non-finite value {v}")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    raise ProfileError(f"cannot store a value of type {type(v).__name__} in a profile file")


def _header_name(line: str) -> str | None:
    m = _HEADER.match(line)
    if not m:
        return None
    raw = m.group("name").strip()
    return json.loads(raw) if raw.startswith('"') else raw.strip("'") if raw.startswith("'") else raw


def set_profile_keys(path: Path, profile: str, values: dict) -> None:
    """Sets `values` in table [profile] of the TOML file at `path` (created if missing), replacing
    those keys' lines or appending them to the table (or a new table at the end)."""
    path = Path(path)
    text = path.read_text() if path.exists() else ""
    if text:
        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ProfileError(f"{path}: not valid TOML, not changed ({e})") from e
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if _header_name(ln) == profile), None)
    new_lines = [f"{toml_key(k)} = {toml_value(v)}" for k, v in values.items()]
    if start is None:
        while lines and not lines[-1].strip():
            lines.pop()
        lines += ([""] if lines else []) + [f"[{toml_key(profile)}]", *new_lines]
    else:
        end = next((i for i in range(start + 1, len(lines)) if _header_name(lines[i])), len(lines))
        body = lines[start + 1 : end]
        key_re = {k: re.compile(rf"^\s*(?:{re.escape(k)}|{re.escape(json.dumps(k))})\s*=") for k in values}
        kept = [ln for ln in body if not any(rx.match(ln) for rx in key_re.values())]
        while kept and not kept[-1].strip():
            kept.pop()
        tail = [""] if end < len(lines) else []
        lines = lines[: start + 1] + kept + new_lines + tail + lines[end:]
    out = "\n".join(lines) + "\n"
    try:
        table = tomllib.loads(out).get(profile, {})
    except tomllib.TOMLDecodeError as e:  # e.g. a multi-line value of a replaced key
        raise ProfileError(f"{path}: cannot update [{profile}] by hand ({e}); not changed") from e
    if any(table.get(k) != v for k, v in values.items()):
        raise ProfileError(f"{path}: cannot update [{profile}] by hand; not changed")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(out)
    tmp.replace(path)


def store_peak(
    path: Path, profile: str, flops: float, bandwidth: float, source: str, levels: list[dict] = ()
) -> None:
    """Writes measured peaks into [profile]: peak_flops, peak_bandwidth (DRAM), peak_source and, when
    given, peak_levels (one inline table per memory level: level, capacity, bandwidth, working_set; a
    None capacity -- DRAM -- is left out)."""
    values = {"peak_flops": _sig(flops), "peak_bandwidth": _sig(bandwidth), "peak_source": source}
    if levels:
        rows = []
        for lv in levels:
            row = {"level": str(lv["level"])}
            if lv.get("capacity") is not None:
                row["capacity"] = int(lv["capacity"])
            row["bandwidth"] = _sig(lv["bandwidth"])
            if lv.get("working_set") is not None:
                row["working_set"] = int(lv["working_set"])
            rows.append(row)
        values["peak_levels"] = rows
    set_profile_keys(path, profile, values)


def _sig(x: float, digits: int = 4) -> float:
    return float(f"{float(x):.{digits}g}")
