"""`ekb report RUN [RUN ...] --html FILE`: the report of one or more runs as one self-contained static page.

Nothing on the page is fetched: the plots are inline SVG drawn with matplotlib (text kept as text, ids
made unique per plot), the styles and the few lines of JavaScript (sortable tables, a viewer for a
candidate's source or decisions and a failure's full detail) are inline. The page holds:

* the summary tables the terminal shows (`render_tables`, the backend matrix, one set per method),
  converted from the same rich tables, and the notes printed under them;
* Fast@p curves per backend, p from 0 to the largest speedup, one line per method (or run), against
  each baseline: exact steps at the lower ends of the speedups' confidence intervals (`metrics.verdict`);
* a roofline per backend with timed candidates: the measured ceilings (peak FLOP/s, the bandwidth of
  each memory level of the run's peak record) and each correct, timed candidate, coloured by level;
* for runs made by `ekb agent`: the method comparison (`method_rows`) and the anytime curves;
* the failure reasons per method, the per-sample table (sortable) and the runs' metadata.

Several runs are compared on the problems they all have (the others are named, not shown).
"""

from __future__ import annotations

import html as htmllib
import io
import json
import logging
import math
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import matplotlib
from markupsafe import Markup
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter, PercentFormatter
from rich.table import Table
from rich.text import Text

from .. import metrics
from ..errors import EKBError, ReportError, RunDirError
from ..records import FAIL_REASONS, Result
from ..store import DB_NAME, ENV_KEY, RunStore, host_environment
from .agents import anytime_curves, method_rows, render_methods
from .render import UNAUTHENTICATED_MARK, fmt_pct, fmt_speedup, render_backend_matrix, render_tables
from .summary import (
    BackendSummary,
    Summary,
    above_roof_lines,
    authentication_lines,
    generation_lines,
    inexact_baseline_lines,
    level_label,
    per_problem_rows,
    sample_status,
    summaries_by_method,
    summarize,
    timing_lines,
    unauthenticated_results,
)

__all__ = [
    "RunData",
    "build_html",
    "check_output_path",
    "common_problems",
    "fast_curve",
    "load_run",
    "table_html",
    "write_html",
]

log = logging.getLogger(__name__)

TEMPLATE_DIR = Path(__file__).parent / "templates"
SOURCE_LIMIT = 30_000  # characters of a candidate's source or decisions kept on the page
DETAIL_LIMIT = 4_000  # characters of a failure's detail (Result.failure keeps as many)
_RC = {
    "svg.fonttype": "none",  # text stays text: small, and searchable on the page
    "svg.hashsalt": "edgekernelbench",  # the same run renders the same page
    "font.size": 8,
    "axes.titlesize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.fontsize": 7,
    "legend.frameon": False,
}
_NO_METADATA = {"Creator": None, "Date": None, "Format": None, "Type": None}
_LEVEL_COLORS = {"L1": "#1f77b4", "L2": "#ff7f0e", "L3": "#2ca02c", "L4": "#9467bd", "L?": "#7f7f7f"}
_MARKERS = "osD^vP*X<>"
_STATUS_COLORS = {"correct": "#2ca02c", "compile-only": "#bcbd22"}
_REASON_COLORS = (
    "#d62728",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#17becf",
    "#1f77b4",
    "#ff9896",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#dbdb8d",
    "#9edae5",
    "#aec7e8",
)


# ------------------------------------------------------------------------------------------------ data
@dataclass
class RunData:
    """What the page shows of one run directory (its results limited to the problems compared)."""

    label: str
    path: Path
    results: list[Result]
    agent_runs: dict[tuple[str, str], dict] = field(default_factory=dict)
    agent_steps: list[dict] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)  # eval_config, agent_config, generation_config, ...
    peaks: dict[str, dict] = field(default_factory=dict)  # backend -> the peak record its roofline used
    created: tuple[float, float] | None = None  # first and last result stored
    generations: list[dict] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # problems not in every run compared
    # the rows of its store that failed authentication (RunStore.unauthenticated(): table -> keys); the
    # results among them are in `results` (counted) with `trusted` (--trust-unauthenticated), else in
    # `excluded` (shown in the per-sample table, marked, and in no metric)
    unauthenticated: dict[str, list[tuple]] = field(default_factory=dict)
    trusted: bool = False
    excluded: list[Result] = field(default_factory=list)

    def restrict(self, problems: set[str]) -> None:
        """Keeps only `problems` (the ones every compared run has); notes the others in `left_out`."""
        self.left_out = sorted({r.problem for r in self.results} - problems)
        self.results = [r for r in self.results if r.problem in problems]
        self.excluded = [r for r in self.excluded if r.problem in problems]
        self.agent_steps = [s for s in self.agent_steps if s.get("problem") in problems]
        self.agent_runs = {k: v for k, v in self.agent_runs.items() if k[0] in problems}


