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

from .errors import EKBError

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
    """Comma-separated backend names, each checked against the profiles (UnknownBackend otherwise)."""
    from .backends.registry import get_profile

    names = [b.strip() for b in value.split(",") if b.strip()]
    for n in names:
        get_profile(n)
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
    from .reference import kernel_flops

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
        flops = kernel_flops(funcs[kname])
        row = [str(i), Text(kname), "-" if flops is None else f"{flops / 1e6:.3f}"]
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
def _llm_options(f):
    f = click.option(
        "--samples",
        type=click.IntRange(1),
        default=1,
        show_default=True,
        help="LLM models: samples per problem.",
    )(f)
    f = click.option("--temperature", type=float, default=0.2, show_default=True, help="LLM sampling.")(f)
    f = click.option("--max-tokens", type=click.IntRange(1), default=8192, show_default=True)(f)
    f = click.option(
        "--concurrency", type=click.IntRange(1), default=4, show_default=True, help="LLM calls at once."
    )(f)
    f = click.option("--no-cache", is_flag=True, help="Call the model again even for cached answers.")(f)
    f = click.option(
        "--cache",
        "cache_path",
        type=click.Path(path_type=Path),
        help="Response cache (SQLite; default $EKB_LLM_CACHE or ~/.cache/edgekernelbench/).",
    )(f)
    f = click.option(
        "--request-timeout", type=float, default=120.0, show_default=True, help="Seconds per LLM request."
    )(f)
    f = click.option(
        "--retries",
        type=click.IntRange(0),
        default=4,
        show_default=True,
        help="Retries (exponential backoff) on 429, 5xx, timeouts.",
    )(f)
    return f


def _generate(model, run_dir, level, problems, backend, **llm_opts):
    """Writes candidates: the built-in ones, or an LLM's (llm_opts: the _llm_options of the command)."""
    from .problems import select

    profile = None
    if backend:
        from .backends.registry import get_profile

        names = _backends(backend)
        if len(names) != 1:
            raise EKBError("--backend takes one backend for `ekb generate`")
        profile = get_profile(names[0])
    probs = select(level=level, ids=list(problems) or None)
    if model != "builtin":
        return _generate_llm(model, run_dir, probs, profile, **llm_opts)
    from .generators.reference_candidates import write_reference_candidates

    with _progress() as prog:
        task = prog.add_task("generating", total=len(probs), status="")
        paths = []
        for p in probs:
            prog.update(task, status=p.id)
            if profile is not None and profile.kind == "gpu":
                paths += _write_gpu_candidates(p, run_dir, profile)
            elif profile is not None:
                paths += write_reference_candidates(
                    [p], run_dir, vector_lanes=profile.vector_lanes, threads=profile.threads
                )
            else:
                paths += write_reference_candidates([p], run_dir)
            prog.advance(task)
    console.print(f"wrote {len(paths)} candidate files under {run_dir / 'candidates'}")


def _generate_llm(
    model,
    run_dir,
    probs,
    profile,
    track="direct",
    samples=1,
    temperature=0.2,
    max_tokens=8192,
    concurrency=4,
    no_cache=False,
    cache_path=None,
    request_timeout=120.0,
    retries=4,
):
    from .llm.generate import GenConfig, generate_run
    from .llm.providers import RetryPolicy, make_provider

    if profile is None:
        from .backends.registry import get_profile

        profile = get_profile("host-cpu")
    cfg = GenConfig(
        model=model,
        samples=samples,
        track=track,
        temperature=temperature,
        max_tokens=max_tokens,
        concurrency=concurrency,
        use_cache=not no_cache,
        cache_path=cache_path,
        policy=RetryPolicy(retries=retries, timeout_s=request_timeout),
    )
    make_provider(model, cfg.policy)  # a bad model string or a missing key: one error line, up front
    with _progress() as prog:
        task = prog.add_task(f"generating ({model})", total=len(probs) * samples, status="")

        def on_result(rec):
            prog.update(task, advance=1, status=f"{rec['problem']}#{rec['sample']}: {rec['status']}")

        counts = generate_run(run_dir, probs, profile, cfg, on_result)
        prog.update(task, completed=len(probs) * samples)
    console.print(
        f"generated {counts['generated']} ({counts['cached']} from the cache, {counts['parse_errors']} "
        f"without usable code, {counts['failed']} failed calls), skipped {counts['skipped']} existing, "
        f"under {run_dir / 'candidates'}"
    )
    return counts


