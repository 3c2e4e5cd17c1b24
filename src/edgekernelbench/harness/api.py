"""The public entry point: evaluate(problem, candidate, backend) -> Result, isolated in a worker."""

from __future__ import annotations

import logging
from dataclasses import asdict, replace
from pathlib import Path

from ..ir.spec import KernelSpec, load_candidate
from .isolation import Limits, run_in_worker
from .job import DEFAULT_BASELINES, Job
from .result import Result
from .timing import TimingConfig

log = logging.getLogger(__name__)


def evaluate(
    problem,
    candidate: KernelSpec | str | Path,
    backend: str = "host-cpu",
    *,
    sample: int = 0,
    threads: int = 1,
    trials: int = 5,
    seed: int = 0,
    timing: TimingConfig | None = None,
    baselines: tuple[str, ...] = DEFAULT_BASELINES,
    measure: bool = True,
    profile: bool = False,
    limits: Limits | None = None,
    tracker: str | None = None,
    device_retries: int = 2,
    source: str = "",
) -> Result:
    """Judges one candidate: a KernelSpec, a path to a candidate file, or TVMScript module text.
    `tracker` (HOST:PORT): a backend whose profile has an rpc_key runs on a device of that key
    (backends/rpc.py); a device lost mid-run is retried on another one up to `device_retries` times."""
    problem_id = problem if isinstance(problem, str) else problem.id
    if isinstance(candidate, Path):
        source = str(candidate)
        candidate = load_candidate(candidate, problem_id)
    elif isinstance(candidate, str):
        candidate = KernelSpec(problem=problem_id, module=candidate, method="tvmscript")
    job = Job(
        problem=problem_id,
        sample=sample,
        backend=backend,
        spec=candidate.to_dict(),
        candidate=source,
        threads=threads,
        trials=trials,
        seed=seed,
        timing=asdict(timing or TimingConfig()),
        baselines=list(baselines),
        measure=measure,
        profile=profile,
    )
    from ..backends.registry import get_profile

    profile = get_profile(backend)
    limits = limits or Limits()
    if profile.uses_local_gpu(tracker):
        limits = replace(limits, address_space=False)  # a GPU runtime reserves huge address ranges
    job.timeout_s = limits.timeout_s
    if tracker is None and profile.run == "remote":
        from ..backends.rpc import default_tracker

        tracker = default_tracker()  # read here: the worker's environment is clean
    job.tracker = tracker
    res = run_in_worker(job, limits)
    lost = []
    for _ in range(device_retries if tracker else 0):
        if not (res.reason == "infra" and res.extra.get("device_lost")):
            break
        log.warning("%s#%d on %s: %s; trying another device", problem_id, sample, backend, res.detail)
        lost.append(res.detail)
        res = run_in_worker(job, limits)
    if lost:
        res.extra["devices_lost"] = lost  # earlier tries of this item, on devices that went away
    return res
