"""`ekb`: the command line. Thin: parses arguments, calls the library, turns errors into one line."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from .errors import EKBError, UnknownBackend

# piped output (CI logs, files) gets a wide fixed width instead of 80 columns
console = Console() if sys.stdout.isatty() else Console(width=160)
err_console = Console(stderr=True)


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=err_console,
        transient=False,
    )


def _backends(value: str) -> list[str]:
    from .backends.registry import backend_names

    names = [b.strip() for b in value.split(",") if b.strip()]
    for n in names:
        if n not in backend_names():
            import difflib

            close = difflib.get_close_matches(n, backend_names(), n=2)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise UnknownBackend(f"unknown backend '{n}'{hint}; available: {', '.join(backend_names())}")
    return names


def _timing(quick: bool):
    from .harness.timing import TimingConfig

    return TimingConfig.quick() if quick else TimingConfig()


@click.group(invoke_without_command=True)
@click.option("-v", "--verbose", is_flag=True, help="Log what the library does.")
@click.pass_context
def cli(ctx, verbose):
    """EdgeKernelBench: judge kernels for edge devices -- compile, correctness against ONNX Runtime,
    speed against TVM and ONNX Runtime baselines.

    Without a command, runs the built-in demo: reference and rule-based candidates for the Level-1
    suite, evaluated on this machine's CPU (see `ekb demo --help`)."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(message)s"
    )
    if ctx.invoked_subcommand is None:
        ctx.invoke(demo)


# ------------------------------------------------------------------------------------------ list / show
@cli.command("list")
@click.option("--level", type=int, help="Only this level (1, 2, 3).")
@click.option("--domain", help="Only this domain (vision, kws, wakeword, anomaly, nlp, sensors, audio).")
@click.option("--category", help="Only this operator class or block kind.")
@click.option("--tag", help="Only problems with this tag.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_cmd(level, domain, category, tag, as_json):
    """List the problems of the suite."""
    from .problems import select

    probs = select(level=level, domain=domain, tag=tag, category=category)
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "id": p.id,
                        "level": p.level,
                        "domain": p.domain,
                        "category": p.category,
                        "source": p.source,
                        "tags": list(p.tags),
                    }
                    for p in probs
                ],
                indent=1,
            )
        )
        return
    t = Table(title=f"{len(probs)} problems")
    for c in ("id", "category", "domain", "source", "tags"):
        t.add_column(c, overflow="fold")
    for p in probs:
        t.add_row(Text(p.id), p.category, p.domain, Text(p.source), Text(",".join(p.tags)))
    console.print(t)


@cli.command()
@click.argument("problem")
@click.option(
    "--baselines-dir",
    type=click.Path(path_type=Path),
    default=Path("runs/baselines"),
    show_default=True,
    help="Run directory where `ekb baseline` stored its measurements.",
)
@click.option("--no-script", is_flag=True, help="Do not print the reference TVMScript.")
def show(problem, baselines_dir, no_script):
    """Show a problem: source, shapes, FLOPs, kernels, reference TVMScript, baselines if measured."""
    from .problems import get_problem
    from .reference import build_reference

    p = get_problem(problem)
    ref = build_reference(p)
    console.print(Text(f"{p.id}  (level {p.level}, {p.domain}, {p.category})", style="bold"))
    console.print(Text(f"source: {p.source}"))
    for s in p.inputs:
        console.print(Text(f"input  {s.name}: {s.dtype}{list(s.shape)}  ~ {s.dist}"))
    for o in p.model.graph.output:
        dims = [d.dim_value for d in o.type.tensor_type.shape.dim]
        console.print(Text(f"output {o.name}: {list(dims)}"))
    console.print(Text(f"weights: {len(ref.params)} tensors, {sum(w.size for w in ref.params):,} values"))
    console.print(
        Text(
            f"FLOPs: {p.flops:,}   bytes moved: {p.bytes_moved:,}   "
            f"intensity: {p.flops / max(p.bytes_moved, 1):.2f} FLOP/B   "
            f"tolerance: atol={p.atol} rtol={p.rtol}"
        )
    )
    rows = {}
    if baselines_dir.joinpath("results.db").exists():
        from .store import RunStore

        with RunStore(baselines_dir) as store:
            rows = {k: v for k, v in store.baselines().items() if k[0] == p.id}
    console.print(_kernel_table(ref, rows))
    for (_, backend, name), rec in sorted(rows.items()):
        t = rec["timing"]
        console.print(
            Text(
                f"baseline {name} on {backend}: median {t['median'] * 1e6:.1f} us "
                f"(IQR {t['iqr'] * 1e6:.1f} us, {t['count']} rounds)"
            )
        )
    if not rows:
        console.print(
            Text(
                f"baselines: not measured yet (ekb baseline --backend host-cpu --problem {p.id} "
                f"--out {baselines_dir})"
            )
        )
    if not no_script:
        console.print(Text("reference TVMScript:", style="bold"))
        click.echo(ref.script())