@cli.command()
@click.option(
    "--model",
    default="builtin",
    show_default=True,
    help="builtin = the unscheduled reference (sample 0) and the rule-based schedule (sample 1); or an LLM: "
    "openai:MODEL, anthropic:MODEL, openai-compatible:http://HOST:PORT/v1:MODEL, replay:RESPONSES.jsonl.",
)
@click.option("--out", "run_dir", type=click.Path(path_type=Path), required=True, help="Run directory.")
@click.option("--level", type=int, default=1, show_default=True)
@click.option("--problem", "problems", multiple=True, help="Only these problems (repeatable).")
@click.option(
    "--backend",
    help="Generate for this backend: its vector width and thread count steer the rules; for a GPU "
    "backend sample 1 is the reference scheduled with dlight's GPU rules instead. LLM prompts describe it.",
)
@click.option(
    "--track",
    type=click.Choice(["direct", "schedule"]),
    default="direct",
    show_default=True,
    help="LLM output: a full TVMScript module (direct) or schedule(name, sch) code (schedule).",
)
@_llm_options
def generate(model, run_dir, level, problems, backend, **opts):
    """Write candidate files into a run directory (LLM generation resumes: existing samples are skipped)."""
    _generate(model, run_dir, level, problems, backend, **opts)


def _write_gpu_candidates(problem, run_dir: Path, profile) -> list[Path]:
    """sample0.py: the unscheduled reference (fails on a GPU: loops not bound to threads);
    sample1.json: the reference with dlight's default GPU schedule for the profile's target."""
    from .backends.gpu import gpu_default_spec
    from .generators.reference_candidates import candidate_dir, reference_spec

    d = candidate_dir(Path(run_dir), problem.id)
    d.mkdir(parents=True, exist_ok=True)
    ref_path, gpu_path = d / "sample0.py", d / "sample1.json"
    ref_path.write_text(reference_spec(problem).module + "\n")
    gpu_path.write_text(gpu_default_spec(problem, profile).to_json() + "\n")
    return [ref_path, gpu_path]


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
        "--memory-mb",
        type=int,
        default=6144,
        show_default=True,
        help="Memory limit per worker (MiB): address space; resident memory on a local GPU.",
    )(f)
    f = _tracker_option(f)
    return f


def _tracker_option(f):
    return click.option(
        "--tracker",
        envvar="EKB_TRACKER",
        help="TVM RPC tracker HOST:PORT ($EKB_TRACKER): backends with an rpc_key run on its devices.",
    )(f)


def _check_tracker(tracker, backends) -> None:
    """One clear error up front when a chosen backend would use a tracker that cannot be reached."""
    from .backends.registry import get_profile
    from .backends.rpc import default_tracker, farm_status

    for name in backends:
        prof = get_profile(name)
        if prof.rpc_key and (tracker or prof.run == "remote"):
            farm_status(tracker or default_tracker())
            return


def _use_run_dir_profiles(run_dir: Path) -> None:
    """RUN_DIR/profiles.toml extends the backend profiles for this run (the parent and its workers)."""
    extra = run_dir / "profiles.toml"
    if extra.is_file():
        current = [f for f in os.environ.get("EKB_PROFILES", "").split(os.pathsep) if f]
        os.environ["EKB_PROFILES"] = os.pathsep.join([*current, str(extra.resolve())])


