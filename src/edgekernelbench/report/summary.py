"""Summaries of a run: the benchmark metrics per backend and level, as plain data.

All rates are k = 1 estimates (see `edgekernelbench.metrics`): each problem counts once,
with the fraction of its samples that compiled / are correct / are fast. Geometric-mean
speedups and roofline fractions are taken over the correct samples (sample-weighted); a roofline
fraction above 1 (a measurement error) is counted in `roofline_flags`, not averaged in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from .. import metrics
from ..records import Result

__all__ = [
    "DEFAULT_BASELINES",
    "DEFAULT_PS",
    "BackendSummary",
    "LevelSummary",
    "Summary",
    "above_roof_lines",
    "authentication_lines",
    "baseline_output_inexact",
    "inexact_baseline_lines",
    "level_label",
    "node_lines",
    "node_rows",
    "per_problem_rows",
    "sample_status",
    "summaries_by_method",
    "summarize",
    "timing_lines",
    "unauthenticated_results",
]

DEFAULT_BASELINES = ("tvm-default", "onnxruntime")
DEFAULT_PS = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
ALL = "all"
NOT_CHECKED = "not_checked"  # Result.reason of a sample compiled on a backend that cannot run it


def level_label(level: int | None) -> str:
    """ "L1", "L2", ... ("L?" for an id without a level)."""
    return f"L{level}" if level is not None else "L?"


@dataclass
class LevelSummary:
    level: str  # "L1", "L2", ... or "all"
    problems: int
    samples: int
    compile_at_1: float | None
    correct_at_1: float | None
    fast: dict[str, dict[float, float | None]] = field(default_factory=dict)  # baseline -> p -> Fast@p
    # baseline -> p -> samples whose speedup interval contains p (neither fast nor slow; metrics.verdict)
    ties: dict[str, dict[float, int]] = field(default_factory=dict)
    geomean_speedup: dict[str, float | None] = field(default_factory=dict)  # baseline -> geomean
    roofline_fraction: float | None = None  # mean over correct samples that carry one, not above their roof
    roofline_flags: int = 0  # correct samples above their roof: measurement errors, left out of the mean
    not_checked: int = 0  # samples that compiled on a backend with no device to check them on
    disturbed: int = 0  # timed samples whose timing ran while the machine's other CPUs were busy
    # baseline -> samples timed against it whose baseline output differed from the oracle (ONNX Runtime's
    # 8-bit integer GEMM on a CPU without VNNI): those speedups are against an inexact result
    baseline_inexact: dict[str, int] = field(default_factory=dict)
    # samples counted here whose row of the run store failed authentication (store.py): only with
    # `ekb report --trust-unauthenticated`; without it such rows are left out of every summary
    unauthenticated: int = 0

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["fast"] = {b: {_pkey(p): v for p, v in ps.items()} for b, ps in self.fast.items()}
        d["ties"] = {b: {_pkey(p): v for p, v in ps.items()} for b, ps in self.ties.items()}
        return d


@dataclass
class BackendSummary:
    backend: str
    levels: list[LevelSummary]  # by level, then "all" last

    def level(self, name: str) -> LevelSummary:
        for lv in self.levels:
            if lv.level == name:
                return lv
        raise KeyError(name)

    @property
    def all(self) -> LevelSummary:
        return self.level(ALL)

    def to_dict(self) -> dict:
        return {"backend": self.backend, "levels": [lv.to_dict() for lv in self.levels]}


@dataclass
class Summary:
    baselines: tuple[str, ...]
    ps: tuple[float, ...]
    backends: list[BackendSummary]

    def backend(self, name: str) -> BackendSummary:
        for b in self.backends:
            if b.backend == name:
                return b
        raise KeyError(name)

    def to_dict(self) -> dict:
        return {
            "baselines": list(self.baselines),
            "ps": list(self.ps),
            "backends": [b.to_dict() for b in self.backends],
        }


def _pkey(p: float) -> str:
    return repr(float(p))


def _level_summary(
    name: str,
    results: list[Result],
    baselines: Sequence[str],
    ps: Sequence[float],
    unauthenticated: Collection[tuple[str, int, str]] = (),
):
    groups = metrics.outcomes(results)
    compile1 = metrics.compile_at_k(results, 1)
    correct1 = metrics.correct_at_k(results, 1)
    not_checked = sum(1 for r in results if r.reason == NOT_CHECKED)
    # a compile-only backend (nothing could be run) has no Correct@1 / Fast@p: "-", not 0%
    checked = not not_checked or any(r.correct or r.correctness is not None for r in results)
    # a backend that cannot time (emulated, compile-only) or a baseline that cannot run there (ONNX
    # Runtime on a remote board): correct samples exist but none has that speedup, so Fast@p is
    # unknown ("-"), not 0%; a backend whose candidates are all wrong still gets 0%
    any_correct = any(r.correct for r in results)

    def known(b: str) -> bool:
        return checked and (not any_correct or any(b in r.speedups for r in results))

    return LevelSummary(
        level=name,
        problems=len(groups),
        samples=len(results),
        compile_at_1=compile1.value,
        correct_at_1=correct1.value if checked else None,
        fast={
            b: {float(p): metrics.fast_at_k(results, p, b, 1).value if known(b) else None for p in ps}
            for b in baselines
        },
        ties={b: {float(p): metrics.ties(results, p, b) for p in ps} for b in baselines if known(b)},
        geomean_speedup={b: metrics.geomean_speedup(results, b) for b in baselines},
        roofline_fraction=metrics.mean_roofline_fraction(results),
        roofline_flags=metrics.roofline_flags(results),
        not_checked=not_checked,
        disturbed=sum(1 for r in results if timing_disturbed(r)),
        baseline_inexact={
            b: n for b in baselines if (n := sum(1 for r in results if baseline_output_inexact(r, b)))
        },
        unauthenticated=sum(1 for r in results if _key(r) in unauthenticated),
    )


def _key(r: Result) -> tuple[str, int, str]:
    return (r.problem, r.sample, r.backend)


def baseline_output_inexact(r: Result, baseline: str) -> bool:
    """True when `r` was timed against `baseline` and the baseline's own output, checked by the judge
    (extra["<baseline>_output"], harness/evaluate.py), did not match the oracle."""
    check = r.extra.get(f"{baseline}_output")
    return baseline in r.speedups and isinstance(check, dict) and check.get("matches_oracle") is False


def summarize(
    results: Iterable[Result],
    baselines: Sequence[str] = DEFAULT_BASELINES,
    ps: Sequence[float] = DEFAULT_PS,
    unauthenticated: Collection[tuple[str, int, str]] = (),
) -> Summary:
    """Metrics for each backend (sorted), for each level present and for "all", over `results` (the
    caller chooses them: a report passes the authenticated ones, or all with --trust-unauthenticated).

    Results whose problem id has no level ("L<n>/...") only count in "all". `unauthenticated`: the
    (problem, sample, backend) keys whose row failed authentication, counted per level.
    """
    baselines = tuple(baselines)
    ps = tuple(float(p) for p in ps)
    by_backend: dict[str, list[Result]] = {}
    for r in results:
        by_backend.setdefault(r.backend, []).append(r)
    out = []
    for backend in sorted(by_backend):
        rs = by_backend[backend]
        by_level: dict[int, list[Result]] = {}
        for r in rs:
            lv = metrics.level_of(r.problem)
            if lv is not None:
                by_level.setdefault(lv, []).append(r)
        levels = [
            _level_summary(level_label(lv), by_level[lv], baselines, ps, unauthenticated)
            for lv in sorted(by_level)
        ]
        levels.append(_level_summary(ALL, rs, baselines, ps, unauthenticated))
        out.append(BackendSummary(backend, levels))
    return Summary(baselines, ps, out)


def above_roof_lines(results: Iterable[Result]) -> list[str]:
    """One line per correct sample above its roof (a measurement error, left out of the mean roofline
    fraction), sorted: which sample, and the record's reason (which roof, by how much, likely cause)."""
    lines = []
    for r in sorted(results, key=lambda r: (r.backend, r.problem, r.sample)):
        roof = r.roofline
        if r.correct and metrics.above_roof(roof):
            why = roof.reason or f"fraction {roof.fraction:.3g} (recorded before roofs had flags)"
            lines.append(f"above roof: {r.problem} sample {r.sample} on {r.backend}: {why}")
    return lines


