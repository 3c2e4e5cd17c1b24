"""`ekb backends`, `ekb peak`: the backend profiles and their measured peaks."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from ..errors import EKBError
from .common import _profiles, _tracker_option, console


# ------------------------------------------------------------------------------------------ backends
def _si(x: float | None, unit: str = "") -> str:
    """1.28e12 -> "1.28 T" + unit; None -> "-"."""
    if not x:
        return "-"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}".rstrip()


def _short_source(source: str) -> str:
    """ "datasheet-derived: 1 core x ..." -> "datasheet-derived"; "measured: ..., 2026-01-02, ..." ->
    "measured 2026-01-02" (the full text is in `ekb backends --json`)."""
    import re

    if not source:
        return "-"
    head = source.split(":")[0].split("(")[0].strip().replace("datasheet-derived", "datasheet")
    date = re.search(r"\d{4}-\d{2}-\d{2}", source)
    return f"{head} {date.group(0)}" if date and source.startswith("measured:") else head


def _ort_held(profile) -> str:
    """For a host profile pinned to a narrower ISA than this CPU's: whether the judge holds ONNX Runtime to
    it (baselines/ort_isa.py), for the "time" column; "" where there is nothing to hold."""
    from ..baselines.ort_isa import plan_pin

    pin, why = plan_pin(profile)
    if pin is not None:
        return f"ONNX Runtime held to its ISA ({len(pin.features)} CPUID features hidden)"
    return why


@click.command("backends")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def backends_cmd(as_json):
    """The backend profiles (built-in and user TOML) and what each can do on this machine:
    build (TVM target available), check correctness, time."""
    from ..backends.capabilities import backend_capabilities
    from ..backends.hostinfo import host_facts, resolve_host
    from ..backends.profiles import load_profiles

    rows = []
    for prof in (resolve_host(p) for p in load_profiles().values()):
        row = backend_capabilities(prof)
        row["onnxruntime_isa"] = _ort_held(prof) if row["time"]["ok"] else ""
        rows.append(row)
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    facts = host_facts()
    caches = ", ".join(f"{k.split('_')[0].upper()} {v} KiB" for k, v in facts.caches.items()) or "unknown"
    console.print(
        f"this machine: {facts.model or '?'} (LLVM {facts.cpu}); ISA {', '.join(facts.isa) or 'none'} "
        f"[{facts.sources['isa']}]; {facts.vector_bits}-bit vectors; caches per core {caches} "
        f"[{facts.sources['caches']}]; {facts.cores} CPU(s) [{facts.sources['cores']}]"
    )
    t = Table(title=f"{len(rows)} backends")
    for c, justify in (
        ("name", "left"),
        ("kind", "left"),
        ("target", "left"),
        ("threads", "right"),
        ("vec bits", "right"),
        ("run", "left"),
        ("FLOP/s", "right"),
        ("B/s", "right"),
        ("peak source", "left"),
        ("build", "left"),
        ("check", "left"),
        ("time", "left"),
    ):
        t.add_column(c, justify=justify, overflow="fold", no_wrap=c in ("name", "run", "FLOP/s", "B/s"))
    for r in rows:
        t.add_row(
            Text(r["name"]),
            r["kind"],
            Text(r["target_short"]),
            str(r["threads"]),
            str(r["vector_bits"]),
            r["run"],
            _si(r["peak_flops"]),
            _si(r["peak_bandwidth"]),
            Text(_short_source(r["peak_source"])),
            *[Text(r[k]["detail"], style="green" if r[k]["ok"] else "yellow") for k in ("build", "check")],
            Text(
                r["time"]["detail"] + (f"; {r['onnxruntime_isa']}" if r["onnxruntime_isa"] else ""),
                style="green" if r["time"]["ok"] else "yellow",
            ),
        )
    console.print(t)


@click.command()
@click.option(
    "--backend", required=True, help="The backend to measure (one that runs here, or on a farm device)."
)
@click.option("--threads", type=int, help="Threads (default: the profile's).")
@click.option(
    "--profiles-file",
    type=click.Path(path_type=Path),
    help="User profile TOML to store the figures in (default ~/.config/edgekernelbench/profiles.toml).",
)
@click.option(
    "--mib",
    type=click.IntRange(1),
    help="DRAM buffer, each of two (MiB; default: max(64, the last-level cache)).",
)
@_tracker_option
def peak(backend, threads, profiles_file, mib, tracker):
    """Measure a backend's peak FLOP/s and the bandwidth of each memory level (L1d, L2, L3, DRAM; TVM
    micro-kernels, cache sizes from sysfs or the profile's caches table) and store them in the user
    profile file: the roofline of later runs uses them. A profile with an rpc_key is measured on a
    device of its key behind --tracker (a run = "remote" profile always is)."""
    import datetime

    from ..backends.profile_file import store_peak
    from ..harness.peak import measure_peak_isolated

    profiles = _profiles(backend, threads)
    if len(profiles) != 1:
        raise EKBError("--backend takes one backend for `ekb peak`")
    (profile,) = profiles
    name = profile.name
    from ..backends.profiles import user_profiles_path

    path = profiles_file or user_profiles_path()
    today = datetime.date.today().isoformat()
    if profile.rpc_key and (tracker or profile.run == "remote"):
        from ..backends.peak import measure_peak_remote
        from ..backends.rpc import default_tracker, farm_status

        addr = farm_status(tracker or default_tracker()).tracker  # one clear error when unreachable
        msg = f"measuring {name} on a device of '{profile.rpc_key}' ({profile.threads} thread(s))"
        with console.status(msg):
            measured, server = measure_peak_remote(profile, addr, mib=mib)
        result = {"flops": measured.flops, "bandwidth": measured.bandwidth, "levels": list(measured.levels)}
        where = f" over RPC on {server}"
    elif profile.run != "local":
        raise EKBError(
            f"{name} cannot run here (run = {profile.run}): `ekb peak` measures on a local device, or on "
            f"a farm device with an rpc_key and --tracker; its peaks stay '{profile.peak_source or 'none'}'"
        )
    else:
        from ..backends.gpu import require_device

        require_device(profile)  # a local GPU that is not here: one clear line
        from ..backends.hostinfo import require_isa

        require_isa(profile)
        with console.status(f"measuring {name} ({profile.threads} thread(s))"):
            result = measure_peak_isolated(profile, profile.threads, mib)
        if not result:
            raise EKBError(f"peak measurement failed on {name} (ekb -v peak ... for the reason)")
        where = ""
    source = f"measured: TVM micro-kernels{where}, {today}, {profile.threads} thread(s)"
    levels = result.get("levels") or []
    store_peak(path, name, result["flops"], result["bandwidth"], source, levels)
    per_level = ", ".join(f"{lv['level']} {_si(lv['bandwidth'], 'B/s')}" for lv in levels)
    console.print(
        Text(
            f"{name}: {_si(result['flops'], 'FLOP/s')}, {per_level or _si(result['bandwidth'], 'B/s')} "
            f"({profile.threads} thread(s)); stored in {path} [{name}]"
        )
    )