def _kernel_table(ref, baselines: dict) -> Table:
    """The kernels (fused PrimFuncs) main calls, their FLOPs, and time shares where measured."""
    import tvm
    from tvm.s_tir.analysis import estimate_tir_flops

    measured = {}  # (backend, baseline) -> list of per-call profiles
    for (_, backend, name), rec in sorted(baselines.items()):
        if rec.get("extra", {}).get("kernels"):
            measured[(backend, name)] = rec["extra"]["kernels"]
    t = Table(title="kernels main calls")
    t.add_column("#", justify="right")
    t.add_column("kernel", overflow="fold")
    t.add_column("MFLOP", justify="right")
    for backend, name in measured:
        t.add_column(f"{name} us ({backend})", justify="right")
        t.add_column("share", justify="right")
    funcs = ref.primfuncs()
    for i, kname in enumerate(ref.kernel_calls()):
        flops = estimate_tir_flops(tvm.IRModule({"main": funcs[kname]}))
        row = [str(i), Text(kname), f"{flops / 1e6:.3f}"]
        for prof in measured.values():
            k = prof[i] if i < len(prof) and prof[i]["kernel"] == kname else None
            row += [f"{k['median'] * 1e6:.1f}", f"{k['share']:.0%}"] if k else ["-", "-"]
        t.add_row(*row)
    return t


# ------------------------------------------------------------------------------------------ add-model
@cli.command("add-model")
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--id", "name", required=True, help="Problem name (lower-case, digits, '_'); the id is L<level>/NAME."
)
@click.option("--domain", default="user", show_default=True)
@click.option("--level", type=click.IntRange(1, 3), default=3, show_default=True)
@click.option("--input", "inputs", multiple=True, help="Static input shape, NAME=D1xD2x... (repeatable).")
@click.option("--atol", type=float, default=1e-4, show_default=True)
@click.option("--rtol", type=float, default=1e-4, show_default=True)
@click.option("--suite-dir", type=click.Path(path_type=Path), help="User suite directory ($EKB_USER_SUITE).")
def add_model_cmd(path, name, domain, level, inputs, atol, rtol, suite_dir):
    """Register your own ONNX model as a problem in the user suite (the built-in suite is not changed)."""
    from .problems.selfcheck import check_problem
    from .problems.user import add_model, parse_shapes, user_suite_dir

    if suite_dir:
        os.environ["EKB_USER_SUITE"] = str(suite_dir)
    problem = add_model(path, name, domain, level, parse_shapes(list(inputs)), atol, rtol, suite_dir)
    console.print(
        Text(
            f"added {problem.id} to {user_suite_dir()} "
            f"({', '.join(f'{s.name}: {s.dtype}{list(s.shape)}' for s in problem.inputs)})"
        )
    )
    check = check_problem(problem, trials=1)
    if not check.ok:
        for f in check.failures:
            err_console.print(Text(f"warning: {f}"))


# ------------------------------------------------------------------------------------------ generate
@cli.command()
@click.option(
    "--model",
    default="builtin",
    show_default=True,
    help="builtin = the unscheduled reference (sample 0) and the rule-based schedule (sample 1).",
)
@click.option("--out", "run_dir", type=click.Path(path_type=Path), required=True, help="Run directory.")
@click.option("--level", type=int, default=1, show_default=True)
@click.option("--problem", "problems", multiple=True, help="Only these problems (repeatable).")
def generate(model, run_dir, level, problems):
    """Write candidate files into a run directory."""
    if model != "builtin":
        raise EKBError(f"unknown model '{model}': this version generates with 'builtin' only")
    from .generators.reference_candidates import write_reference_candidates
    from .problems import select

    probs = select(level=level, ids=list(problems) or None)
    with _progress() as prog:
        task = prog.add_task("generating", total=len(probs), status="")
        paths = []
        for p in probs:
            prog.update(task, status=p.id)
            paths += write_reference_candidates([p], run_dir)
            prog.advance(task)
    console.print(f"wrote {len(paths)} candidate files under {run_dir / 'candidates'}")


