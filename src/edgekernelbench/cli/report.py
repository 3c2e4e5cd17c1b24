"""`ekb report` and the report printed after an evaluation."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click
from rich.text import Text

from ..errors import EKBError
from ..report.summary import authentication_lines, inexact_baseline_lines, summaries_by_method, timing_lines
from ..rundir import DB_NAME
from .common import console

__all__ = ["inexact_baseline_lines", "report", "summaries_by_method", "timing_lines"]


# ------------------------------------------------------------------------------------------ report
def _read_results(run_dir: Path, trust: bool, shown: bool = False) -> tuple[list, list, dict]:
    """(the results the metrics count, the results the per-sample table shows, RunStore.unauthenticated()):
    the counted ones are those whose row authenticates, or all with `trust` (--trust-unauthenticated);
    the shown ones (with `shown`; else the counted ones) are all of them, the others marked."""
    from ..store import RunStore

    with RunStore(run_dir) as store:
        results = store.results(trust_unauthenticated=trust)
        unauthenticated = store.unauthenticated()
        every = store.results(trust_unauthenticated=True) if shown and not trust else results
    if not results:
        if unauthenticated.get("results"):
            raise EKBError(
                f"{run_dir}: no results to count: " + authentication_lines(unauthenticated, trust)[0]
            )
        raise EKBError(f"{run_dir}: no results yet (run `ekb eval {run_dir}`)")
    return results, every, unauthenticated


def _print_report(run_dir: Path, p: float = 1.0, per_problem: bool = False, trust: bool = False):
    """Prints the report of one run: its metrics over the results whose run-store row authenticates (all
    with `trust`: --trust-unauthenticated), the line that counts the rows that failed authentication,
    and with `per_problem` every sample, those marked."""
    from ..report.render import render_backend_matrix, render_node_table, render_problem_table, render_tables
    from ..report.summary import above_roof_lines, node_lines, node_rows, summarize, unauthenticated_results

    results, every, unauthenticated = _read_results(run_dir, trust, shown=per_problem)
    marked = unauthenticated_results(unauthenticated)
    summary = summarize(results, unauthenticated=marked)
    if per_problem:
        console.print(render_problem_table(every, unauthenticated=marked))
    for table in render_tables(summary, p_headline=p):
        console.print(table)
    if len(summary.backends) > 1:  # one spec, many backends: side by side
        console.print(render_backend_matrix(summary, p_headline=p))
    for line in authentication_lines(unauthenticated, trust):
        console.print(Text(line, style="bold red"), soft_wrap=True)
    for line in inexact_baseline_lines(results, summary.baselines):
        console.print(Text(line, style="yellow"), soft_wrap=True)
    for line in timing_lines(results, p):
        console.print(Text(line, style="yellow"), soft_wrap=True)
    for line in above_roof_lines(results):  # counted in the roofline column, left out of its mean
        console.print(Text(line, style="yellow"), soft_wrap=True)
    nodes = node_rows(results)
    if len(nodes) > 1 or any(r.node is not None and r.node.ray_node for r in results):  # judged on Ray
        console.print(render_node_table(nodes))
    for line in node_lines(results):
        console.print(Text(line, style="yellow"), soft_wrap=True)
    by_method = summaries_by_method(results, marked)
    if len(by_method) > 1:  # several models / methods in one run: the metrics of each
        for method, sub in by_method.items():
            console.print(Text(f"candidates made by: {method}", style="bold"))
            for table in render_tables(sub, p_headline=p):
                console.print(table)
    for line in _generation_lines(run_dir, trust):
        console.print(Text(line), soft_wrap=True)
    rows, searches = _agent_rows(run_dir, p, results, trust)
    if rows:
        from ..report.agents import render_methods, render_search

        console.print(render_methods(rows, p))
        if searches:
            console.print(render_search(searches))
    return summary


def _agent_rows(run_dir: Path, p: float, results: list, trust: bool = False) -> tuple[list, list]:
    """The method comparison of a run made by `ekb agent` and where LEKA's judgments went (both empty for
    other runs); `results`: the run's counted results; the agents' records as authenticated (all with
    `trust`)."""
    from ..report.agents import method_rows, search_rows
    from ..store import RunStore

    with RunStore(run_dir) as store:
        runs = store.agent_runs(trust_unauthenticated=trust)
        steps = store.agent_steps(trust_unauthenticated=trust) if runs else []
    if not runs:
        return [], []
    return method_rows(results, runs, steps, p), search_rows(runs, steps)


def _generation_lines(run_dir: Path, trust: bool = False) -> list[str]:
    """One line per model that generated this run's candidates: tokens, cost, failures, template."""
    from ..report.summary import generation_lines
    from ..store import RunStore

    with RunStore(run_dir) as store:
        return generation_lines(store.generations(trust_unauthenticated=trust), prefix="generation ")