def timing_disturbed(r: Result) -> bool:
    """The sample was timed while the machine's other CPUs were busy (harness/timing.py MachineWatch):
    its speedups may not reproduce on a quiet machine."""
    return bool(r.runtime is not None and r.timing_env and r.timing_env.disturbed)


def sample_status(r: Result) -> str:
    """ "correct", "compile-only" (compiled, not checked: no device), else the failure reason,
    else "incorrect" / "not compiled"."""
    if r.correct:
        return "correct"
    if r.reason == NOT_CHECKED:
        return "compile-only"
    if r.reason:
        return r.reason
    return "incorrect" if r.compiled else "not compiled"


def _short(text: str, limit: int = 120) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    line = lines[-1] if lines else ""  # compiler errors put the message last
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _compile_only_detail(r: Result) -> str:
    kernels = r.extra.get("device_kernels") or []
    lang = r.extra.get("device_language") or "device"
    if not kernels:
        return "compiled; no device here to check it on"
    return _short(f"{lang} kernels: {', '.join(kernels)}")


def per_problem_rows(
    results: Iterable[Result],
    baselines: Sequence[str] | None = None,
    unauthenticated: Collection[tuple[str, int, str]] = (),
) -> list[dict]:
    """One row per sample, sorted by (backend, problem, sample), for a detail table.

    Keys: problem, backend, sample, status, detail (one short line), runtime_us (median, or None),
    speedups {baseline: float | None} for `baselines` (default: every baseline any result has),
    oracle (what judged it), inexact_baselines (those of `baselines` whose own output differed from the
    oracle's: `baseline_output_inexact`), authenticated (False for the keys in `unauthenticated`: rows of
    the run store that failed authentication).
    """
    results = list(results)
    if baselines is None:
        baselines = sorted({b for r in results for b in r.speedups})
    rows = []
    for r in sorted(results, key=lambda r: (r.backend, r.problem, r.sample)):
        rows.append(
            {
                "problem": r.problem,
                "backend": r.backend,
                "sample": r.sample,
                "status": sample_status(r),
                "detail": _compile_only_detail(r)
                if r.reason == NOT_CHECKED
                else ""
                if r.correct
                else _short(r.detail),
                "runtime_us": r.runtime.median * 1e6 if r.runtime is not None else None,
                "speedups": {b: r.speedups.get(b) for b in baselines},
                "speedup_ci": {b: r.speedup_ci.get(b) for b in baselines if b in r.speedup_ci},
                "oracle": r.oracle,
                "inexact_baselines": [b for b in baselines if baseline_output_inexact(r, b)],
                "authenticated": _key(r) not in unauthenticated,
                "node": r.node.label if r.node else "",
            }
        )
    return rows


