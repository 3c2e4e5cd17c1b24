"""The public entry point: evaluate(problem, candidate, backend) -> Result, isolated in a worker.

The judge's public API: what an agent (edgekernelbench.agents) may import of the judge (an import contract,
pyproject.toml) is this module's `__all__`."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, replace
from pathlib import Path

from ..backends.base import BackendProfile
from ..backends.hostinfo import node_here
from ..files import sha256_hex
from ..ir.spec import KernelSpec, read_candidate
from ..records import Plausibility, Result
from .config import JudgeConfig
from .confine import confine_command
from .isolation import Limits, lasting_warm_judge, run_in_worker, warm_judge
from .job import DEFAULT_BASELINES, Job, judge_version
from .peak import datasheet_peak, measure_peak_isolated
from .timing import TimingConfig

__all__ = [
    "DEFAULT_BASELINES",
    "JudgeConfig",
    "Limits",
    "TimingConfig",
    "check_plausible",
    "confine_command",
    "datasheet_peak",
    "evaluate",
    "measure_peak_isolated",
    "node_here",
    "time_floors",
    "warm_judge",
    "lasting_warm_judge",
]

log = logging.getLogger(__name__)


def evaluate(
    problem,
    candidate: KernelSpec | str | Path,
    backend: str | BackendProfile = "host-cpu",
    config: JudgeConfig | None = None,
    *,
    sample: int = 0,
    profile: bool | list[str] = False,
    source: str = "",
    peak: dict | None = None,
    candidate_sha256: str = "",
    **settings,
) -> Result:
    """Judges one candidate: a KernelSpec, a path to a candidate file, or TVMScript module text, on
    `backend` (a profile name, or the BackendProfile a command resolved once: backends.registry.as_profile),
    as `config` says (a JudgeConfig, built once per command; `settings`: any of its fields, overriding it:
    threads, trials, seed, timing, baselines, measure, limits, tracker, device_retries).
    `profile`: also time each kernel call of main (candidate and tvm-default); a list of kernel names:
    only the candidate's calls of those kernels (what a search comparing one kernel's versions needs).
    A backend whose profile has an rpc_key runs on a device of the config's tracker (backends/rpc.py); a
    device lost mid-run is retried on another one up to `device_retries` times.
    `peak`: the backend's measured peaks (FLOP/s, bandwidths; runs.backend_peak), for the plausibility
    check (`check_plausible`); None: the profile's own, when `ekb peak` measured them.
    `candidate_sha256`: of the bytes the candidate was read from (runs.evaluate_ref); "": of the file
    read here, else of the spec's JSON."""
    from ..backends.registry import as_profile

    unknown = set(settings) - JudgeConfig.names()
    if unknown:
        raise TypeError(f"evaluate() got unknown settings {sorted(unknown)}")
    cfg = replace(config or JudgeConfig(), **settings)
    if cfg.timing is None:  # a caller's "the default protocol"
        cfg = replace(cfg, timing=TimingConfig())
    problem_id = problem if isinstance(problem, str) else problem.id
    if isinstance(candidate, Path):
        source = str(candidate)
        candidate, candidate_sha256 = read_candidate(candidate, problem_id)
    elif isinstance(candidate, str):
        candidate = KernelSpec(problem=problem_id, module=candidate, method="tvmscript")
    candidate_sha256 = candidate_sha256 or sha256_hex(candidate.to_json(indent=None).encode())
    backend_profile = as_profile(backend, cfg.threads)
    job = Job(
        problem=problem_id,
        sample=sample,
        backend=backend_profile.name,
        spec=candidate.to_dict(),
        candidate=source,
        threads=cfg.threads,
        trials=cfg.trials,
        seed=cfg.seed,
        timing=asdict(cfg.timing),
        baselines=list(cfg.baselines),
        measure=cfg.measure,
        profile=profile,
        backend_profile=backend_profile.to_dict(),
    )
    limits = cfg.limits or Limits()
    if backend_profile.uses_local_gpu(cfg.tracker):
        limits = replace(limits, address_space=False)  # a GPU runtime reserves huge address ranges
    job.timeout_s = limits.timeout_s
    tracker = cfg.tracker
    if tracker is None and backend_profile.run == "remote":
        from ..backends.rpc import default_tracker

        tracker = default_tracker()  # read here: the worker's environment is clean
    job.tracker = tracker
    if cfg.measure and "onnxruntime" in cfg.baselines and backend_profile.kind != "gpu":
        prepare_ort_timer(job)
    if cfg.measure and backend_profile.kind == "host":
        prepare_call_loop(job)
    device_retries = cfg.device_retries
    res = run_in_worker(job, limits)
    lost = []
    for _ in range(device_retries if tracker else 0):
        if not (res.reason == "infra" and res.extra.get("device_lost")):
            break
        log.warning("%s#%d on %s: %s; trying another device", problem_id, sample, job.backend, res.detail)
        lost.append(res.detail)
        res = run_in_worker(job, limits)
    if lost:
        res.extra["devices_lost"] = lost  # earlier tries of this item, on devices that went away
    if peak is None:
        from ..backends.peak import profile_peak

        peak = profile_peak(backend_profile, cfg.threads)
    res = check_plausible(res, job, limits, peak)
    res.candidate_sha256, res.judge_version = candidate_sha256, judge_version()
    res.profile_sha256 = profile_digest(backend_profile)
    return res


def profile_digest(profile: BackendProfile) -> str:
    """SHA-256 of a backend profile's content (its fields as canonical JSON): what a result was judged on."""
    return sha256_hex(json.dumps(profile.to_dict(), sort_keys=True, default=str).encode())


