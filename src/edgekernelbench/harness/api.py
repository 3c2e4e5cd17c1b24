"""The public entry point: evaluate(problem, candidate, backend) -> Result, isolated in a worker."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from ..ir.spec import KernelSpec, load_candidate
from .isolation import Limits, run_in_worker
from .job import DEFAULT_BASELINES, Job
from .result import Result
from .timing import TimingConfig


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
) -> Result:
    """Judges one candidate: a KernelSpec, a path to a candidate file, or TVMScript module text."""
    problem_id = problem if isinstance(problem, str) else problem.id
    source = ""
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
    return run_in_worker(job, limits or Limits())
