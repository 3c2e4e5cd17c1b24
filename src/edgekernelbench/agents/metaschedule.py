"""MetaSchedule, TVM's auto-tuner, as a method of `ekb agent`: the search baseline the agents are compared
with. It tunes the problem's kernels with its own measurements (`--trials N` measured candidates per
problem; AgentConfig.tune_trials, the budget's evaluations when not given), then its result -- the best
record of every kernel as decisions (search/metaschedule.py) -- goes to the judge once, like every other
method's final candidate. MetaSchedule's database stays in RUN_DIR/agents/metaschedule/<problem>/.

Budget: one judge evaluation, no model call; the tuning time counts in the method's wall time (a kernel
is not started once the wall-clock cap is reached)."""

from __future__ import annotations

import logging

from ..search.metaschedule import TuningUnavailable, problem_dir, tune_problem
from .episode import Episode

log = logging.getLogger(__name__)


def tune_trials(cfg) -> int:
    """MetaSchedule's measured trials per problem: --trials, else the budget's evaluations."""
    return cfg.tune_trials if cfg.tune_trials is not None else cfg.budget.evals


def run_metaschedule(ep: Episode) -> None:
    trials = tune_trials(ep.cfg)
    work = problem_dir(ep.run_dir, ep.problem.id)
    try:
        spec, report = tune_problem(
            ep.problem.id,
            ep.cfg.backend,
            trials,
            work,
            seed=ep.cfg.seed,
            should_stop=lambda: ep.usage.wall_s > ep.cfg.budget.wall_s,
        )
    except TuningUnavailable as e:
        log.warning("%s metaschedule: %s", ep.problem.id, e)
        ep.record(kind="tune", trials=trials, error=str(e))
        ep.run_info = {"trials": 0, "trials_given": trials, "error": str(e)}
        return
    ep.record(
        kind="tune",
        trials=trials,
        measured=report["measured"],
        seconds=report["wall_s"],
        database=work.relative_to(ep.run_dir).as_posix(),  # relative to the run directory
        kernels=[
            {
                k: row[k]
                for k in (
                    *("kernel", "trials", "measured", "best_us", "seconds", "status", "why"),
                    *("same_as_metaschedule", "tuned_as"),
                )
            }
            for row in report["kernels"]
        ],
    )
    ep.run_info = {"trials": report["measured"], "trials_given": trials, "tune_s": report["wall_s"]}
    tuned = [row["kernel"] for row in report["kernels"] if row["status"] == "tuned"]
    ep.judge(spec, kernel=",".join(tuned), label=f"metaschedule, {trials} trials")