def _eval_config(backend, threads, trials, quick, no_measure, timeout, memory_mb, tracker=None):
    from .harness.isolation import Limits
    from .runs import EvalConfig

    if trials < 1:
        raise EKBError("--trials must be at least 1")
    backends = _backends(backend)
    _check_tracker(tracker, backends)
    return EvalConfig(
        backends=backends,
        threads=threads,
        trials=trials,
        timing=_timing(quick),
        measure=not no_measure,
        limits=Limits(timeout_s=timeout, memory_mb=memory_mb),
        tracker=tracker,
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
    _use_run_dir_profiles(run_dir)
    _run_eval(run_dir, _eval_config(**opts), list(problems) or None)
    _print_report(run_dir)


@cli.command("run")
@click.option(
    "--method",
    type=click.Choice(["direct", "schedule"]),
    default="direct",
    show_default=True,
    help="Generation track (see `ekb generate --track`).",
)
@click.option("--model", required=True, help="As for `ekb generate` (builtin or an LLM model string).")
@click.option("--out", "run_dir", type=click.Path(path_type=Path), required=True, help="Run directory.")
@click.option("--level", type=int, default=1, show_default=True)
@click.option("--problem", "problems", multiple=True, help="Only these problems (repeatable).")
@_llm_options
@_eval_options
def run_cmd(
    method,
    model,
    run_dir,
    level,
    problems,
    samples,
    temperature,
    max_tokens,
    concurrency,
    no_cache,
    cache_path,
    request_timeout,
    retries,
    **opts,
):
    """Generate (for the first backend) then evaluate and report: `ekb generate` + `ekb eval`."""
    cfg = _eval_config(**opts)
    _generate(
        model,
        run_dir,
        level,
        problems,
        cfg.backends[0],
        track=method,
        samples=samples,
        temperature=temperature,
        max_tokens=max_tokens,
        concurrency=concurrency,
        no_cache=no_cache,
        cache_path=cache_path,
        request_timeout=request_timeout,
        retries=retries,
    )
    if not (run_dir / "candidates").is_dir():
        raise EKBError(f"{run_dir}: no candidates were generated")
    _use_run_dir_profiles(run_dir)
    _run_eval(run_dir, cfg, list(problems) or None)
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
            tracker=cfg.tracker,
        )
    click.echo(json.dumps(res.to_dict(), indent=1))
    compile_only = res.reason == "not_checked"
    status = "correct" if res.correct else f"{res.reason}: {res.detail.splitlines()[0] if res.detail else ''}"
    style = "green" if res.correct else "yellow" if compile_only else "red"
    console.print(Text(f"{p.id} on {res.backend}: {status}", style=style))
    sys.exit(0 if res.correct or compile_only else 1)


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
@_tracker_option
def baseline(backend, level, problems, run_dir, threads, quick, force, tracker):
    """Measure the baselines (tvm-default, onnxruntime, and the unscheduled reference) for the suite.
    On a GPU: tvm-default and the reference with dlight's GPU schedule (no CPU onnxruntime)."""
    from .baselines.measure import measurable, measure_baselines
    from .problems import select

    (backend,) = _backends(backend)
    _check_tracker(tracker, [backend])
    measurable(backend, threads, tracker)  # one clear line when nothing can be timed there
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
            tracker=tracker,
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
    from .report.render import render_backend_matrix, render_problem_table, render_tables
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
    if len(summary.backends) > 1:  # one spec, many backends: side by side
        console.print(render_backend_matrix(summary, p_headline=p))
    by_method = summaries_by_method(results)
    if len(by_method) > 1:  # several models / methods in one run: the metrics of each
        for method, sub in by_method.items():
            console.print(Text(f"candidates made by: {method}", style="bold"))
            for table in render_tables(sub, p_headline=p):
                console.print(table)
    for line in _generation_lines(run_dir):
        console.print(Text(line), soft_wrap=True)
    return summary


def summaries_by_method(results) -> dict:
    """The metrics of each method (model) that made candidates in a run: "llm:openai:gpt-4o", "rules", ..."""
    from .report.summary import summarize

    groups: dict[str, list] = {}
    for r in results:
        groups.setdefault(r.method or "unknown", []).append(r)
    return {m: summarize(rs) for m, rs in sorted(groups.items())}


def _generation_lines(run_dir: Path) -> list[str]:
    """One line per model that generated this run's candidates: tokens, cost, failures, template."""
    from .llm.generate import generation_summary
    from .store import RunStore

    with RunStore(run_dir) as store:
        records = store.generations()
    lines = []
    for m in generation_summary(records):
        cost = "unknown" if m["cost"] is None else f"${m['cost']:.4f}"
        lines.append(
            f"generation {m['model']}: {m['samples']} samples ({m['cached']} cached, {m['parse_errors']} "
            f"without code, {m['provider_errors']} failed calls), tokens {m['input_tokens']:,} in / "
            f"{m['output_tokens']:,} out, cost {cost}; template {', '.join(m['templates'])}"
        )
    return lines


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
        from .llm.generate import generation_summary
        from .store import RunStore

        with RunStore(run_dir) as store:
            gens = generation_summary(store.generations())
        data = json.loads(to_json(summary))
        if gens:
            data["generation"] = gens
        with RunStore(run_dir) as store:
            by_method = summaries_by_method(store.results())
        if len(by_method) > 1:
            data["by_method"] = {m: json.loads(to_json(sub)) for m, sub in by_method.items()}
        json_path.write_text(json.dumps(data, indent=1))
    if csv_path:
        csv_path.write_text(to_csv(summary))


