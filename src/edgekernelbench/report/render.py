"""Renders a `Summary`: rich tables for the terminal, JSON and CSV for files."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Collection, Iterable, Sequence

from rich.table import Table
from rich.text import Text

from ..records import Result
from .summary import Summary, per_problem_rows

__all__ = [
    "CSV_FIELDS",
    "UNAUTHENTICATED_MARK",
    "fmt_pct",
    "fmt_speedup",
    "render_backend_matrix",
    "render_problem_table",
    "render_table",
    "render_tables",
    "to_csv",
    "to_json",
]

CSV_FIELDS = (
    "backend",
    "level",
    "problems",
    "samples",
    "compile_at_1",
    "correct_at_1",
    "baseline",
    "p",
    "fast_at_1",
    "ties",
    "geomean_speedup",
    "roofline_fraction",
    "roofline_flags",  # correct samples above their roof (measurement errors), left out of the fraction
    "baseline_inexact",  # samples whose baseline output differed from the oracle (LevelSummary)
    "unauthenticated",  # samples counted whose run-store row failed authentication (--trust-unauthenticated)
)

_NONE = "-"
_STATUS_STYLE = {"correct": "green", "compile-only": "yellow"}
UNAUTHENTICATED_MARK = "(unauthenticated)"  # after the status of a sample whose run-store row failed it


def fmt_pct(x: float | None) -> str:
    """0.6667 -> "66.7%"; None -> "-"."""
    return _NONE if x is None else f"{100.0 * x:.1f}%"


def fmt_fast(lv, baseline: str, p: float) -> str:
    """Fast@p of a level against a baseline, with the samples that tie at p: "82.1% (3 ties)"."""
    text = fmt_pct(lv.fast.get(baseline, {}).get(p))
    n = lv.ties.get(baseline, {}).get(p, 0)
    return f"{text} ({n} tie{'s' if n != 1 else ''})" if n else text


def fmt_roof(lv) -> str:
    """A level's mean roofline fraction, with the samples above their roof (left out of the mean):
    "41.0% (2 above roof)"."""
    text = fmt_pct(lv.roofline_fraction)
    n = lv.roofline_flags
    return f"{text} ({n} above roof)" if n else text


def fmt_speedup(x: float | None) -> str:
    """1.234 -> "1.23x"; None -> "-"."""
    if x is None:
        return _NONE
    return f"{x:.2f}x" if math.isfinite(x) else f"{x}x"


def _p_label(p: float) -> str:
    return f"{p:g}" if p != int(p) else f"{p:.1f}"


def _check_p(summary: Summary, p: float) -> float:
    for q in summary.ps:
        if math.isclose(q, p):
            return q
    raise ValueError(f"Fast@{p} was not computed; the summary has p in {list(summary.ps)}")


def render_table(summary: Summary, p_headline: float = 1.0, backend: str | None = None) -> Table:
    """The metrics table of one backend (columns: level, problems, samples, Compile@1, Correct@1,
    Fast@p_headline and geomean speedup vs each baseline, roofline fraction when known, with the count
    of samples above their roof, which the mean leaves out; the samples counted whose run-store row
    failed authentication when there are any: `ekb report --trust-unauthenticated`).

    `backend` defaults to the summary's only backend; with several and none named, one table holds
    them all, with a backend column and a section per backend.
    """
    p = _check_p(summary, p_headline)
    bsums = [summary.backend(backend)] if backend is not None else list(summary.backends)
    combined = len(bsums) > 1
    show_roof = any(lv.roofline_fraction is not None or lv.roofline_flags for b in bsums for lv in b.levels)
    show_unauth = any(lv.unauthenticated for b in bsums for lv in b.levels)
    # baselines whose own output differed from the oracle somewhere: a count column after the geomeans
    inexact = [
        b for b in summary.baselines if any(lv.baseline_inexact.get(b) for bs in bsums for lv in bs.levels)
    ]

    title = f"EdgeKernelBench: {bsums[0].backend}" if len(bsums) == 1 else "EdgeKernelBench"
    table = Table(title=Text(title))  # names are data, not markup
    if combined:
        table.add_column("backend")
    table.add_column("level")
    table.add_column("problems", justify="right")
    table.add_column("samples", justify="right")
    table.add_column("Compile@1", justify="right")
    table.add_column("Correct@1", justify="right")
    for b in summary.baselines:
        table.add_column(f"Fast@{_p_label(p)} vs {b}", justify="right")
    for b in summary.baselines:
        table.add_column(f"geomean vs {b}", justify="right")
    for b in inexact:
        table.add_column(f"{b} output inexact", justify="right")
    if show_roof:
        table.add_column("roofline", justify="right")
    if show_unauth:
        table.add_column("unauthenticated", justify="right")

    for i, bs in enumerate(bsums):
        for j, lv in enumerate(bs.levels):
            row = [Text(bs.backend)] if combined else []
            row += [
                lv.level,
                str(lv.problems),
                str(lv.samples),
                fmt_pct(lv.compile_at_1),
                fmt_pct(lv.correct_at_1),
            ]
            row += [fmt_fast(lv, b, p) for b in summary.baselines]
            row += [fmt_speedup(lv.geomean_speedup.get(b)) for b in summary.baselines]
            row += [str(lv.baseline_inexact.get(b, 0)) for b in inexact]
            if show_roof:
                row.append(fmt_roof(lv))
            if show_unauth:
                row.append(str(lv.unauthenticated))
            last = j == len(bs.levels) - 1
            table.add_row(
                *row,
                style="bold" if lv.level == "all" else None,
                end_section=last and i < len(bsums) - 1,
            )
    return table


def render_tables(summary: Summary, p_headline: float = 1.0) -> list[Table]:
    """One `render_table` per backend."""
    return [render_table(summary, p_headline, b.backend) for b in summary.backends]


def render_backend_matrix(
    summary: Summary, p_headline: float = 1.0, baselines: Sequence[str] | None = None
) -> Table:
    """One table for all backends: a row per level (and "all"), a column group per backend with
    Compile@1, Correct@1 and Fast@p_headline vs each baseline ("-" where not measured: a level the
    backend has no results for, Correct@1 / Fast@p of a compile-only backend, a missing baseline)."""
    p = _check_p(summary, p_headline)
    bls = list(summary.baselines if baselines is None else baselines)
    levels: list[str] = []
    for bs in summary.backends:
        for lv in bs.levels:
            if lv.level not in levels:
                levels.append(lv.level)
    levels = sorted((lv for lv in levels if lv != "all"), key=_level_order) + (
        ["all"] if "all" in levels else []
    )
    table = Table(title=Text("EdgeKernelBench: " + ", ".join(b.backend for b in summary.backends)))
    table.add_column("level")
    table.add_column("problems", justify="right")
    metrics = [("Compile@1", None), ("Correct@1", None)] + [(f"Fast@{_p_label(p)}", b) for b in bls]
    for bs in summary.backends:
        for k, (name, b) in enumerate(metrics):
            head = bs.backend if k == 0 else ""
            label = f"{name}\n" if b is None else f"{name}\nvs {b}"
            # a column group per backend: its name heads the group's first column, on its own line
            table.add_column(Text(f"{head}\n{label}", style="bold"), justify="right")
    for name in levels:
        found = [_level_or_none(bs, name) for bs in summary.backends]
        problems = max((lv.problems for lv in found if lv is not None), default=0)
        row = [name, str(problems)]
        for lv in found:
            if lv is None:
                row += [_NONE] * len(metrics)
                continue
            row += [fmt_pct(lv.compile_at_1), fmt_pct(lv.correct_at_1)]
            row += [fmt_fast(lv, b, p) for b in bls]
        table.add_row(*row, style="bold" if name == "all" else None)
    return table


def _level_order(name: str):
    return (0, int(name[1:])) if name[1:].isdigit() else (1, name)


def _level_or_none(bs, name: str):
    try:
        return bs.level(name)
    except KeyError:
        return None


def to_json(summary: Summary, indent: int | None = 2) -> str:
    """The summary as JSON (Fast@p keys are the p values as strings, e.g. "1.0")."""
    return json.dumps(summary.to_dict(), indent=indent)


def to_csv(summary: Summary) -> str:
    """One row per backend / level / baseline / p (fractions, not percentages; empty = none)."""

    def num(x):
        return "" if x is None else x

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for bs in summary.backends:
        for lv in bs.levels:
            common = {
                "backend": bs.backend,
                "level": lv.level,
                "problems": lv.problems,
                "samples": lv.samples,
                "compile_at_1": num(lv.compile_at_1),
                "correct_at_1": num(lv.correct_at_1),
                "roofline_fraction": num(lv.roofline_fraction),
                "roofline_flags": lv.roofline_flags,
                "unauthenticated": lv.unauthenticated,
            }
            if not summary.baselines or not summary.ps:
                w.writerow(
                    {**common, "baseline": "", "p": "", "fast_at_1": "", "ties": "", "geomean_speedup": ""}
                )
                continue
            for b in summary.baselines:
                for p in summary.ps:
                    w.writerow(
                        {
                            **common,
                            "baseline": b,
                            "p": p,
                            "fast_at_1": num(lv.fast.get(b, {}).get(p)),
                            "ties": num(lv.ties.get(b, {}).get(p)),
                            "geomean_speedup": num(lv.geomean_speedup.get(b)),
                            "baseline_inexact": lv.baseline_inexact.get(b, 0),
                        }
                    )
    return buf.getvalue()


def _speedup_cell(row: dict, baseline: str) -> str:
    """ "1.23x"; "1.02x ~" when the speedup's confidence interval contains 1 (a tie at p = 1)."""
    text = fmt_speedup(row["speedups"].get(baseline))
    ci = row.get("speedup_ci", {}).get(baseline)
    return f"{text} ~" if ci and ci[0] <= 1.0 <= ci[1] else text


