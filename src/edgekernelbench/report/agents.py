"""The agents' part of a report: the method comparison, budget used per method, anytime curves.

A method's final candidate is a sample of the run like any other (method "agent:<label>", judged by the
same judge as `ekb eval`), so its Correct@1 / Fast@p / geomean come from `summarize` over those samples.
Budget use (model calls, judge evaluations, tokens, cost, wall time) comes from the run store's
agent_runs; the anytime curve (best speedup over tvm-default after each judge evaluation) from its
agent_steps. The curve uses each evaluation's point estimate of the speedup (what the agent saw); the
Fast@p columns use the final candidate's verdict, which counts a tie (interval containing p) as not fast.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from rich.table import Table

from .. import metrics
from ..records import Result
from .render import fmt_pct, fmt_speedup
from .summary import DEFAULT_BASELINES

__all__ = [
    "MethodRow",
    "SearchRow",
    "anytime_curves",
    "anytime_csv",
    "method_rows",
    "render_methods",
    "render_search",
    "search_rows",
]

AGENT_PREFIX = "agent:"
# a method's label ("direct@B") -> the method whose episode spent the budget ("direct")
_EPISODE = {"direct@B": "direct"}


@dataclass
class MethodRow:
    method: str  # "direct", "direct@B", "flat", "cli", "leka"
    problems: int  # problems with a final candidate
    correct_at_1: float | None
    fast: dict[str, float | None]  # baseline -> Fast@p
    geomean: dict[str, float | None]  # baseline -> geomean speedup over the correct candidates
    calls: int | None  # model calls (None: made inside an external agent, not counted)
    evals: int
    tokens: int
    cost: float | None  # None: some call's price is unknown
    wall_s: float
    reused_kernels: int  # kernels whose decision came from the kernel database
    stopped: dict[str, int]  # the limit that stopped the method -> problems

    def to_dict(self) -> dict:
        return asdict(self)


def method_rows(
    results: Iterable[Result],
    runs: dict[tuple[str, str], dict],
    steps: Sequence[dict],
    p: float = 1.0,
    baselines: Sequence[str] = DEFAULT_BASELINES,
) -> list[MethodRow]:
    """One row per agent method present in the run (results whose method is "agent:<label>")."""
    by_label: dict[str, list[Result]] = {}
    for r in results:
        if (r.method or "").startswith(AGENT_PREFIX):
            by_label.setdefault(r.method[len(AGENT_PREFIX) :], []).append(r)
    reused: dict[str, int] = {}
    for s in steps:
        if s.get("kind") == "reuse":
            reused[s["method"]] = reused.get(s["method"], 0) + len(s.get("kernels") or [])
    rows = []
    for label in sorted(by_label, key=_method_order):
        rs = by_label[label]
        correct = metrics.correct_at_k(rs, 1).value
        timed = {b for r in rs for b in r.speedups}  # a baseline nobody was timed against: "-", not 0%
        fast = {b: metrics.fast_at_k(rs, p, b, 1).value if b in timed else None for b in baselines}
        geo = {b: metrics.geomean_speedup(rs, b) for b in baselines}
        episode = _EPISODE.get(label, label)
        used = [rec.get("usage") or {} for (_, m), rec in runs.items() if m == episode]
        calls = [u.get("calls") for u in used]
        costs = [u.get("cost") for u in used]
        stopped: dict[str, int] = {}
        for u in used:
            if u.get("stopped"):
                stopped[u["stopped"]] = stopped.get(u["stopped"], 0) + 1
        rows.append(
            MethodRow(
                method=label,
                problems=len({r.problem for r in rs}),
                correct_at_1=correct,
                fast=fast,
                geomean=geo,
                calls=None if any(c is None for c in calls) else sum(calls),
                evals=sum(u.get("evals") or 0 for u in used),
                tokens=sum((u.get("input_tokens") or 0) + (u.get("output_tokens") or 0) for u in used),
                cost=None if any(c is None for c in costs) else round(sum(costs), 6),
                wall_s=round(sum(u.get("wall_s") or 0.0 for u in used), 1),
                reused_kernels=reused.get(episode, 0),
                stopped=stopped,
            )
        )
    return rows


_LANES = re.compile(r"/(\d+) lanes\b")  # a schedule point's label (search.variants.Config.label)


@dataclass(frozen=True)
class SearchRow:
    """Where one search episode's judgments went: how many it spent per improvement it kept, how many on
    candidates that failed, how many on points wider than the machine's vectors."""

    problem: str
    method: str
    judgments: int  # judgments charged to the budget (the final judgment is not one)
    kept: int  # of them, improvements the search kept
    failed: int  # of them, candidates that did not pass (not compiled, forbidden, wrong)
    too_wide: int | None  # of them, points with more float32 lanes than the machine's vectors (None: unknown)
    machine_lanes: int | None  # the float32 lanes of the vectors the search was given (the profile's)

    @property
    def per_kept(self) -> float | None:
        return self.judgments / self.kept if self.kept else None