# ------------------------------------------------------------------------------------------ backends
def _si(x: float | None, unit: str = "") -> str:
    """1.28e12 -> "1.28 T" + unit; None -> "-"."""
    if not x:
        return "-"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}".rstrip()


def _short_source(source: str) -> str:
    """ "datasheet-derived: 1 core x ..." -> "datasheet-derived"; "measured: ..., 2026-01-02, ..." ->
    "measured 2026-01-02" (the full text is in `ekb backends --json`)."""
    import re

    if not source:
        return "-"
    head = source.split(":")[0].split("(")[0].strip().replace("datasheet-derived", "datasheet")
    date = re.search(r"\d{4}-\d{2}-\d{2}", source)
    return f"{head} {date.group(0)}" if date and source.startswith("measured:") else head


@cli.command("backends")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def backends_cmd(as_json):
    """The backend profiles (built-in and user TOML) and what each can do on this machine:
    build (TVM target available), check correctness, time."""
    from .backends.capabilities import backend_capabilities
    from .backends.profiles import load_profiles

    rows = [backend_capabilities(prof) for prof in load_profiles().values()]
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    t = Table(title=f"{len(rows)} backends")
    for c, justify in (
        ("name", "left"),
        ("kind", "left"),
        ("target", "left"),
        ("threads", "right"),
        ("vec bits", "right"),
        ("run", "left"),
        ("FLOP/s", "right"),
        ("B/s", "right"),
        ("peak source", "left"),
        ("build", "left"),
        ("check", "left"),
        ("time", "left"),
    ):
        t.add_column(c, justify=justify, overflow="fold", no_wrap=c in ("name", "run", "FLOP/s", "B/s"))
    for r in rows:
        t.add_row(
            Text(r["name"]),
            r["kind"],
            Text(r["target_short"]),
            str(r["threads"]),
            str(r["vector_bits"]),
            r["run"],
            _si(r["peak_flops"]),
            _si(r["peak_bandwidth"]),
            Text(_short_source(r["peak_source"])),
            *[
                Text(r[k]["detail"], style="green" if r[k]["ok"] else "yellow")
                for k in ("build", "check", "time")
            ],
        )
    console.print(t)


@cli.command()
@click.option(
    "--backend", required=True, help="The backend to measure (one that runs here, or on a farm device)."
)
@click.option("--threads", type=int, help="Threads (default: the profile's).")
@click.option(
    "--profiles-file",
    type=click.Path(path_type=Path),
    help="User profile TOML to store the figures in (default ~/.config/edgekernelbench/profiles.toml).",
)
@click.option("--mib", type=click.IntRange(1), default=64, show_default=True, help="Bandwidth buffer (MiB).")
@_tracker_option
def peak(backend, threads, profiles_file, mib, tracker):
    """Measure a backend's peak FLOP/s and memory bandwidth (TVM micro-kernels) and store them in
    the user profile file: the roofline of later runs uses them. A profile with an rpc_key is measured
    on a device of its key behind --tracker (a run = "remote" profile always is)."""
    import datetime

    from .backends.profile_file import store_peak
    from .backends.registry import get_profile
    from .runs import measure_peak_isolated

    names = _backends(backend)
    if len(names) != 1:
        raise EKBError("--backend takes one backend for `ekb peak`")
    name = names[0]
    profile = get_profile(name, threads)
    path = profiles_file or Path.home() / ".config" / "edgekernelbench" / "profiles.toml"
    today = datetime.date.today().isoformat()
    if profile.rpc_key and (tracker or profile.run == "remote"):
        from .backends.peak import measure_peak_remote
        from .backends.rpc import default_tracker, farm_status

        addr = farm_status(tracker or default_tracker()).tracker  # one clear error when unreachable
        msg = f"measuring {name} on a device of '{profile.rpc_key}' ({profile.threads} thread(s))"
        with console.status(msg):
            measured, server = measure_peak_remote(profile, addr, mib=mib)
        result = {"flops": measured.flops, "bandwidth": measured.bandwidth}
        where = f" over RPC on {server}"
    elif profile.run != "local":
        raise EKBError(
            f"{name} cannot run here (run = {profile.run}): `ekb peak` measures on a local device, or on "
            f"a farm device with an rpc_key and --tracker; its peaks stay '{profile.peak_source or 'none'}'"
        )
    else:
        if profile.kind == "gpu":
            from .backends.gpu import local_device

            local_device(profile)  # no device here: one clear line
        with console.status(f"measuring {name} ({profile.threads} thread(s))"):
            result = measure_peak_isolated(name, profile.threads, mib)
        if not result:
            raise EKBError(f"peak measurement failed on {name} (ekb -v peak ... for the reason)")
        where = ""
    source = f"measured: TVM micro-kernels{where}, {today}, {profile.threads} thread(s)"
    store_peak(path, name, result["flops"], result["bandwidth"], source)
    console.print(
        Text(
            f"{name}: {_si(result['flops'], 'FLOP/s')}, {_si(result['bandwidth'], 'B/s')} "
            f"({profile.threads} thread(s)); stored in {path} [{name}]"
        )
    )


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