@click.command()
@click.argument(
    "run_dirs", metavar="RUN_DIR [RUN_DIR ...]", nargs=-1, required=True, type=click.Path(path_type=Path)
)
@click.option("--p", "p", type=float, default=1.0, show_default=True, help="Fast@p shown in the table.")
@click.option("--per-problem", is_flag=True, help="Also print one row per sample.")
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write the summary as JSON here.")
@click.option("--csv", "csv_path", type=click.Path(path_type=Path), help="Write the summary as CSV here.")
@click.option(
    "--anytime",
    "anytime_path",
    type=click.Path(path_type=Path),
    help="Write the agents' anytime curves (best speedup after each judge evaluation) here: .json or .csv.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(path_type=Path),
    help="Write the report as one self-contained HTML page here (plots inline, no network); with several "
    "runs, compared side by side on the problems they all have.",
)
@click.option(
    "--trust-unauthenticated",
    "trust",
    is_flag=True,
    help="Count the rows of results.db that fail authentication (edited or inserted by anything but "
    "this user's ekb, or written under another machine's key); by default they are marked and left out.",
)
def report(run_dirs, p, per_problem, json_path, csv_path, anytime_path, html_path, trust):
    """Correct@1 / Fast@p per level and overall, against each baseline. Several RUN_DIRs: the report of
    each, and with --html one page that compares them. Only rows of results.db that authenticate under
    this user's key count (store.py); the others are marked, and counted with --trust-unauthenticated."""
    from ..report.render import to_csv, to_json

    if len(run_dirs) > 1 and (json_path or csv_path or anytime_path):
        raise EKBError("--json, --csv and --anytime take one run directory (--html compares several)")
    if html_path:
        from ..report.html import check_output_path

        check_output_path(html_path)  # before the work: a directory that does not exist is one line
    for run_dir in run_dirs:
        if not run_dir.joinpath(DB_NAME).exists():
            raise EKBError(f"{run_dir}: no results.db here (run `ekb eval {run_dir}` first)")
    for run_dir in run_dirs:
        if len(run_dirs) > 1:
            console.print(Text(f"run {run_dir}", style="bold underline"))
        try:
            summary = _print_report(run_dir, p, per_problem, trust)
        except ValueError as e:
            raise EKBError(str(e)) from e
    run_dir = run_dirs[0]
    if json_path:
        from ..llm.generate import generation_summary
        from ..report.summary import unauthenticated_results
        from ..store import RunStore

        with RunStore(run_dir) as store:
            gens = generation_summary(store.generations(trust_unauthenticated=trust))
        results, _every, unauthenticated = _read_results(run_dir, trust)
        data = json.loads(to_json(summary))
        data["authentication"] = {
            "trust_unauthenticated": trust,
            "unauthenticated": {table: [list(k) for k in keys] for table, keys in unauthenticated.items()},
        }
        if gens:
            data["generation"] = gens
        by_method = summaries_by_method(results, unauthenticated_results(unauthenticated))
        if len(by_method) > 1:
            data["by_method"] = {m: json.loads(to_json(sub)) for m, sub in by_method.items()}
        rows, searches = _agent_rows(run_dir, p, results, trust)
        if rows:
            data["agents"] = [r.to_dict() for r in rows]
        if searches:
            data["search"] = [{**asdict(r), "per_kept": r.per_kept} for r in searches]
        from ..report.summary import node_lines, node_rows

        data["nodes"] = [r.to_dict() for r in node_rows(results)]  # which node judged what
        data["node_notes"] = node_lines(results)
        json_path.write_text(json.dumps(data, indent=1))
    if csv_path:
        csv_path.write_text(to_csv(summary))
    if anytime_path:
        _write_anytime(run_dir, anytime_path, trust)
    if html_path:
        from ..report.html import write_html

        size = write_html(run_dirs, html_path, p, trust)
        console.print(f"wrote {html_path} ({size / 1024:.0f} KiB)", soft_wrap=True)


def _write_anytime(run_dir: Path, path: Path, trust: bool = False) -> None:
    from ..report.agents import anytime_csv, anytime_curves
    from ..store import RunStore

    with RunStore(run_dir) as store:
        curves = anytime_curves(store.agent_steps(trust_unauthenticated=trust))
    if not curves:
        raise EKBError(f"{run_dir}: no agent trajectories here (made by `ekb agent`)")
    text = anytime_csv(curves) if path.suffix.lower() == ".csv" else json.dumps(curves, indent=1)
    path.write_text(text)