def check_plausible(res: Result, job: Job, limits: Limits, peak: dict | None) -> Result:
    """Whether a correct, timed candidate's speed is one it can have, recorded in Result.plausibility:

    1. Stateless timing (the host CPU; harness/evaluate.py): its kernels, each timed alone on outputs
       overwritten before every call, must not take more than metrics.STATE_FACTOR times its time through
       the VM, or it reuses what earlier calls left in memory (a cache of outputs in a pooled
       intermediate): "implausible", never fast (metrics.verdict). The ratio is kept ("stateless_ratio").
    2. The physical bound (metrics.time_bound: its bytes at the fastest measured bandwidth, its FLOPs at
       the peak): a time below half of it is judged again by a fresh judge that also times every kernel
       with its outputs poisoned before each call. Confirmed (the fresh judge is as fast, poisoned outputs
       and all): it counts, "implausible-confirmed" (the bound was off). Not confirmed: "implausible"."""
    from .. import metrics
    from ..problems import get_problem

    if not (res.correct and res.runtime):
        return res
    stateless = res.stateless
    if stateless is not None and stateless.ratio > metrics.STATE_FACTOR:
        reason = (
            "its kernels, each on outputs overwritten before every call, take "
            f"{stateless.seconds * 1e6:.3g} us; its timed calls {stateless.timed_s * 1e6:.3g} us in the same "
            f"rounds ({stateless.ratio:.3g}x faster, more than {metrics.STATE_FACTOR}x): it reuses what "
            "earlier calls left in memory"
        )
        log.warning("%s#%d on %s: %s", job.problem, job.sample, job.backend, reason)
        res.plausibility = Plausibility(
            "implausible", res.runtime.median, stateless_ratio=stateless.ratio, reason=reason
        )
        return res
    ratio = stateless.ratio if stateless is not None else None
    res.plausibility = Plausibility("plausible", res.runtime.median, stateless_ratio=ratio)
    if not (peak and peak.get("flops")):
        return res
    problem = get_problem(job.problem)
    bound = metrics.time_bound(
        res.flops, res.bytes, peak["flops"], peak.get("bandwidth"), peak.get("levels") or (), problem.integer
    )
    res.plausibility = replace(res.plausibility, bound_s=bound)
    if metrics.implausible(res.runtime.median, bound):
        fresh = run_in_worker(replace(job, confirm=True), limits)
        poisoned = (fresh.extra.get("confirm") or {}).get("seconds")
        confirmed = bool(
            fresh.correct
            and fresh.runtime
            and isinstance(poisoned, float)
            and metrics.implausible(fresh.runtime.median, bound)
            and metrics.implausible(poisoned, bound)
        )
        res.plausibility = replace(
            res.plausibility,
            status="implausible-confirmed" if confirmed else "implausible",
            fresh_seconds=fresh.runtime.median if fresh.runtime else None,
            poisoned_seconds=poisoned,
            reason=(
                f"{res.runtime.median * 1e6:.3g} us is below half the physical bound "
                f"({bound * 1e6:.3g} us: bytes at the fastest bandwidth, FLOPs at the peak); "
                + (
                    "a fresh judge, outputs poisoned before every call, confirmed it"
                    if confirmed
                    else "a fresh judge with outputs poisoned before every call did not confirm it"
                )
            ),
        )
        log.warning("%s#%d on %s: %s", job.problem, job.sample, job.backend, res.plausibility.reason)
    return res


def prepare_ort_timer(job: Job) -> None:
    """Resolves (builds once, into the user's cache) the native ONNX Runtime timer here, in the parent,
    and hands its path to the worker, which only loads it (it may not write outside its job directory);
    likewise the CPUID mask that holds ONNX Runtime to a pinned host profile's ISA (baselines/ort_isa.py)."""
    from ..baselines.ort_isa import plan_pin
    from ..baselines.ort_native import resolve_library

    job.ort_timer_lib, job.ort_timer_unavailable = resolve_library()
    pin, job.ort_isa_unavailable = plan_pin(job.resolved_profile())
    job.ort_isa = pin.to_dict() if pin else None


def prepare_call_loop(job: Job) -> None:
    """Resolves (builds once, into the user's cache) the C loop of the timed calls here, in the parent, and
    hands its path to the worker, whose runners only load it (backends/call_loop.py)."""
    from ..backends.call_loop import resolve_library

    job.call_loop_lib, job.call_loop_unavailable = resolve_library()


def time_floors(
    backend: str | BackendProfile = "host-cpu",
    *,
    threads: int = 1,
    timing: TimingConfig | None = None,
    baselines: tuple[str, ...] = DEFAULT_BASELINES,
    limits: Limits | None = None,
    tracker: str | None = None,
) -> Result:
    """The timers' floors on a backend (harness/floors.py), in a worker prepared as evaluate()'s:
    res.baselines holds one Timing per floor."""
    from ..backends.registry import as_profile
    from .floors import PROBLEM

    profile = as_profile(backend, threads)
    limits = limits or Limits()
    if profile.uses_local_gpu(tracker):
        limits = replace(limits, address_space=False)
    if tracker is None and profile.run == "remote":
        from ..backends.rpc import default_tracker

        tracker = default_tracker()
    job = Job(
        problem=PROBLEM,
        sample=0,
        backend=profile.name,
        spec={},
        threads=threads,
        timing=asdict(timing or TimingConfig()),
        baselines=list(baselines),
        tracker=tracker,
        timeout_s=limits.timeout_s,
        task="floors",
        backend_profile=profile.to_dict(),
    )
    if "onnxruntime" in baselines and profile.kind != "gpu":
        prepare_ort_timer(job)
    if profile.kind == "host":
        prepare_call_loop(job)
    return run_in_worker(job, limits)