@dataclass(frozen=True)
class NodeRow:
    """What one node judged in a run (Result.node): how many samples, correct, timed."""

    node: str  # Node.label
    cpu: str  # its CPU as the OS and LLVM name it
    isa: str
    judged: int
    correct: int
    timed: int

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def node_rows(results: Iterable[Result]) -> list[NodeRow]:
    """One row per node that judged some of `results` ("unknown": results from before nodes were recorded),
    by label."""
    groups: dict[str, list[Result]] = {}
    for r in results:
        groups.setdefault(r.node.label if r.node else "unknown", []).append(r)
    rows = []
    for label, rs in sorted(groups.items()):
        n = rs[0].node
        cpu = f"{n.cpu_model} ({n.llvm_cpu})" if n else "-"
        isa = ",".join(n.isa) if n else "-"
        timed = sum(1 for r in rs if r.correct and r.runtime is not None)
        rows.append(NodeRow(label, cpu, isa, len(rs), sum(r.correct for r in rs), timed))
    return rows


def node_lines(results: Iterable[Result]) -> list[str]:
    """The line that says a run's timings come from more than one CPU model (speedups are paired per
    judgment, so they stay comparable; absolute times are not); none when they come from one."""
    models: dict[str, int] = {}
    for r in results:
        if r.correct and r.runtime is not None and r.node is not None:
            key = f"{r.node.cpu_model} ({r.node.llvm_cpu}; {','.join(r.node.isa) or 'no vector ISA'})"
            models[key] = models.get(key, 0) + 1
    if len(models) < 2:
        return []
    each = "; ".join(f"{n} on {m}" for m, n in sorted(models.items()))
    return [
        f"note: this run's timings come from {len(models)} CPU models ({each}): each speedup is paired "
        "within its judgment, so speedups compare; absolute times (median us) do not"
    ]