def search_rows(
    runs: dict[tuple[str, str], dict], steps: Sequence[dict], method: str = "leka", lanes: int | None = None
) -> list[SearchRow]:
    """One row per episode of `method` in the run (agent_runs and agent_steps as the run store gives them).
    `lanes`: the machine's float32 lanes for an episode whose record does not say (a run from before it
    was recorded, read on the machine it ran on)."""
    default = lanes
    by_episode: dict[tuple[str, str], list[dict]] = {}
    for s in steps:
        if s.get("method") == method and s.get("kind") == "judge":
            by_episode.setdefault((s["problem"], s["method"]), []).append(s)
    rows = []
    for (problem, m), rec in sorted(runs.items()):
        if m != method:
            continue
        judged = by_episode.get((problem, m), [])
        lanes = rec.get("machine_lanes", default)
        lanes = lanes if isinstance(lanes, int) and lanes > 0 else None
        wide = None
        if lanes is not None:
            wide = sum(
                1
                for s in judged
                if (hit := _LANES.search(str(s.get("proposal") or ""))) and int(hit.group(1)) > lanes
            )
        rows.append(
            SearchRow(
                problem=problem,
                method=m,
                judgments=len(judged),
                kept=sum(1 for s in judged if s.get("improved")),
                failed=sum(1 for s in judged if not (s.get("verdict") or {}).get("correct")),
                too_wide=wide,
                machine_lanes=lanes,
            )
        )
    return rows


def render_search(rows: Sequence[SearchRow]) -> Table:
    """Where each search's judgments went (search_rows)."""
    table = Table(title="the search's judgments: per kept improvement, failed, wider than the machine's")
    for col in ("problem", "method", "judgments", "kept", "per kept", "failed", "too wide"):
        table.add_column(col, justify="left" if col in ("problem", "method") else "right")
    for r in rows:
        table.add_row(
            r.problem,
            r.method,
            str(r.judgments),
            str(r.kept),
            "-" if r.per_kept is None else f"{r.per_kept:.1f}",
            str(r.failed),
            "-" if r.too_wide is None else f"{r.too_wide} (> {r.machine_lanes} lanes)",
        )
    return table


def _method_order(label: str):
    order = ("direct", "direct@B", "flat", "cli", "leka", "metaschedule")
    return (order.index(label) if label in order else len(order), label)


def render_methods(rows: Sequence[MethodRow], p: float = 1.0) -> Table:
    """The method comparison the way agent papers print it, with the budget each method used."""
    baselines = list(rows[0].fast) if rows else []
    table = Table(title="agents: one budget per problem and method")
    table.add_column("method")
    table.add_column("problems", justify="right")
    table.add_column("Correct@1", justify="right")
    for b in baselines:
        table.add_column(f"Fast@{p:g} vs {b}", justify="right")
    for b in baselines:
        table.add_column(f"geomean vs {b}", justify="right")
    for col in ("calls", "evals", "tokens", "cost", "wall", "reused kernels"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            r.method,
            str(r.problems),
            fmt_pct(r.correct_at_1),
            *[fmt_pct(r.fast[b]) for b in baselines],
            *[fmt_speedup(r.geomean[b]) for b in baselines],
            "-" if r.calls is None else str(r.calls),
            str(r.evals),
            f"{r.tokens:,}",
            "-" if r.cost is None else f"${r.cost:.4f}",
            f"{r.wall_s:.0f} s",
            str(r.reused_kernels),
        )
    return table


def anytime_curves(steps: Sequence[dict]) -> dict:
    """The best speedup over tvm-default after each judge evaluation, per method: per problem (the points
    where it changed or an evaluation was made) and across problems (after e evaluations: how many
    problems have a correct candidate, the fraction of problems above 1.0, the geomean of the best
    speedups of those that have one). A problem that stopped early keeps its last best."""
    per: dict[str, dict[str, list[tuple[int, float | None]]]] = {}
    for s in steps:
        if s.get("kind") != "judge":
            continue
        per.setdefault(s["method"], {}).setdefault(s["problem"], []).append(
            (s["evals"], s.get("best_speedup"))
        )
    out = {}
    for method, problems in sorted(per.items()):
        horizon = max((e for pts in problems.values() for e, _ in pts), default=0)
        curve = []
        for e in range(1, horizon + 1):
            bests = []
            for pts in problems.values():
                seen = [b for k, b in pts if k <= e]
                bests.append(seen[-1] if seen else None)
            have = [b for b in bests if b is not None and b > 0]
            curve.append(
                {
                    "evals": e,
                    "problems": len(bests),
                    "with_correct": len(have),
                    "fast_1": sum(1 for b in have if b > 1.0) / len(bests),
                    "geomean_best": math.exp(sum(math.log(b) for b in have) / len(have)) if have else None,
                }
            )
        out[method] = {
            "curve": curve,
            "problems": {
                p: [{"evals": e, "best_speedup": b} for e, b in pts] for p, pts in sorted(problems.items())
            },
        }
    return out


def anytime_csv(curves: dict) -> str:
    """The anytime curves as CSV: one row per (method, problem, evaluation), and per (method, evaluation)
    for all problems (problem "all")."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["method", "problem", "evals", "best_speedup", "with_correct", "fast_1"])
    for method, c in curves.items():
        for pt in c["curve"]:
            w.writerow(
                [method, "all", pt["evals"], _num(pt["geomean_best"]), pt["with_correct"], _num(pt["fast_1"])]
            )
        for problem, pts in c["problems"].items():
            for pt in pts:
                w.writerow([method, problem, pt["evals"], _num(pt["best_speedup"]), "", ""])
    return buf.getvalue()


def _num(x: float | None) -> str:
    return "" if x is None else f"{x:.6g}"