def load_run(run_dir: Path | str, label: str | None = None, trust: bool = False) -> RunData:
    """Reads a run directory's store: results, agent trajectories, configs, peaks, environments; of each
    table the rows that authenticate (store.py), or all with `trust` (--trust-unauthenticated)."""
    run_dir = Path(run_dir)
    if not run_dir.joinpath(DB_NAME).is_file():
        raise RunDirError(f"{run_dir}: no results.db here (run `ekb eval {run_dir}` first)")
    with RunStore(run_dir) as store:
        results = store.results(trust_unauthenticated=trust)
        unauthenticated = store.unauthenticated()
        if not results:
            if unauthenticated.get("results"):
                why = authentication_lines(unauthenticated, trust)[0]
                raise RunDirError(f"{run_dir}: no results to count: {why}")
            raise RunDirError(f"{run_dir}: no results yet (run `ekb eval {run_dir}`)")
        marked = unauthenticated_results(unauthenticated)
        excluded = (
            []
            if trust or not marked
            else [r for r in store.results(trust_unauthenticated=True) if _key(r) in marked]
        )

        def meta_value(key: str) -> Any:
            return store.get_meta(key, trust_unauthenticated=trust)

        meta = {
            k: v
            for k in ("eval_config", "agent_config", "generation_config", ENV_KEY)
            if (v := meta_value(k)) is not None
        }
        peak_records = {k: meta_value(k) for k in store.meta_keys("peak:", trust_unauthenticated=trust)}
        run = RunData(
            label=label or run_dir.name or str(run_dir),
            path=run_dir,
            results=results,
            agent_runs=store.agent_runs(trust_unauthenticated=trust),
            agent_steps=store.agent_steps(trust_unauthenticated=trust),
            meta=meta,
            created=store.created_range(trust_unauthenticated=trust),
            generations=store.generations(trust_unauthenticated=trust),
            unauthenticated=unauthenticated,
            trusted=trust,
            excluded=excluded,
        )
    threads = [c["threads"] for k in ("eval_config", "agent_config") if (c := meta.get(k)) and "threads" in c]
    for backend in sorted({r.backend for r in results}):
        peak = _peak_record(run_dir, backend, threads, peak_records)
        if peak:
            run.peaks[backend] = peak
    return run


def _peak_record(run_dir: Path, backend: str, threads: list[int], records: dict[str, dict]) -> dict | None:
    """The peaks a backend's roofline fractions were computed with (runs.backend_peak): measured in the
    run (meta "peak:<backend>:<threads>"; a cached record means the profile had no `ekb peak` figures
    then), else the profile's own measured peaks, else None."""
    keys = [f"peak:{backend}:{t}" for t in threads]
    keys += sorted(k for k in records if k.startswith(f"peak:{backend}:") and k not in keys)
    for key in keys:
        if (rec := records.get(key)) and rec.get("flops"):
            return rec
    from ..backends.peak import profile_peak
    from ..backends.registry import get_profile

    try:
        profile = get_profile(backend, run_dir=run_dir)
    except EKBError:  # a profile that is gone (renamed, a user file not here): no ceilings
        return None
    return profile_peak(profile, threads[0] if threads else 1)


def _key(r: Result) -> tuple[str, int, str]:
    return (r.problem, r.sample, r.backend)


def labels_for(paths: Sequence[Path]) -> list[str]:
    """Short, distinct labels for run directories: their names, else their paths."""
    names = [Path(p).name or str(p) for p in paths]
    if len(set(names)) < len(names):
        names = [str(p) for p in paths]
    if len(set(names)) < len(names):  # the same directory twice
        names = [f"{n} ({k + 1})" for k, n in enumerate(names)]
    return names


def common_problems(runs: Sequence[RunData]) -> set[str]:
    """The problems every run has a result for."""
    sets = [{r.problem for r in run.results} for run in runs]
    return set.intersection(*sets) if sets else set()


# ------------------------------------------------------------------------------------------ fragments
def _text(x) -> str:
    return x.plain if isinstance(x, Text) else str(x if x is not None else "")


def _esc(x) -> str:
    return htmllib.escape(_text(x))