# ------------------------------------------------------------------------------------------ farm
@cli.group()
def farm():
    """A device farm over TVM RPC: a tracker, and one server per device under its profile's rpc_key.
    `ekb eval RUN_DIR --backend rpi5 --tracker HOST:9190` then judges on the devices of key rpi5."""


@farm.command("tracker")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=9190, show_default=True)
def farm_tracker(host, port):
    """Run TVM's RPC tracker (python -m tvm.exec.rpc_tracker) until interrupted."""
    from .backends.rpc import run_tracker

    try:
        run_tracker(host, port, echo=lambda m: click.echo(m, err=True))
    except KeyboardInterrupt:
        click.echo("ekb farm tracker: stopped", err=True)


@farm.command("server")
@click.option("--key", required=True, help="Device key: the rpc_key of the device's profile (e.g. rpi5).")
@_tracker_option
@click.option(
    "--host", help="Address to listen on (default: 127.0.0.1 with a loopback tracker, else 0.0.0.0)."
)
@click.option(
    "--port", type=click.IntRange(1, 65535), default=9090, show_default=True, help="First port tried."
)
@click.option(
    "--port-end", type=click.IntRange(1, 65535), default=9199, show_default=True, help="Last port + 1."
)
@click.option(
    "--threads",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="The runtime's threads (TVM_NUM_THREADS).",
)
def farm_server(key, tracker, host, port, port_end, threads):
    """Run TVM's RPC server for this machine under KEY, registered with the tracker; restarted when a
    session's process dies (a crashing kernel). It also times the onnxruntime baseline here when
    onnxruntime is installed (python -m edgekernelbench.backends.farm_server)."""
    import signal

    from .backends.rpc import default_tracker, serve_device, server_host_for

    tracker = tracker or default_tracker()

    def _term(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _term)
    try:
        rc = serve_device(
            key,
            tracker,
            host or server_host_for(tracker),
            port,
            max(port_end, port + 1),
            threads=threads,
            echo=lambda m: click.echo(m, err=True),
        )
    except KeyboardInterrupt:
        click.echo(f"ekb farm server: stopped ({key})", err=True)
        rc = 0
    sys.exit(rc)


@farm.command("status")
@_tracker_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def farm_status_cmd(tracker, as_json):
    """The tracker's devices: per key, how many are registered, free and requested."""
    from .backends.rpc import farm_status

    st = farm_status(tracker)
    if as_json:
        click.echo(json.dumps(st.to_dict(), indent=1))
        return
    data = st.to_dict()["keys"]
    t = Table(title=f"RPC tracker {st.tracker}: {len(st.servers)} device server(s)")
    for c in ("key", "devices", "free", "pending", "servers"):
        t.add_column(c, overflow="fold", justify="right" if c in ("devices", "free", "pending") else "left")
    for key, row in data.items():
        counts = [str(row[c]) for c in ("devices", "free", "pending")]
        t.add_row(Text(key), *counts, Text(" ".join(row["servers"])))
    console.print(t)


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