# ------------------------------------------------------------------------------------------ eval
def _eval_options(f):
    f = click.option(
        "--backend", "backend", default="host-cpu", show_default=True, help="Backend(s), comma-separated."
    )(f)
    f = click.option("--threads", type=int, default=1, show_default=True, help="Threads for TVM and ORT.")(f)
    f = click.option("--trials", type=int, default=5, show_default=True, help="Correctness trials.")(f)
    f = click.option("--quick", is_flag=True, help="Short timing protocol (3 rounds of >= 1 ms).")(f)
    f = click.option("--no-measure", is_flag=True, help="Check correctness only; no timing.")(f)
    f = click.option(
        "--timeout", type=float, default=300.0, show_default=True, help="Wall-clock limit per candidate (s)."
    )(f)
    f = click.option(
        "--memory-mb", type=int, default=6144, show_default=True, help="Address-space limit per worker (MiB)."
    )(f)
    return f


def _eval_config(backend, threads, trials, quick, no_measure, timeout, memory_mb):
    from .harness.isolation import Limits
    from .runs import EvalConfig

    if trials < 1:
        raise EKBError("--trials must be at least 1")
    return EvalConfig(
        backends=_backends(backend),
        threads=threads,
        trials=trials,
        timing=_timing(quick),
        measure=not no_measure,
        limits=Limits(timeout_s=timeout, memory_mb=memory_mb),
    )


def _run_eval(run_dir: Path, cfg, problems=None) -> dict:
    from .runs import eval_run

    with _progress() as prog:
        state = {}

        def on_start(backend, n):
            state["task"] = prog.add_task(f"eval {backend}", total=n, status="")

        def on_result(res):
            mark = "correct" if res.correct else (res.reason or "incorrect")
            prog.update(state["task"], advance=1, status=f"{res.problem}#{res.sample}: {mark}")

        counts = eval_run(run_dir, cfg, problems, on_start, on_result)
    console.print(
        f"evaluated {counts['evaluated']} ({counts['correct']} correct), "
        f"skipped {counts['skipped']} already in {run_dir / 'results.db'}"
    )
    return counts


@cli.command("eval")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--problem", "problems", multiple=True, help="Only these problems (repeatable).")
@_eval_options
def eval_cmd(run_dir, problems, **opts):
    """Evaluate a directory of candidates (RUN_DIR/candidates/<problem>/sample<k>.py|.json).
    Resumable: finished (problem, sample, backend) records are skipped."""
    if not run_dir.is_dir():
        raise EKBError(f"{run_dir}: no such run directory")
    _run_eval(run_dir, _eval_config(**opts), list(problems) or None)
    _print_report(run_dir)


@cli.command()
@click.argument("problem")
@click.argument("candidate", type=click.Path(path_type=Path))
@_eval_options
def check(problem, candidate, **opts):
    """Evaluate one candidate file for PROBLEM and print the full result."""
    from .harness.api import evaluate
    from .problems import get_problem

    p = get_problem(problem)
    if not candidate.exists():
        raise EKBError(f"{candidate}: no such file")
    cfg = _eval_config(**opts)
    with console.status(f"evaluating {candidate} on {cfg.backends[0]}"):
        res = evaluate(
            p,
            candidate,
            cfg.backends[0],
            threads=cfg.threads,
            trials=cfg.trials,
            timing=cfg.timing,
            measure=cfg.measure,
            limits=cfg.limits,
        )
    click.echo(json.dumps(res.to_dict(), indent=1))
    status = "correct" if res.correct else f"{res.reason}: {res.detail.splitlines()[0] if res.detail else ''}"
    console.print(Text(f"{p.id} on {res.backend}: {status}", style="green" if res.correct else "red"))
    sys.exit(0 if res.correct else 1)