def table_html(table: Table, title: str | None = None) -> Markup:
    """A rich Table (the one the terminal prints) as an HTML table: same title, headers, cells, bold rows
    and sections."""
    cols = list(table.columns)
    cells = [list(c.cells) for c in cols]
    out = ['<div class="scroll"><table class="summary">']
    caption = title if title is not None else _text(table.title)
    if caption:
        out.append(f"<caption>{htmllib.escape(caption)}</caption>")
    out.append("<thead><tr>")
    for c in cols:
        cls = ' class="num"' if c.justify == "right" else ""
        out.append(f"<th{cls}>{_esc(c.header).strip().replace(chr(10), '<br>')}</th>")
    out.append("</tr></thead><tbody>")
    for i, row in enumerate(table.rows):
        classes = []
        if row.style is not None and "bold" in str(row.style):
            classes.append("bold")
        if row.end_section:
            classes.append("section-end")
        cls = f' class="{" ".join(classes)}"' if classes else ""
        out.append(f"<tr{cls}>")
        for c, col in zip(cols, cells, strict=True):
            num = ' class="num"' if c.justify == "right" else ""
            out.append(f"<td{num}>{_esc(col[i]) if i < len(col) else ''}</td>")
        out.append("</tr>")
    out.append("</tbody></table></div>")
    return Markup("".join(out))


