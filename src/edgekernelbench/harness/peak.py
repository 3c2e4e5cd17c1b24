"""The backend's peaks (backends/peak.py: FLOP/s, the bandwidth of each memory level) measured in a fresh
process, with only the environment a judge's process gets: for the roofline of a run (runs/) and of a
deployed model's kernels (deploy/profile.py), and `ekb peak`."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

from ..backends.base import BackendProfile
from .isolation import ENV_ALLOW

log = logging.getLogger(__name__)


def measure_peak_isolated(backend: str | BackendProfile, threads: int, mib: int | None = None) -> dict | None:
    """Measures the backend's peaks with backends/peak.py in a fresh process whose thread pool has
    `threads` threads (local backends, CPU or GPU; None otherwise or on failure): FLOP/s and the
    bandwidth of each memory level (cache sizes from sysfs, else the profile's caches table).
    `mib`: DRAM buffer (None: automatic)."""
    from ..backends.host import resolve_target
    from ..backends.registry import as_profile

    profile = as_profile(backend, threads)
    if profile.run != "local":
        return None
    env = {k: v for k, v in os.environ.items() if k in ENV_ALLOW}  # PATH, a GPU's libraries, ...
    env.update(TVM_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    cmd = [
        sys.executable,
        "-m",
        "edgekernelbench.backends.peak",
        "--target",
        json.dumps(resolve_target(profile)),
        "--threads",
        str(threads),
        *(["--mib", str(mib)] if mib else []),
        *(["--caches", json.dumps(profile.caches)] if profile.caches else []),
    ]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=True).stdout
        return json.loads(out.strip().splitlines()[-1])
    except (subprocess.SubprocessError, json.JSONDecodeError, IndexError) as e:
        log.warning("peak measurement failed on %s: %s", profile.name, e)
        return None


def datasheet_peak(profile: BackendProfile, threads: int) -> dict | None:
    """The peaks a profile's datasheet gives (peak_flops, peak_bandwidth), for a backend that cannot be
    measured here; None without them."""
    if not (profile.peak_flops and profile.peak_bandwidth):
        return None
    return {
        "flops": float(profile.peak_flops),
        "bandwidth": float(profile.peak_bandwidth),
        "threads": threads,
        "source": profile.peak_source,
    }