# ------------------------------------------------------------------------------------------ baseline
@cli.command()
@click.option("--backend", default="host-cpu", show_default=True)
@click.option("--level", type=int, help="Only this level.")
@click.option("--problem", "problems", multiple=True, help="Only these problems (repeatable).")
@click.option(
    "--out", "run_dir", type=click.Path(path_type=Path), default=Path("runs/baselines"), show_default=True
)
@click.option("--threads", type=int, default=1, show_default=True)
@click.option("--quick", is_flag=True, help="Short timing protocol.")
@click.option("--force", is_flag=True, help="Measure again problems already measured.")
def baseline(backend, level, problems, run_dir, threads, quick, force):
    """Measure the baselines (tvm-default, onnxruntime, and the unscheduled reference) for the suite."""
    from .baselines.measure import measure_baselines
    from .problems import select

    (backend,) = _backends(backend)
    probs = select(level=level, ids=list(problems) or None)
    with _progress() as prog:
        task = prog.add_task(f"baselines {backend}", total=len(probs), status="")
        measured = measure_baselines(
            probs,
            backend,
            run_dir,
            threads=threads,
            timing=_timing(quick),
            force=force,
            on_result=lambda pid, ok: prog.update(task, advance=1, status=pid),
        )
    t = Table(title=f"baselines on {backend} ({threads} thread(s)), median us")
    for c in ("problem", "reference", "tvm-default", "onnxruntime"):
        t.add_column(c, justify="left" if c == "problem" else "right")
    for pid, times in measured.items():
        t.add_row(
            Text(pid),
            *[
                f"{times[n] * 1e6:.1f}" if times.get(n) else "-"
                for n in ("reference", "tvm-default", "onnxruntime")
            ],
        )
    console.print(t)
    console.print(f"stored in {run_dir / 'results.db'}")


# ------------------------------------------------------------------------------------------ report
def _print_report(run_dir: Path, p: float = 1.0, per_problem: bool = False):
    from .report.render import render_problem_table, render_tables
    from .report.summary import summarize
    from .store import RunStore

    with RunStore(run_dir) as store:
        results = store.results()
    if not results:
        raise EKBError(f"{run_dir}: no results yet (run `ekb eval {run_dir}`)")
    summary = summarize(results)
    if per_problem:
        console.print(render_problem_table(results))
    for table in render_tables(summary, p_headline=p):
        console.print(table)
    return summary


@cli.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--p", "p", type=float, default=1.0, show_default=True, help="Fast@p shown in the table.")
@click.option("--per-problem", is_flag=True, help="Also print one row per sample.")
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write the summary as JSON here.")
@click.option("--csv", "csv_path", type=click.Path(path_type=Path), help="Write the summary as CSV here.")
def report(run_dir, p, per_problem, json_path, csv_path):
    """Correct@1 / Fast@p per level and overall, against each baseline."""
    from .report.render import to_csv, to_json

    if not run_dir.joinpath("results.db").exists():
        raise EKBError(f"{run_dir}: no results.db here (run `ekb eval {run_dir}` first)")
    try:
        summary = _print_report(run_dir, p, per_problem)
    except ValueError as e:
        raise EKBError(str(e)) from e
    if json_path:
        json_path.write_text(to_json(summary))
    if csv_path:
        csv_path.write_text(to_csv(summary))


# ------------------------------------------------------------------------------------------ demo
@cli.command()
@click.option(
    "--out", "run_dir", type=click.Path(path_type=Path), default=Path("runs/demo"), show_default=True
)
@click.option("--level", type=int, default=1, show_default=True)
@click.option("--problem", "problems", multiple=True, help="Only these problems (repeatable).")
@click.option("--quick", is_flag=True, help="Short timing protocol.")
def demo(run_dir=Path("runs/demo"), level=1, problems=(), quick=False):
    """The main job on built-in defaults: write the reference and rule-based candidates for the suite,
    evaluate them on the host CPU (1 thread), print the table. No network, API key or GPU needed."""
    from .generators.reference_candidates import write_reference_candidates
    from .problems import select
    from .runs import EvalConfig

    probs = select(level=level, ids=list(problems) or None)
    console.print(
        f"EdgeKernelBench demo: {len(probs)} level-{level} problems, reference + rule-based "
        f"candidates, host CPU, 1 thread -> {run_dir}"
    )
    write_reference_candidates(probs, run_dir)
    _run_eval(run_dir, EvalConfig(timing=_timing(quick)), [p.id for p in probs])
    _print_report(run_dir, per_problem=True)


def main(argv: list[str] | None = None) -> int:
    try:
        cli.main(args=argv, prog_name="ekb", standalone_mode=False)
        return 0
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Abort:
        click.echo("ekb: aborted", err=True)
        return 130
    except EKBError as e:
        click.echo(f"ekb: error: {e}", err=True)
        return 2
    except KeyboardInterrupt:
        click.echo("ekb: interrupted; finished results are kept in the run store", err=True)
        return 130
    except SystemExit as e:
        return int(e.code or 0)
    except Exception as e:  # never a traceback for the user; EKB_DEBUG=1 shows it
        if os.environ.get("EKB_DEBUG"):
            raise
        click.echo(f"ekb: internal error: {type(e).__name__}: {e} (EKB_DEBUG=1 for a traceback)", err=True)
        return 1


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
