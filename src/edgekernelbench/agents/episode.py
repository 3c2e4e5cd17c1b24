"""One method on one problem: its configuration, its budget, its trajectory and its best candidate.

Every candidate goes to the judge through `Episode.judge` (harness.api.evaluate, the same judge as
`ekb eval`), which charges one evaluation, records the step in the run store (agent_steps: kernel, layer,
proposal, verdict, seconds, budget used, best speedup so far) and keeps the best correct candidate. An
agent never judges: it reads the Result."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..harness.api import DEFAULT_BASELINES, JudgeConfig, Limits, TimingConfig, evaluate
from ..ir.spec import KernelSpec
from ..records import Result
from .budget import Budget, Usage

log = logging.getLogger(__name__)
OBJECTIVE = "tvm-default"  # what "faster" means inside an agent: the paired speedup over this baseline


@dataclass
class AgentConfig:
    backend: object  # the BackendProfile, resolved once by the caller (with the run's thread count)
    threads: int = 1
    trials: int = 5  # the judge's correctness trials (`ekb agent --check-trials`)
    seed: int = 0  # MetaSchedule's search (the judge draws every judgment's input seed itself)
    timing: TimingConfig = field(default_factory=TimingConfig)
    final_timing: TimingConfig | None = field(default_factory=TimingConfig)  # None: as `timing`
    baselines: tuple[str, ...] = DEFAULT_BASELINES  # the final judgment's
    # what the search's judgments time the candidate against: the objective only by default (the score
    # is the speedup over it); the final judgment times every baseline. None: `baselines`
    search_baselines: tuple[str, ...] | None = (OBJECTIVE,)
    limits: Limits | None = None
    peak: dict | None = None  # the backend's peaks, for the judge's plausibility check
    budget: Budget = field(default_factory=Budget)
    model: str | None = None  # None: the offline (builtin) proposer
    temperature: float | None = 0.2
    max_tokens: int = 8192
    use_cache: bool = True
    cache_path: Path | None = None
    agent_cmd: str | None = None  # the external coding agent's command line (method "cli")
    kernel_db: Path | None = None  # None: kerneldb.default_db_path()
    reuse: bool = True  # LEKA replays stored decisions before it spends budget
    tune_trials: int | None = None  # MetaSchedule's measured trials per problem (None: budget.evals)
    # LEKA stops after this many judgments in a row without a kept improvement (0: spends the budget)
    patience: int = 8

    def judge(self, final: bool = False, timing: TimingConfig | None = None) -> JudgeConfig:
        """How the judge judges this agent's candidates: a search's judgment (its timing protocol, against
        `search_baselines`), or with `final` a final judgment (every baseline)."""
        baselines = self.baselines if final else (self.search_baselines or self.baselines)
        return JudgeConfig(
            threads=self.threads,
            trials=self.trials,
            timing=timing or self.timing,
            baselines=tuple(baselines),
            limits=self.limits or JudgeConfig().limits,
        )


def score(res: Result) -> float | None:
    """How good a result is for an agent: its speedup over tvm-default when correct and plausible."""
    if not res.correct or res.implausible:
        return None
    s = res.speedups.get(OBJECTIVE)
    return float(s) if s is not None else (1.0 if res.runtime is None else None)


@dataclass(frozen=True)
class ProfileRow:
    """One row of a candidate's per-kernel profile as the agents read it (profile_rows)."""

    kernel: str
    share: float  # of the time of main's kernel calls
    us: float  # microseconds per run of main in this row's calls
    calls: int = 1  # calls of the kernel in one run of main that this row's time covers
    gflops: float | None = None  # per call; None without a FLOP count

    def with_share(self, total_us: float) -> ProfileRow:
        return replace(self, share=self.us / total_us)


def profile_rows(res: Result) -> list[ProfileRow]:
    """The candidate's kernel calls as the judge's per-kernel profile timed them, largest share first: `us`
    the microseconds per run of main in that row's calls (`calls` of them: a profile of named kernels
    times one call of each and counts the others, harness/runner.py), `gflops` per call."""
    rows = [
        ProfileRow(
            k.kernel,
            k.share,
            k.median * 1e6 * k.calls,
            k.calls,
            (k.flops / k.median / 1e9) if k.flops and k.median > 0 else None,
        )
        for k in res.kernels
    ]
    return sorted(rows, key=lambda r: -r.share)


def verdict_text(res: Result) -> str:
    """The judge's verdict in one line, for feedback and the trajectory."""
    if res.correct:
        s = ", ".join(f"{b} {v:.3f}x" for b, v in sorted(res.speedups.items()))
        plaus = res.plausibility.status if res.plausibility else None
        extra = f"; {plaus}" if plaus and plaus != "plausible" else ""
        return f"correct; speedups {s or 'not measured'}{extra}"
    return f"{res.reason}: {(res.detail or '').strip().splitlines()[0][:300] if res.detail else ''}"


@dataclass(frozen=True)
class Step:
    """One step of a trajectory, as the run store's agent_steps keeps it."""

    problem: str
    method: str
    step: int
    record: dict