def _svg(fig: Figure, name: str) -> Markup:
    """The figure as inline SVG: no XML prolog, ids prefixed with `name` (unique on the page)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata=_NO_METADATA)  # constrained layout: legends inside the page
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r'\bid="([^"]+)"', rf'id="{name}-\1"', text)
    text = re.sub(r'(href=")#', rf"\1#{name}-", text)
    text = text.replace("url(#", f"url(#{name}-")
    text = re.sub(
        r"<svg ", f'<svg class="plot" role="img" aria-label="{htmllib.escape(name)}" ', text, count=1
    )
    return Markup(text)


# --------------------------------------------------------------------------------------------- series
def _series(runs: Sequence[RunData], backend: str | None = None) -> list[tuple[str, list[Result]]]:
    """The lines of a plot: one per method for one run; one per run for several (per run and method
    when some run holds several methods). `backend`: only its results."""
    many_methods = any(len({r.method or "unknown" for r in run.results}) > 1 for run in runs)
    out = []
    for run in runs:
        rs = [r for r in run.results if backend is None or r.backend == backend]
        if not rs:
            continue
        if len(runs) > 1 and not many_methods:
            out.append((run.label, rs))
            continue
        groups: dict[str, list[Result]] = {}
        for r in rs:
            groups.setdefault(r.method or "unknown", []).append(r)
        for method, group in sorted(groups.items()):
            out.append((method if len(runs) == 1 else f"{run.label} · {method}", group))
    return out


def _line_unit(runs: Sequence[RunData]) -> str:
    """What one line of a plot stands for (see `_series`)."""
    if len(runs) == 1:
        return "method"
    many_methods = any(len({r.method or "unknown" for r in run.results}) > 1 for run in runs)
    return "run and method" if many_methods else "run"


def fast_curve(results: Sequence[Result], baseline: str) -> tuple[list[float], list[float]] | None:
    """Fast@p (k = 1) against `baseline` as a step function of p: (ps, values), p from 0 to the largest
    speedup; the value at ps[i] holds until ps[i + 1]. A sample stops being fast at the lower end of its
    speedup's confidence interval (the point estimate for records without one; `metrics.verdict`), so
    those are the steps. None when no correct sample was timed against `baseline`."""
    timed = [r for r in results if r.correct and baseline in r.speedups and _finite(r.speedups[baseline])]
    if not timed:
        return None
    steps = {0.0}
    for r in timed:
        ci = r.speedup_ci.get(baseline)
        low = ci[0] if ci else r.speedups[baseline]
        if _finite(low) and low > 0:
            steps.add(float(low))
    ps = sorted(steps)
    values = []
    for p in ps:
        v = metrics.fast_at_k(results, p, baseline, 1).value
        values.append(0.0 if v is None else v)
    top = max(max(r.speedups[baseline] for r in timed), ps[-1])
    ps.append(top * 1.02 if top > 0 else 1.0)
    values.append(values[-1])
    return ps, values


def _finite(x) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def _fast_plot(runs: Sequence[RunData], backend: str, baselines: Sequence[str], n: int) -> Markup | None:
    series = _series(runs, backend)
    panels = []
    for b in baselines:
        lines = [(label, c) for label, rs in series if (c := fast_curve(rs, b))]
        if lines:
            panels.append((b, lines))
    if not panels:
        return None
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(4.0 * len(panels), 2.9), layout="constrained")
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        for ax, (b, lines) in zip(axes, panels, strict=True):
            for k, (label, (ps, vals)) in enumerate(lines):
                ax.step(ps, vals, where="post", label=label, color=f"C{k % 10}", linewidth=1.4)
            ax.axvline(1.0, color="#999", linewidth=0.7, linestyle=":")
            ax.set_ylim(-0.03, 1.03)
            ax.set_xlim(0, max(ps[-1] for _, (ps, _) in lines))
            if ax.get_xlim()[1] > 8:  # speedups far above 1: linear up to 1, logarithmic beyond
                ax.set_xscale("symlog", linthresh=1.0, linscale=1.0)
                ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
            ax.set_xlabel("p (speedup over the baseline)")
            ax.set_ylabel("Fast@p")
            ax.set_title(f"{backend}: vs {b}")
            ax.grid(alpha=0.25, linewidth=0.5)
        _shared_legend(fig, axes)
        return _svg(fig, f"fast{n}")


def _shared_legend(fig: Figure, axes) -> None:
    """One legend under the panels, with each label once."""
    handles: dict[str, Any] = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
    if handles:
        fig.legend(
            list(handles.values()), list(handles), loc="outside lower center", ncol=min(4, len(handles))
        )


# ------------------------------------------------------------------------------------------- roofline
def roofline_points(results: Sequence[Result]) -> tuple[list[dict], int]:
    """The correct, timed samples as roofline points {intensity, flops, level, above_roof, problem,
    sample}; and how many had no floating-point work (no intensity to place them at)."""
    points, no_flops = [], 0
    for r in results:
        if not (r.correct and r.runtime is not None and r.runtime.median > 0):
            continue
        roof = r.roofline
        achieved = roof.achieved_flops if roof else None
        flops = achieved if _finite(achieved) else r.flops / r.runtime.median
        intensity = roof.intensity if roof else None
        if not _finite(intensity):
            intensity = r.flops / r.bytes if r.bytes else None
        if not (flops and flops > 0 and intensity and intensity > 0):
            no_flops += 1
            continue
        points.append(
            {
                "intensity": float(intensity),
                "flops": float(flops),
                "level": level_label(metrics.level_of(r.problem)),
                "above_roof": metrics.above_roof(roof),
                "problem": r.problem,
                "sample": r.sample,
            }
        )
    return points, no_flops


def _fmt_rate(x: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def _roofline_plot(runs: Sequence[RunData], backend: str, n: int) -> tuple[Markup | None, str]:
    """The roofline of one backend, and a caption (where its ceilings come from, what is not drawn)."""
    per_run = []
    no_flops = 0
    for run in runs:
        pts, nf = roofline_points([r for r in run.results if r.backend == backend])
        no_flops += nf
        per_run.append((run, pts))
    if not any(pts for _, pts in per_run):
        return None, ""
    peak_run = next((run for run in runs if backend in run.peaks), None)
    peak = peak_run.peaks[backend] if peak_run else None
    levels = [
        lv for lv in (peak or {}).get("levels") or [] if _finite(lv.get("bandwidth")) and lv["bandwidth"] > 0
    ]
    if peak and not levels and _finite(peak.get("bandwidth")):
        levels = [{"level": "memory", "bandwidth": peak["bandwidth"]}]
    pf = peak.get("flops") if peak and _finite(peak.get("flops")) else None
    xs = [p["intensity"] for _, pts in per_run for p in pts]
    ys = [p["flops"] for _, pts in per_run for p in pts]
    if pf:
        xs += [pf / lv["bandwidth"] for lv in levels]
        ys.append(pf)
    lo, hi = min(xs) / 4, max(xs) * 4
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(6.4, 3.8), layout="constrained")
        ax = fig.subplots()
        ax.set_xscale("log")
        ax.set_yscale("log")
        grays = ["#222", "#555", "#777", "#999", "#bbb", "#ccc"]
        by_size = sorted(levels, key=lambda v: math.inf if v.get("capacity") is None else v["capacity"])
        for k, lv in enumerate(by_size):  # L1d, L2, ..., DRAM
            bw = lv["bandwidth"]
            ridge = min(pf / bw, hi) if pf else hi
            ax.plot(
                [lo, ridge],
                [lo * bw, ridge * bw],
                color=grays[k % len(grays)],
                linewidth=1.0,
                linestyle=("-", "--", "-.", ":")[k % 4],
                label=f"{lv['level']}: {_fmt_rate(bw, 'B/s')}",
            )
        if pf:
            ax.axhline(pf, color="#000", linewidth=1.2, label=f"peak: {_fmt_rate(pf, 'FLOP/s')}")
        seen_levels = sorted({p["level"] for _, pts in per_run for p in pts})
        for j, (run, pts) in enumerate(per_run):
            marker = _MARKERS[j % len(_MARKERS)]
            for level in seen_levels:
                sel = [p for p in pts if p["level"] == level]
                if not sel:
                    continue
                label = f"{level} problems" if len(runs) == 1 else f"{run.label}: {level} problems"
                ok = [p for p in sel if not p["above_roof"]]
                over = [p for p in sel if p["above_roof"]]
                color = _LEVEL_COLORS.get(level, "#7f7f7f")
                if ok:
                    ax.scatter(
                        [p["intensity"] for p in ok],
                        [p["flops"] for p in ok],
                        s=16,
                        marker=marker,
                        color=color,
                        alpha=0.8,
                        label=label,
                        linewidths=0,
                    )
                if over:
                    ax.scatter(
                        [p["intensity"] for p in over],
                        [p["flops"] for p in over],
                        s=22,
                        marker=marker,
                        facecolors="none",
                        edgecolors="#d62728",
                        label=f"{label} (above roof)",
                    )
        ax.set_xlim(lo, hi)
        ax.set_ylim(min(ys) / 4, max(ys) * 3)
        # SI prefixes, not 10^k: plain text (no mathtext) that reads as FLOP/s
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _fmt_rate(v, "").strip()))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel("achieved FLOP/s")
        ax.set_title(f"roofline: {backend}")
        ax.grid(alpha=0.25, linewidth=0.5, which="major")
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
        svg = _svg(fig, f"roof{n}")
    caption = []
    if peak:
        where = f"run {peak_run.label}: " if len(runs) > 1 else ""
        caption.append(f"ceilings: {where}{peak.get('source') or 'peak record'}")
        if peak.get("target"):
            caption.append(f"target {peak['target']}")
    else:
        caption.append("no measured ceilings for this backend in the run (ekb peak, or a run that measures)")
    if no_flops:
        caption.append(f"{no_flops} correct sample(s) without floating-point work (copies, int8) not drawn")
    return svg, "; ".join(caption)


# ---------------------------------------------------------------------------------------------- agents
def _anytime_plot(runs: Sequence[RunData], n: int) -> Markup | None:
    lines = []
    for run in runs:
        for method, c in anytime_curves(run.agent_steps).items():
            label = method if len(runs) == 1 else f"{run.label} · {method}"
            lines.append((label, c["curve"]))
    lines = [(label, curve) for label, curve in lines if curve]
    if not lines:
        return None
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(8.0, 2.9), layout="constrained")
        ax1, ax2 = fig.subplots(1, 2)
        for k, (label, curve) in enumerate(lines):
            es = [pt["evals"] for pt in curve]
            geo = [pt["geomean_best"] if pt["geomean_best"] is not None else math.nan for pt in curve]
            fast = [pt["fast_1"] for pt in curve]
            style = {"where": "post", "label": label, "color": f"C{k % 10}", "linewidth": 1.4}
            ax1.step(es, geo, **style)
            ax1.plot(es, geo, "o", color=f"C{k % 10}", markersize=2.5)
            ax2.step(es, fast, **style)
        ax1.axhline(1.0, color="#999", linewidth=0.7, linestyle=":")
        ax1.set_xlabel("judge evaluations (budget used)")
        ax1.set_ylabel("geomean of the best speedup")
        ax1.set_title("best speedup over tvm-default so far")
        ax2.set_xlabel("judge evaluations (budget used)")
        ax2.set_ylabel("problems above 1.0x")
        ax2.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax2.set_ylim(-0.03, 1.03)
        ax2.set_title("share of problems faster than tvm-default")
        for ax in (ax1, ax2):
            ax.grid(alpha=0.25, linewidth=0.5)
            ax.xaxis.get_major_locator().set_params(integer=True)
        _shared_legend(fig, (ax1, ax2))
        return _svg(fig, f"anytime{n}")


# -------------------------------------------------------------------------------------------- failures
def failure_breakdown(runs: Sequence[RunData]) -> tuple[list[str], list[tuple[str, Counter]]]:
    """(statuses in display order, [(method label, status -> samples)]): `sample_status` of every sample
    of each method (or run and method)."""
    rows = [(label, Counter(sample_status(r) for r in rs)) for label, rs in _series_by_method(runs)]
    present = {s for _, c in rows for s in c}
    order = ["correct", "compile-only", *FAIL_REASONS, "incorrect", "not compiled"]
    statuses = [s for s in order if s in present and s != "not_checked"]
    statuses += sorted(present - set(statuses))
    return statuses, rows


def _series_by_method(runs: Sequence[RunData]) -> list[tuple[str, list[Result]]]:
    out = []
    for run in runs:
        groups: dict[str, list[Result]] = {}
        for r in run.results:
            groups.setdefault(r.method or "unknown", []).append(r)
        for method, rs in sorted(groups.items()):
            out.append((method if len(runs) == 1 else f"{run.label} · {method}", rs))
    return out


def _failure_plot(statuses: list[str], rows: list[tuple[str, Counter]], n: int) -> Markup | None:
    if not rows:
        return None
    colors, k = {}, 0
    for s in statuses:
        if s in _STATUS_COLORS:
            colors[s] = _STATUS_COLORS[s]
        else:
            colors[s] = _REASON_COLORS[k % len(_REASON_COLORS)]
            k += 1
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(7.0, 0.9 + 0.28 * len(rows)), layout="constrained")
        ax = fig.subplots()
        labels = [label for label, _ in rows][::-1]
        left = [0.0] * len(rows)
        for s in statuses:
            widths = [c.get(s, 0) / max(1, sum(c.values())) for _, c in rows][::-1]
            if any(widths):
                ax.barh(labels, widths, left=left, color=colors[s], label=s, height=0.6)
                left = [a + b for a, b in zip(left, widths, strict=True)]
        ax.xaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_xlim(0, 1)
        ax.set_xlabel("share of the method's samples")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
        return _svg(fig, f"fail{n}")


# ------------------------------------------------------------------------------------------- problems
def _compact_json(obj, indent: int = 0, width: int = 100) -> str:
    """JSON with a line per element only where a single line would be too long (decisions: one trace
    instruction a line)."""
    flat = json.dumps(obj)
    if len(flat) + indent <= width or not isinstance(obj, dict | list) or not obj:
        return flat
    pad = " " * (indent + 1)
    if isinstance(obj, dict):
        items = [f"{pad}{json.dumps(k)}: {_compact_json(v, indent + 1, width)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + _compact_json(v, indent + 1, width) for v in obj]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def candidate_text(run_dir: Path, r: Result) -> tuple[str, str] | None:
    """(kind, text): the candidate's source ("source": a TVMScript / Python file, or a spec's module
    text) or its decisions ("decisions", as compact JSON), from the run's candidate file; None when the
    file is not there any more."""
    from ..rundir import existing_candidate

    path = existing_candidate(run_dir, r.problem, r.sample)
    if path is None and r.candidate and Path(r.candidate).is_file():
        path = Path(r.candidate)
    if path is None:
        return None
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        return "source", f"{path}: cannot be read ({e})"
    kind = "source"
    if path.suffix == ".json":
        try:
            spec = json.loads(text)
        except ValueError:
            spec = None
        if isinstance(spec, dict):
            parts = [f"# {path.name}: method {spec.get('method') or '?'}"]
            if spec.get("notes"):
                parts.append(f"# notes: {spec['notes']}")
            if spec.get("module"):
                parts.append("# module\n" + str(spec["module"]))
            if spec.get("decisions"):
                kind = "decisions" if not spec.get("module") else "source"
                parts.append("# decisions\n" + _compact_json(spec["decisions"]))
            if spec.get("metadata"):
                parts.append("# metadata\n" + _compact_json(spec["metadata"]))
            text = "\n".join(parts)
    if len(text) > SOURCE_LIMIT:
        text = text[:SOURCE_LIMIT] + f"\n... ({len(text) - SOURCE_LIMIT:,} more characters in {path})"
    return kind, text


def problem_rows(runs: Sequence[RunData], baselines: Sequence[str]) -> tuple[list[dict], dict[str, str]]:
    """One row per sample of every run (per_problem_rows plus run, level, method, roofline fraction, full
    detail and the id of its candidate's text; the samples whose row failed authentication too, counted
    or not, each with authenticated False), and the texts by id (one per run, problem and sample)."""
    rows, texts = [], {}
    found: dict[tuple[str, str, int], tuple[str, str] | None] = {}  # (run, problem, sample) -> (kind, id)
    for run in runs:
        ordered = sorted([*run.results, *run.excluded], key=lambda r: (r.backend, r.problem, r.sample))
        marked = unauthenticated_results(run.unauthenticated)
        for r, row in zip(ordered, per_problem_rows(ordered, baselines, marked), strict=True):
            key = (run.label, r.problem, r.sample)
            if key not in found:  # a sample judged on several backends: its text once
                text = candidate_text(run.path, r)
                found[key] = None
                if text:
                    found[key] = (text[0], f"src{len(texts)}")
                    texts[f"src{len(texts)}"] = text[1]
            kind, source_id = found[key] or (None, None)
            fraction = r.roofline.fraction if r.roofline else None
            full = (r.detail or "").strip()
            detail_id = None
            if full and full != row["detail"]:
                detail_id = f"det{len(texts)}"
                texts[detail_id] = full[-DETAIL_LIMIT:]
            rows.append(
                {
                    **row,
                    "run": run.label,
                    "level": level_label(metrics.level_of(r.problem)),
                    "method": r.method or "",
                    "roofline": fraction if r.correct and _finite(fraction) else None,
                    "above_roof": r.correct and metrics.above_roof(r.roofline),
                    "source_id": source_id,
                    "source_kind": kind,
                    "detail_id": detail_id,
                    "title": f"{r.problem} #{r.sample}" + (f" ({run.label})" if len(runs) > 1 else ""),
                }
            )
    return rows, texts


# ------------------------------------------------------------------------------------------- metadata
def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(t)) if t else "?"


def _isolation_lines(results: Sequence[Result]) -> list[str]:
    """The isolation in force, as the records give it (extra.isolation per process), with counts."""
    seen: Counter = Counter()
    for r in results:
        iso = r.extra.get("isolation")
        if not isinstance(iso, dict):
            seen["not recorded"] += 1
            continue
        parts = []
        for proc in sorted(iso):
            d = iso[proc]
            if not isinstance(d, dict):
                parts.append(f"{proc}: {d}")
                continue
            ns = ", ".join(d.get("namespaces") or []) or "none"
            ll = d.get("landlock_abi")
            weaker = ", ".join(d.get("weaker") or []) or "none"
            forked = (
                "; forked from a warm judge into PID and mount namespaces of its own"
                if d.get("forked")
                else ""
            )
            parts.append(
                f"{proc}: namespaces {ns}{forked}; network {d.get('network', '?')}; "
                f"Landlock {('ABI ' + str(ll)) if ll else 'off'}; "
                f"writes {', '.join(d.get('write') or []) or '-'}; "
                f"weaker: {weaker}"
            )
        runner = r.extra.get("runner")
        if runner:
            parts.append(f"candidate runs in a {runner}")
        seen[" | ".join(parts)] += 1
    return [f"{text} ({n} sample{'s' if n != 1 else ''})" for text, n in seen.most_common()]


def _timing_lines(run: RunData) -> list[str]:
    lines = []
    for key in ("eval_config", "agent_config"):
        cfg = run.meta.get(key)
        if cfg and cfg.get("timing"):
            t = cfg["timing"]
            lines.append(
                f"{key.split('_')[0]}: {t.get('rounds')} interleaved rounds of >= "
                f"{t.get('min_repeat_ms')} ms "
                f"after {t.get('warmup_ms')} ms warm-up; {cfg.get('threads')} thread(s); "
                f"{cfg.get('trials')} correctness trial(s)"
            )
    timed = [r for r in run.results if r.runtime is not None]
    if timed:
        counts = sorted({r.runtime.count for r in timed})
        rounds = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
        envs = [r.timing_env for r in timed if r.timing_env]
        pinned = sorted({str(e.pinned_cpu) for e in envs if e.pinned_cpu is not None})
        timers = sorted(
            {str(t.get("timer")) for r in timed if isinstance(t := r.extra.get("onnxruntime_timer"), dict)}
        )
        busy = sum(1 for r in timed if r.timing_env and r.timing_env.disturbed)
        lines.append(
            f"{len(timed)} timed sample(s): {rounds} rounds each, paired with every baseline; speedup = "
            "median of the per-round ratios, fast at p when its 95% interval lies above p"
            + (f"; pinned to CPU {', '.join(pinned)}" if pinned else "")
            + (f"; ONNX Runtime timer: {', '.join(timers)}" if timers else "")
            + (f"; {busy} timed while other CPUs were busy" if busy else "")
        )
    not_timed = Counter(r.timing_status for r in run.results if r.runtime is None and r.correct)
    for status, k in sorted(not_timed.items()):
        lines.append(f"{k} correct sample(s) not timed: {status}")
    return lines


def run_metadata(run: RunData) -> dict:
    """What the page says about how a run was made: when, where, with what, under which protocol."""
    envs = run.meta.get(ENV_KEY) or []
    backends = sorted({r.backend for r in run.results})
    return {
        "label": run.label,
        "path": str(run.path),
        "date": f"{_when(run.created[0])} to {_when(run.created[1])}" if run.created else "?",
        "environments": envs,
        "renderer": None if envs else host_environment(),
        "backends": [
            {
                "name": b,
                "target": (run.peaks.get(b) or {}).get("target", ""),
                "peak": (run.peaks.get(b) or {}).get("source", ""),
                "samples": sum(1 for r in run.results if r.backend == b),
            }
            for b in backends
        ],
        "baselines": (run.meta.get("eval_config") or {}).get("baselines")
        or sorted({b for r in run.results for b in r.speedups}),
        "timing": _timing_lines(run),
        "isolation": _isolation_lines(run.results),
        "oracles": dict(Counter(r.oracle or "none" for r in run.results if r.compiled)),
        "agent_config": run.meta.get("agent_config"),
        "generation_config": run.meta.get("generation_config"),
        "generations": generation_lines(run.generations),
        "left_out": run.left_out,
    }


# ----------------------------------------------------------------------------------------------- page
def build_html(run_dirs: Sequence[Path | str], p: float = 1.0, trust: bool = False) -> str:
    """The page for one run, or for several compared on the problems they all have; `trust`: count the
    rows that fail authentication (load_run)."""
    paths = [Path(d) for d in run_dirs]
    if not paths:
        raise ReportError("no run directory given")
    runs = [load_run(d, label, trust) for d, label in zip(paths, labels_for(paths), strict=True)]
    if len(runs) > 1:
        common = common_problems(runs)
        if not common:
            raise ReportError(
                f"the runs {', '.join(r.label for r in runs)} have no problem in common: nothing to compare"
            )
        for run in runs:
            run.restrict(common)
    try:
        return _page(runs, p)
    except ValueError as e:  # a p the summary did not compute
        raise ReportError(str(e)) from e


def _page(runs: list[RunData], p: float) -> str:
    summaries = [
        summarize(run.results, unauthenticated=unauthenticated_results(run.unauthenticated)) for run in runs
    ]
    baselines = list(summaries[0].baselines)
    backends = sorted({r.backend for run in runs for r in run.results})
    blocks = []
    for run, summary in zip(runs, summaries, strict=True):
        tables = [table_html(t) for t in render_tables(summary, p_headline=p)]
        if len(summary.backends) > 1:
            tables.append(table_html(render_backend_matrix(summary, p_headline=p)))
        by_method = summaries_by_method(run.results, unauthenticated_results(run.unauthenticated))
        method_tables = []
        if len(by_method) > 1:
            for method, sub in by_method.items():
                for t in render_tables(sub, p_headline=p):
                    method_tables.append(table_html(t, f"candidates made by {method}: {_text(t.title)}"))
        notes = (
            authentication_lines(run.unauthenticated, run.trusted)
            + inexact_baseline_lines(run.results, summary.baselines)
            + timing_lines(run.results, p)
            + above_roof_lines(run.results)
        )
        agents = None
        rows = method_rows(run.results, run.agent_runs, run.agent_steps, p) if run.agent_runs else []
        if rows:
            agents = table_html(render_methods(rows, p))
        blocks.append(
            {
                "label": run.label,
                "tables": tables,
                "method_tables": method_tables,
                "notes": notes,
                "agents": agents,
            }
        )
    side_by_side = None
    if len(runs) > 1:
        merged = Summary(
            summaries[0].baselines,
            summaries[0].ps,
            [
                BackendSummary(f"{run.label} · {b.backend}", b.levels)
                for run, s in zip(runs, summaries, strict=True)
                for b in s.backends
            ],
        )
        side_by_side = table_html(render_backend_matrix(merged, p_headline=p))
    fast_plots = [(b, plot) for k, b in enumerate(backends) if (plot := _fast_plot(runs, b, baselines, k))]
    rooflines = []
    for k, b in enumerate(backends):
        svg, caption = _roofline_plot(runs, b, k)
        if svg:
            rooflines.append({"backend": b, "svg": svg, "caption": caption})
    statuses, fail_rows = failure_breakdown(runs)
    rows, texts = problem_rows(runs, baselines)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["pct"] = fmt_pct
    env.filters["speedup"] = fmt_speedup
    env.filters["when"] = _when
    template = env.get_template("report.html.j2")
    return template.render(
        title="EdgeKernelBench report: " + ", ".join(run.label for run in runs),
        runs=runs,
        p=p,
        blocks=blocks,
        side_by_side=side_by_side,
        compared=sorted(common_problems(runs)) if len(runs) > 1 else None,
        fast_plots=fast_plots,
        line_unit=_line_unit(runs),
        rooflines=rooflines,
        anytime=_anytime_plot(runs, 0),
        statuses=statuses,
        fail_rows=fail_rows,
        fail_plot=_failure_plot(statuses, fail_rows, 0),
        baselines=baselines,
        rows=rows,
        unauthenticated_mark=UNAUTHENTICATED_MARK,
        texts=texts,
        metadata=[run_metadata(run) for run in runs],
        generated=_when(time.time()),
    )


def check_output_path(path: Path | str) -> None:
    """ReportError unless `path` can be a file to write: its directory exists and it is no directory."""
    path = Path(path)
    if path.is_dir():
        raise ReportError(f"{path} is a directory; give a file name, e.g. {path / 'report.html'}")
    if not path.parent.is_dir():
        raise ReportError(f"{path}: no such directory {path.parent} (create it first)")


def write_html(run_dirs: Sequence[Path | str], path: Path | str, p: float = 1.0, trust: bool = False) -> int:
    """Writes the page to `path` (its directory must exist); returns its size in bytes."""
    path = Path(path)
    check_output_path(path)
    text = build_html(run_dirs, p, trust)
    data = text.encode()
    try:
        path.write_bytes(data)
    except OSError as e:
        raise ReportError(f"{path}: cannot write the report ({e.strerror or e})") from e
    log.info("wrote %s (%d bytes)", path, len(data))
    return len(data)