def render_problem_table(
    results: Iterable[Result],
    baselines: Sequence[str] | None = None,
    title: str = "Samples",
    unauthenticated: Collection[tuple[str, int, str]] = (),
) -> Table:
    """A detail table: one row per sample (problem, backend, sample, status, runtime, speedups; "~" marks
    a speedup whose confidence interval contains 1: a tie; UNAUTHENTICATED_MARK follows the status of the
    samples whose (problem, sample, backend) is in `unauthenticated`: their run-store row failed
    authentication)."""
    rows = per_problem_rows(results, baselines, unauthenticated)
    bls = list(baselines) if baselines is not None else sorted({b for r in rows for b in r["speedups"]})
    nodes = len({r["node"] for r in rows}) > 1  # judged on several nodes: which judged what
    table = Table(title=title)
    for name, justify in (
        ("problem", "left"),
        ("backend", "left"),
        ("sample", "right"),
        ("status", "left"),
        ("median us", "right"),
    ):
        table.add_column(name, justify=justify)
    for b in bls:
        table.add_column(f"vs {b}", justify="right")
    if nodes:
        table.add_column("node")
    table.add_column("detail", overflow="fold")
    for r in rows:
        # Text, not markup: problem ids and compiler messages may contain "[...]"
        table.add_row(
            Text(r["problem"]),
            Text(r["backend"]),
            str(r["sample"]),
            _status_cell(r),
            _NONE if r["runtime_us"] is None else f"{r['runtime_us']:.1f}",
            *[_speedup_cell(r, b) for b in bls],
            *([Text(r["node"] or "-")] if nodes else []),
            Text(_detail_cell(r)),
        )
    return table


def render_node_table(rows: Sequence) -> Table:
    """Which node judged what (report.summary.node_rows)."""
    table = Table(title="judged by node")
    for name in ("node", "CPU", "ISA", "samples", "correct", "timed"):
        table.add_column(name, justify="right" if name in ("samples", "correct", "timed") else "left")
    for r in rows:
        table.add_row(Text(r.node), Text(r.cpu), r.isa, str(r.judged), str(r.correct), str(r.timed))
    return table


def _status_cell(row: dict) -> Text:
    if not row["authenticated"]:
        return Text(f"{row['status']} {UNAUTHENTICATED_MARK}", style="magenta")
    return Text(row["status"], style=_STATUS_STYLE.get(row["status"], "red"))


def _detail_cell(row: dict) -> str:
    """The row's detail, and which baselines' own output differed from the oracle (their speedup is
    against an inexact result)."""
    notes = [f"{b} output != oracle ({row.get('oracle') or '?'})" for b in row.get("inexact_baselines", [])]
    return "; ".join(filter(None, [row["detail"], *notes]))
