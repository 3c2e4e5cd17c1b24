"""`ekb deploy --trials N`: a fresh LEKA tuning of the model with the offline (builtin) proposer, N judge
evaluations, before the artifact is built. LEKA looks every kernel up in the kernel database first, searches
the others, and stores the decisions it accepts there (agents/leka.py); its run store goes into
DIR/tuning/ (agent steps: what was tried and the judge's verdicts)."""

from __future__ import annotations

import logging
from pathlib import Path

from ..ir.spec import KernelSpec
from .model import ONNX_PREFIX, DeployError

log = logging.getLogger(__name__)
WALL_PER_TRIAL_S = 600.0  # wall-clock cap of the tuning: this much per judge evaluation


def tune(
    problem, profile, trials: int, run_dir: Path, kernel_db: Path | None, timing
) -> tuple[KernelSpec, float] | None:
    """(LEKA's best candidate, its speedup over tvm-default), or None when it found nothing correct."""
    from ..agents.budget import Budget
    from ..agents.episode import AgentConfig, Episode
    from ..agents.leka import run_leka
    from ..agents.proposers import BuiltinProposer
    from ..store import RunStore

    if problem.id.startswith(ONNX_PREFIX):
        raise DeployError(
            "--trials needs a problem of the suite (the judge looks it up by id): add the ONNX file with "
            "`ekb add-model` and deploy it by its id"
        )
    if not profile.can_time:
        raise DeployError(
            f"--trials: {profile.name} cannot time anything here ({profile.run}); tune on a backend that can "
            "(e.g. host-cpu, or a farm device with --tracker) and deploy with the kernel database"
        )
    cfg = AgentConfig(
        backend=profile,
        threads=profile.threads,
        timing=timing,
        budget=Budget(calls=trials, evals=trials, wall_s=WALL_PER_TRIAL_S * trials),
        kernel_db=kernel_db,
        reuse=True,
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    with RunStore(run_dir) as store:
        ep = Episode(problem, "leka", cfg, store, run_dir)
        run_leka(ep, BuiltinProposer(ep))
    if ep.best is None:
        log.warning("%s: LEKA found no correct candidate in %d evaluation(s)", problem.id, trials)
        return None
    spec, _res, speedup = ep.best
    return spec, speedup