def unauthenticated_results(unauthenticated: dict[str, list[tuple]]) -> set[tuple[str, int, str]]:
    """The (problem, sample, backend) keys of the results rows in RunStore.unauthenticated()'s answer."""
    return {(p, s, b) for p, s, b in unauthenticated.get("results", [])}


def authentication_lines(unauthenticated: dict[str, list[tuple]], trusted: bool) -> list[str]:
    """The line that says how many rows of a run store failed authentication (RunStore.unauthenticated()'s
    answer), per table, and whether the report left them out of its metrics or counted them
    (`trusted`: --trust-unauthenticated); none when every row authenticates."""
    n = sum(len(keys) for keys in unauthenticated.values())
    if not n:
        return []
    tables = ", ".join(f"{table}: {len(keys)}" for table, keys in unauthenticated.items())
    head = f"{n} row{'s' if n != 1 else ''} of results.db failed authentication ({tables})"
    if trusted:
        return [f"warning: {head}; counted in the metrics as --trust-unauthenticated asks"]
    verb = "are" if n != 1 else "is"
    return [f"warning: {head} and {verb} left out of the metrics; --trust-unauthenticated counts them"]


def inexact_baseline_lines(results, baselines) -> list[str]:
    """One line per baseline whose own output differed from the oracle for some timed samples."""
    lines = []
    for b in baselines:
        hit = [r for r in results if baseline_output_inexact(r, b)]
        if hit:
            problems = sorted({r.problem for r in hit})
            lines.append(
                f"note: {b}'s own output differed from the oracle on {len(hit)} timed sample(s) "
                f"({', '.join(problems)}): speedups against it there are against an inexact result "
                f"(extra.{b}_output in each result)"
            )
    return lines


def timing_lines(results, p: float) -> list[str]:
    """What to know about the timings: ties at p, and samples timed on a busy machine."""
    lines = []
    timed = [r for r in results if r.correct and r.runtime is not None]
    tied = sum(1 for r in timed if any(metrics.verdict(r, p, b) == "tie" for b in r.speedups))
    if tied:
        lines.append(
            f"note: {tied} of {len(timed)} timed sample(s) tie with a baseline at p = {p:g}: the 95% "
            f"interval of their speedup contains {p:g}, so they count as neither fast nor slow"
        )
    for r in timed:
        if r.plausibility and r.plausibility.status.startswith("implausible"):
            lines.append(f"note: {r.problem}#{r.sample} on {r.backend}: {r.plausibility.reason}")
    busy = [r for r in timed if timing_disturbed(r)]
    if busy:
        share = max((r.timing_env.other_cpus_busy or 0.0) for r in busy if r.timing_env)
        lines.append(
            f"note: {len(busy)} of {len(timed)} timed sample(s) were timed while the machine's other CPUs "
            f"were busy (up to {share:.0%} of the time): their speedups may not reproduce on a quiet machine "
            f"(timing_env in each result)"
        )
    return lines


def summaries_by_method(results, unauthenticated: Collection[tuple[str, int, str]] = ()) -> dict:
    """The metrics of each method (model) that made candidates in a run: "llm:openai:gpt-4o", "rules", ...
    (`unauthenticated`: as for `summarize`)."""
    groups: dict[str, list] = {}
    for r in results:
        groups.setdefault(r.method or "unknown", []).append(r)
    return {m: summarize(rs, unauthenticated=unauthenticated) for m, rs in sorted(groups.items())}


def generation_lines(records: list[dict], prefix: str = "") -> list[str]:
    """One line per model that generated a run's candidates (the run store's generation records): samples,
    cache hits, failures, tokens, cost, template."""
    from ..llm.generate import generation_summary

    lines = []
    for m in generation_summary(records):
        cost = "unknown" if m["cost"] is None else f"${m['cost']:.4f}"
        lines.append(
            f"{prefix}{m['model']}: {m['samples']} samples ({m['cached']} cached, {m['parse_errors']} "
            f"without code, {m['provider_errors']} failed calls), tokens {m['input_tokens']:,} in / "
            f"{m['output_tokens']:,} out, cost {cost}; template {', '.join(m['templates'])}"
        )
    return lines
