"""`ekb baseline`: measure tvm-default, onnxruntime and the unscheduled reference for a set of problems,
with the harness's protocol (in a worker, interleaved), and keep them in a run store. On a GPU the
"reference" is the reference with dlight's GPU schedule (unscheduled loops do not build for a GPU) and
onnxruntime is not measured (it would run on a CPU).

On a remote device (a profile with an rpc_key and a tracker), onnxruntime is timed on the device when
its server is `ekb farm server` and onnxruntime is installed there; otherwise it is not measured, with
the reason logged once (see baselines/onnxruntime.py).

`measure_floors` measures, once per backend and thread count, the floor of each contender's timer (an
empty kernel through exactly that timer, harness/floors.py) and keeps it in the run store's meta."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from ..backends.base import BackendProfile
from ..backends.gpu import require_device
from ..backends.hostinfo import require_isa
from ..errors import EKBError
from ..generators.reference_candidates import gpu_default_spec, reference_spec
from ..harness.api import evaluate, time_floors
from ..harness.timing import TimingConfig
from ..store import RunStore

log = logging.getLogger(__name__)

ALL = ("reference", "tvm-default", "onnxruntime")


def device_ort_reason(tracker: str, key: str, timeout: float = 60.0) -> str | None:
    """None when a device of `key` can time onnxruntime, else why not (one line)."""
    from ..backends.base import DeviceFailure
    from ..backends.rpc import request_device
    from ..baselines.onnxruntime import ORTUnavailable, device_ort_version

    try:
        remote, _ = request_device(tracker, key, session_timeout=timeout, wait_s=timeout)
    except DeviceFailure as e:
        return str(e)
    try:
        device_ort_version(remote)
        return None
    except ORTUnavailable as e:
        return str(e)
    finally:
        del remote  # ends the session: the device is free again


def measurable(backend: str | BackendProfile, threads: int = 1, tracker: str | None = None):
    """(profile, tracker address when it runs on a farm device, else None); an EKBError saying why
    when nothing can be timed on the backend here (emulated, compile-only, no local GPU). `backend`: a
    profile name, or the BackendProfile the command resolved."""
    from ..backends.registry import as_profile
    from ..backends.rpc import remote_plan

    prof = as_profile(backend, threads)
    on_device, _ = remote_plan(prof, tracker)  # the tracker's address when the profile runs on a device
    if not on_device:
        require_device(prof)  # a local GPU that is not here: one clear error
        require_isa(prof)  # an ISA this CPU lacks: the same
        if not prof.can_time:
            raise EKBError(
                f"{prof.name} cannot time anything here (run = {prof.run}): baselines need a local device, "
                f"or a farm device of its rpc_key behind --tracker"
            )
    return prof, on_device


def measure_baselines(
    problems,
    backend: str | BackendProfile,
    run_dir: Path,
    threads: int = 1,
    timing: TimingConfig | None = None,
    force: bool = False,
    on_result: Callable[[str, bool], None] | None = None,
    tracker: str | None = None,
) -> dict:
    """Returns {problem id: {"reference": s, "tvm-default": s, "onnxruntime": s}} (median seconds/call;
    onnxruntime is absent where it could not be measured)."""
    out: dict[str, dict[str, float]] = {}
    prof, on_device = measurable(backend, threads, tracker)
    backend_name = prof.name
    gpu = prof.kind == "gpu"
    wanted = ALL[:2] if gpu else ALL  # no CPU onnxruntime against a GPU (harness/evaluate.py)
    ort_reason: list[str | None] = []  # probed once, when stored remote baselines lack onnxruntime
    warned: set[str] = set()

    def cached_names(pid: str, have: dict) -> tuple[str, ...] | None:
        if force:
            return None
        if all((pid, backend_name, n) in have for n in wanted):
            return wanted
        if on_device and all((pid, backend_name, n) in have for n in ALL[:2]):
            if not ort_reason:
                ort_reason.append(device_ort_reason(on_device, prof.rpc_key or backend_name))
            if ort_reason[0] is not None:  # the device cannot time it: measuring again adds nothing
                warn(ort_reason[0])
                return ALL[:2]
        return None

    def warn(reason: str) -> None:
        if reason not in warned:
            warned.add(reason)
            log.warning("%s: onnxruntime not measured on the device: %s", backend_name, reason)

    with RunStore(run_dir) as store:
        have = store.baselines(backend_name)
        for p in problems:
            names = cached_names(p.id, have)
            if names:
                out[p.id] = {n: have[(p.id, backend_name, n)]["timing"]["median"] for n in names}
                if on_result:
                    on_result(p.id, True)
                continue
            # the reference as it is; on a GPU the reference must be scheduled to build at all: dlight's
            spec = gpu_default_spec(p, prof) if gpu else reference_spec(p)
            res = evaluate(
                p, spec, prof, threads=threads, trials=1, timing=timing, profile=True, tracker=tracker
            )
            times = {}
            if res.correct and res.runtime:
                extra = {"threads": threads, "flops": res.flops, "bytes": res.bytes}
                store.put_baseline(
                    p.id,
                    backend_name,
                    "reference",
                    res.runtime,
                    {**extra, "kernels": [asdict(k) for k in res.kernels]},
                )
                times["reference"] = res.runtime.median
                for name, t in res.baselines.items():
                    more = {"kernels": [asdict(k) for k in res.baseline_kernels.get(name, [])]}
                    if name == "onnxruntime":  # "host" or "device"
                        more["on"] = res.extra.get("onnxruntime_on")
                        more["output"] = res.extra.get("onnxruntime_output")  # vs the oracle (host only)
                    store.put_baseline(p.id, backend_name, name, t, {**extra, **more})
                    times[name] = t.median
                reason = res.extra.get("not_measured", {}).get("onnxruntime")
                if reason:
                    warn(reason)
            out[p.id] = times
            if on_result:
                on_result(p.id, res.correct)
    return out


def floors_key(backend: str, threads: int) -> str:
    return f"floors:{backend}:{threads}"


def measure_floors(
    backend: str | BackendProfile,
    run_dir: Path,
    threads: int = 1,
    timing: TimingConfig | None = None,
    force: bool = False,
    tracker: str | None = None,
) -> dict:
    """The floors of the contenders' timers on `backend` with `threads` threads (harness/floors.py),
    measured in a worker the first time (or again with `force`) and kept in the run store's meta:
    {"backend", "threads", "seconds": {floor: median s/call}, "timings": {floor: Timing as a dict},
    "describe": {floor: what it timed}, "onnxruntime_timer": how ONNX Runtime was timed,
    "not_measured": {name: why}, "timing": the protocol}; {"backend", "threads", "error": why} when they
    could not be measured (not stored)."""
    from dataclasses import asdict

    name = backend if isinstance(backend, str) else backend.name
    key = floors_key(name, threads)
    with RunStore(run_dir) as store:
        have = None if force else store.get_meta(key)
    if have:
        return have
    prof = measurable(backend, threads, tracker)[0]
    gpu = prof.kind == "gpu"  # no CPU onnxruntime against a GPU
    res = time_floors(prof, threads=threads, timing=timing, tracker=tracker, baselines=() if gpu else ALL[2:])
    if not res.correct:
        why = res.detail.splitlines()[0] if res.detail else res.reason
        log.warning("%s: timer floors not measured: %s", name, why)
        return {"backend": name, "threads": threads, "error": res.detail or res.reason}
    out = {
        "backend": name,
        "threads": threads,
        "seconds": {n: t.median for n, t in res.baselines.items()},
        "timings": {n: asdict(t) for n, t in res.baselines.items()},
        "describe": res.extra.get("floors", {}),
        "onnxruntime_timer": res.extra.get("onnxruntime_timer"),
        "not_measured": res.extra.get("not_measured", {}),
        "timing": asdict(timing or TimingConfig()),  # the protocol they were measured with
    }
    with RunStore(run_dir) as store:
        store.set_meta(key, out)
    return out