class StepLog:
    """A trajectory kept in memory, for an episode whose process does not write the run store (a cluster's
    worker): the driver writes its steps when the episode's outcome comes back. Takes the run store's place
    in Episode (put_agent_step, clear_agent_steps)."""

    def __init__(self) -> None:
        self.steps: list[Step] = []

    def put_agent_step(self, problem: str, method: str, step: int, record: dict) -> None:
        self.steps = [s for s in self.steps if (s.problem, s.method, s.step) != (problem, method, step)]
        self.steps.append(Step(problem, method, int(step), record))

    def clear_agent_steps(self, problem: str, method: str) -> None:
        self.steps = [s for s in self.steps if (s.problem, s.method) != (problem, method)]


class Episode:
    """`store`: where its trajectory goes, step by step (the RunStore, or a StepLog)."""

    def __init__(self, problem, method: str, cfg: AgentConfig, store, run_dir: Path):
        self.problem, self.method, self.cfg, self.store, self.run_dir = (
            problem,
            method,
            cfg,
            store,
            Path(run_dir),
        )
        self.usage = Usage(cfg.budget)
        self.steps = 0
        self.best: tuple[KernelSpec, Result, float] | None = None
        self.last: Result | None = None
        self.last_spec: KernelSpec | None = None
        self.final: tuple[KernelSpec, Result] | None = None  # a method's own final candidate (cli), if any
        self.run_info: dict = {}  # facts of a method for its run record (MetaSchedule: trials measured)
        self.store.clear_agent_steps(problem.id, method)  # an interrupted episode starts over

    @property
    def best_speedup(self) -> float | None:
        return self.best[2] if self.best else None

    def judge(
        self,
        spec: KernelSpec,
        *,
        kernel: str = "",
        layer: str = "",
        label: str = "",
        profile=True,
        charge=True,
        accept: Callable[[Result], bool] | None = None,
        timing: TimingConfig | None = None,
        progress: Callable[[Result], bool] | None = None,
    ) -> Result:
        """Judges `spec` (one evaluation of the budget; `charge=False`: the final judgment of an external
        agent's file, made whatever it spent) and records the step. The candidate becomes the episode's best
        when `accept(result)` says so (a method with its own acceptance rule: LEKA), else when its score is
        above the best's. `timing`: this judgment's protocol, when not the episode's. `progress`: whether a
        kept candidate also counts as progress for the budget's patience (default: every kept one does)."""
        if charge:
            self.usage.charge_eval()
        t0 = time.perf_counter()
        res = self._evaluate(spec, profile, timing)
        s = score(res)
        if accept is not None:
            improved = s is not None and accept(res)
        else:
            improved = s is not None and (self.best is None or s > self.best[2])
        if improved:
            self.best = (spec, res, s)
        if charge:
            self.usage.judged(improved and (progress is None or progress(res)))
        self.last, self.last_spec = res, spec
        self.record(
            kind="judge",
            kernel=kernel,
            layer=layer,
            proposal=label,
            spec=spec.to_dict(),
            verdict={
                "correct": res.correct,
                "reason": res.reason,
                "detail": (res.detail or "")[:1500],
                "speedups": res.speedups,
                "speedup_ci": res.speedup_ci,
                "text": verdict_text(res),
            },
            seconds=round(time.perf_counter() - t0, 3),
            phases={**res.extra.get("parent_phases", {}), **res.extra.get("phases", {})},
            improved=improved,
        )
        log.info(
            "%s %s step %d: %s %s -> %s",
            self.problem.id,
            self.method,
            self.steps,
            kernel,
            layer,
            verdict_text(res),
        )
        return res

    def _evaluate(
        self, spec: KernelSpec, profile=True, timing: TimingConfig | None = None, final: bool = False
    ) -> Result:
        config = self.cfg.judge(final, timing)
        return evaluate(self.problem.id, spec, self.cfg.backend, config, profile=profile, peak=self.cfg.peak)

    def final_judgment(self, spec: KernelSpec, label: str) -> Result:
        """A fresh judgment of a final candidate, after the method stopped: not charged, not a step of the
        search (the best stays as the search measured it); recorded in the trajectory as "final". It uses
        the full timing protocol even when the search used the short one (`--quick`): a short protocol's
        few rounds do not outvote a transient of a few milliseconds."""
        t0 = time.perf_counter()
        res = self._evaluate(spec, timing=self.cfg.final_timing or self.cfg.timing, final=True)
        self.record(
            kind="final",
            proposal=label,
            verdict={"correct": res.correct, "reason": res.reason, "speedups": res.speedups},
            text=verdict_text(res),
            seconds=round(time.perf_counter() - t0, 3),
        )
        return res

    def record(self, **fields) -> None:
        """One trajectory step, with the budget used so far."""
        u = self.usage
        self.store.put_agent_step(
            self.problem.id,
            self.method,
            self.steps,
            {
                **fields,
                "evals": u.evals,
                "calls": u.calls,
                "tokens": u.input_tokens + u.output_tokens,
                "cost": u.cost,
                "wall_s": round(u.wall_s, 3),
                "best_speedup": self.best_speedup,
            },
        )
        self.steps += 1
