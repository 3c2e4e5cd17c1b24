"""One budget, counted the same way for every method: model calls, judge evaluations, wall time.

Every method of one problem spends through one `Usage`: a charge past a limit raises `BudgetExhausted`,
which the method's loop catches in one place (what it found so far stands). Tokens and cost are
recorded, not limited."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field


class BudgetExhausted(Exception):
    """A limit of the budget was reached; str(e) says which."""


@dataclass(frozen=True)
class Budget:
    calls: int = 8  # model calls per problem and method
    evals: int = 8  # judge evaluations per problem and method
    wall_s: float = 1800.0  # wall-clock cap per problem and method


@dataclass
class Usage:
    budget: Budget
    calls: int = 0
    evals: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = 0.0  # None once a call's price is unknown
    cached_calls: int = 0
    stopped: str = ""  # what stopped the method ("evals", "calls", "wall", "patience"); "" if it finished
    started: float = field(default_factory=time.monotonic)
    # a method that sets it (LEKA) stops once this many judgments in a row have not improved its best
    # (0: never); `since_improved` counts them
    patience: int = 0
    since_improved: int = 0

    @property
    def wall_s(self) -> float:
        return time.monotonic() - self.started

    def _check_wall(self) -> None:
        if self.wall_s > self.budget.wall_s:
            self.stopped = "wall"
            raise BudgetExhausted(f"the wall-clock cap of {self.budget.wall_s:.0f} s is reached")

    def charge_call(self) -> None:
        """Counts one model call, before it is made (a call that fails still counts)."""
        self._check_wall()
        if self.calls >= self.budget.calls:
            self.stopped = "calls"
            raise BudgetExhausted(f"all {self.budget.calls} model calls are used")
        self.calls += 1

    def charge_eval(self) -> None:
        """Counts one judge evaluation, before it runs."""
        self._check_wall()
        if self.evals >= self.budget.evals:
            self.stopped = "evals"
            raise BudgetExhausted(f"all {self.budget.evals} judge evaluations are used")
        if self.patience and self.since_improved >= self.patience:
            self.stopped = "patience"
            raise BudgetExhausted(f"no improvement in the last {self.since_improved} judgments (patience)")
        self.evals += 1

    def judged(self, improved: bool) -> None:
        """Records whether a charged judgment improved the method's best (for `patience`)."""
        self.since_improved = 0 if improved else self.since_improved + 1

    def record_tokens(
        self, input_tokens: int | None, output_tokens: int | None, cost: float | None, cached: bool
    ):
        self.input_tokens += input_tokens or 0
        self.output_tokens += output_tokens or 0
        self.cached_calls += int(cached)
        self.cost = None if cost is None or self.cost is None else round(self.cost + cost, 8)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("started")
        d["budget"] = asdict(self.budget)
        d["wall_s"] = round(self.wall_s, 3)
        return d
