"""`ekb eval`, `ekb run`, `ekb check`, `ekb baseline`, `ekb demo`: judging candidates and baselines."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from ..errors import EKBError
from ..rundir import candidates_dir
from .common import (
    _cluster,
    _eval_options,
    _llm_options,
    _profiles,
    _progress,
    _ray_option,
    _run_dir_profiles_option,
    _timing,
    _tracker_option,
    console,
)
from .generate import _generate
from .report import _print_report


# ------------------------------------------------------------------------------------------ eval
def _check_tracker(tracker, profiles) -> None:
    """One clear error up front when a chosen backend would use a tracker that cannot be reached."""
    from ..backends.rpc import default_tracker, farm_status

    for prof in profiles:
        if prof.rpc_key and (tracker or prof.run == "remote"):
            farm_status(tracker or default_tracker())
            return


def _baselines(value: str | None) -> tuple[str, ...]:
    """--baselines: comma-separated names of KNOWN_BASELINES; None: the default ones."""
    from ..harness.job import DEFAULT_BASELINES, KNOWN_BASELINES

    if value is None:
        return DEFAULT_BASELINES
    names = tuple(dict.fromkeys(b.strip() for b in value.split(",") if b.strip()))
    unknown = [b for b in names if b not in KNOWN_BASELINES]
    if unknown or not names:
        raise EKBError(
            f"--baselines: unknown baseline {', '.join(unknown) or '(none given)'}; "
            f"known: {', '.join(KNOWN_BASELINES)}"
        )
    return names


def _eval_config(
    backend,
    threads,
    trials,
    quick,
    no_measure,
    timeout,
    memory_mb,
    tracker=None,
    jobs=None,
    seed=None,
    baselines=None,
    run_dir=None,
    run_dir_override=False,
    ray=None,
):
    """The command's EvalConfig. `run_dir`: its profiles.toml's profiles are resolved too, here, once
    (they reach the workers inside their Jobs), and may replace an existing one only with
    `run_dir_override` (--run-dir-profiles-override). `ray` (--ray ADDRESS) or `jobs` > 1: the judgments
    run on Ray (an existing cluster, or a local instance of `jobs` workers)."""
    from ..harness.api import JudgeConfig, Limits
    from ..runs import EvalConfig, preflight

    if trials < 1:
        raise EKBError("--trials must be at least 1")
    if jobs is not None and jobs < 1:
        raise EKBError("--jobs must be at least 1")
    chosen = _baselines(baselines)
    profiles = _profiles(backend, run_dir=run_dir, run_dir_override=run_dir_override)
    _check_tracker(tracker, profiles)
    backends = [p.name for p in profiles]
    judge = JudgeConfig(
        threads=threads,
        trials=trials,
        seed=seed,
        timing=_timing(quick),
        baselines=chosen,
        measure=not no_measure,
        limits=Limits(timeout_s=timeout, memory_mb=memory_mb),
        tracker=tracker,
    )
    cfg = EvalConfig(
        backends=backends,
        judge=judge,
        profiles={p.name: p for p in profiles},
        jobs=jobs,
        cluster=_cluster(ray, jobs),
    )
    preflight(backends, cfg)  # e.g. a local GPU that is not there: one line before anything runs
    return cfg


def _run_eval(run_dir: Path, cfg, problems=None) -> dict:
    from ..runs import eval_run

    with _progress() as prog:
        state = {}

        def on_start(backend, n):
            state["task"] = prog.add_task(f"eval {backend}", total=n, status="")
            state["cluster"] = False

        def on_result(res):
            mark = "correct" if res.correct else (res.reason or "incorrect")
            status = None if state["cluster"] else f"{res.problem}#{res.sample}: {mark}"
            prog.update(state["task"], advance=1, **({"status": status} if status else {}))

        def on_progress(progress):  # on Ray: done / running / failed, per node
            state["cluster"] = True
            prog.update(state["task"], status=progress.line())

        counts = eval_run(run_dir, cfg, problems, on_start, on_result, on_progress)
    console.print(
        f"evaluated {counts['evaluated']} ({counts['correct']} correct), "
        f"skipped {counts['skipped']} already in {run_dir / 'results.db'}"
    )
    return counts


@click.command("eval")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--problem", "problems", multiple=True, help="Only these problems (repeatable).")
@_eval_options
@_ray_option
@_run_dir_profiles_option
def eval_cmd(run_dir, problems, **opts):
    """Evaluate a directory of candidates (RUN_DIR/candidates/<problem>/sample<k>.py|.json).
    Resumable: finished (problem, sample, backend) records are skipped, unless their row of results.db
    does not authenticate or their candidate file changed since it was judged."""
    if not run_dir.is_dir():
        raise EKBError(f"{run_dir}: no such run directory")
    _run_eval(run_dir, _eval_config(**opts, run_dir=run_dir), list(problems) or None)
    _print_report(run_dir)


@click.command("run")
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
@_ray_option
@_run_dir_profiles_option
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
    cfg = _eval_config(**opts, run_dir=run_dir)
    _generate(
        model,
        run_dir,
        level,
        problems,
        cfg.profiles[cfg.backends[0]],  # as its file defines it (the generator's thread count)
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
    if not candidates_dir(run_dir).is_dir():
        raise EKBError(f"{run_dir}: no candidates were generated")
    _run_eval(run_dir, cfg, list(problems) or None)
    _print_report(run_dir)


@click.command()
@click.argument("problem")
@click.argument("candidate", type=click.Path(path_type=Path))
@_eval_options
def check(problem, candidate, **opts):
    """Evaluate one candidate file for PROBLEM and print the full result."""
    from ..harness.api import evaluate
    from ..problems import get_problem

    p = get_problem(problem)
    if not candidate.exists():
        raise EKBError(f"{candidate}: no such file")
    cfg = _eval_config(**{**opts, "jobs": None})  # one candidate: no Ray
    with console.status(f"evaluating {candidate} on {cfg.backends[0]}"):
        res = evaluate(
            p,
            candidate,
            cfg.profile(cfg.backends[0]),
            cfg.judge,
        )
    click.echo(json.dumps(res.to_dict(), indent=1))
    compile_only = res.reason == "not_checked"
    status = "correct" if res.correct else f"{res.reason}: {res.detail.splitlines()[0] if res.detail else ''}"
    style = "green" if res.correct else "yellow" if compile_only else "red"
    console.print(Text(f"{p.id} on {res.backend}: {status}", style=style))
    ort = res.extra.get("onnxruntime_output") or {}
    if ort.get("matches_oracle") is False:  # the ORT baseline timed a result the oracle rejects
        console.print(
            Text(
                f"note: onnxruntime's own output differs from the oracle ({res.oracle}) here: "
                f"{ort['mismatched']} of {ort['elements']} elements, max abs err {ort['max_abs_err']:.3g}",
                style="yellow",
            )
        )
    sys.exit(0 if res.correct or compile_only else 1)


# ------------------------------------------------------------------------------------------ baseline
@click.command()
@click.option("--backend", default="host-cpu", show_default=True)
@click.option("--level", type=int, help="Only this level.")
@click.option("--problem", "problems", multiple=True, help="Only these problems (repeatable).")
@click.option(
    "--out", "run_dir", type=click.Path(path_type=Path), default=Path("runs/baselines"), show_default=True
)
@click.option("--threads", type=int, default=1, show_default=True)
@click.option("--quick", is_flag=True, help="Short timing protocol.")
@click.option("--force", is_flag=True, help="Measure again problems already measured.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (baselines, timer floors), not tables.")
@_tracker_option
def baseline(backend, level, problems, run_dir, threads, quick, force, as_json, tracker):
    """Measure the baselines (tvm-default, onnxruntime, and the unscheduled reference) for the suite.
    On a GPU: tvm-default and the reference with dlight's GPU schedule (no CPU onnxruntime).
    Also the floor of each contender's timer (an empty kernel through it), once per backend and threads."""
    from ..problems import select
    from ..runs.baselines import measurable, measure_baselines, measure_floors

    profiles = _profiles(backend, threads)
    if len(profiles) != 1:
        raise EKBError("--backend takes one backend for `ekb baseline`")
    (prof,) = profiles
    backend = prof.name
    _check_tracker(tracker, [prof])
    measurable(prof, threads, tracker)  # one clear line when nothing can be timed there
    probs = select(level=level, ids=list(problems) or None)
    with _progress() as prog:
        task = prog.add_task(f"baselines {backend}", total=len(probs) + 1, status="")
        measured = measure_baselines(
            probs,
            prof,
            run_dir,
            threads=threads,
            timing=_timing(quick),
            force=force,
            on_result=lambda pid, ok: prog.update(task, advance=1, status=pid),
            tracker=tracker,
        )
        prog.update(task, status="timer floors")
        floors = measure_floors(prof, run_dir, threads, _timing(quick), force, tracker)
        prog.update(task, advance=1, status="timer floors")
    if as_json:
        out = {"backend": backend, "threads": threads, "baselines": measured, "floors": floors}
        click.echo(json.dumps(out, indent=1))
        return
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
    _print_floors(floors)
    console.print(f"stored in {run_dir / 'results.db'}")


_ORT_TIMERS = {
    "native": "C loop over RunWithBinding, I/O bound",
    "python-iobinding": "Python loop over run_with_iobinding, I/O bound",
    "python-run": "Python loop over session.run",
}


def _print_floors(floors: dict) -> None:
    if "error" in floors:
        console.print(f"timer floors: not measured: {floors['error'].splitlines()[0]}")
        return
    how = floors.get("onnxruntime_timer") or {}
    t = Table(title="timer floors: an empty kernel through each contender's timer, median us")
    for c in ("contender", "timed as", "us/call"):
        t.add_column(c, justify="right" if c == "us/call" else "left")
    for name, sec in floors["seconds"].items():
        what = floors.get("describe", {}).get(name, "")
        if name == "onnxruntime" and how:
            what = _ORT_TIMERS.get(how.get("timer"), str(how.get("timer")))
            what += " on the device" if how.get("on") == "device" else ""
            what += f" (fallback: {how['why']})" if how.get("why") else ""
        t.add_row(name, what, f"{sec * 1e6:.2f}")
    for name, why in floors.get("not_measured", {}).items():
        t.add_row(name, f"not measured: {why}", "-")
    console.print(t)


# ------------------------------------------------------------------------------------------ demo
DEMO_AGENT_PROBLEMS = ("L1/dwconv3x3_kws", "L2/ds_block_kws")  # two of the agent subset, quick to tune
DEMO_AGENT_METHODS = "direct,flat,leka,metaschedule"
DEMO_DEPLOY = "L3/dscnn_kws"


@click.command()
@click.option(
    "--out", "run_dir", type=click.Path(path_type=Path), default=Path("runs/demo"), show_default=True
)
@click.option("--level", type=int, default=1, show_default=True, help="The suite's level judged in step 1.")
@click.option("--problem", "problems", multiple=True, help="Step 1: only these problems (repeatable).")
@click.option("--full", is_flag=True, help="Step 1 with the full timing protocol (25 rounds; ~8 min more).")
@click.option("--quick", is_flag=True, hidden=True, help="(Step 1's short protocol: the default.)")
@click.pass_context
def demo(ctx, run_dir=Path("runs/demo"), level=1, problems=(), full=False, quick=False):
    """The main job on built-in defaults, about 8 minutes on 2 cores with no network, key or GPU: (1) the
    suite's reference and rule-based candidates judged on this CPU; (2) LEKA against direct, flat and
    MetaSchedule on two problems of the agent subset under one budget (offline proposer); (3) a model
    deployed from what they found, verified and timed; (4) the HTML report, its path printed last.
    Resumable: run it again and it goes on where it stopped."""
    from ..generators.reference_candidates import write_reference_candidates
    from ..harness.api import JudgeConfig
    from ..problems import select
    from ..runs import EvalConfig
    from .agent import agent_cmd
    from .deploy import deploy_cmd
    from .report import report

    probs = select(level=level, ids=list(problems) or None)
    suite, agents, kernels = run_dir / "suite", run_dir / "agents", run_dir / "kernels.sqlite"
    protocol = "full" if full else "short"
    console.rule(f"1/4  the level-{level} suite: {len(probs)} problems, reference + rule-based candidates")
    console.print(f"judged on this machine's CPU, 1 thread, the {protocol} timing protocol -> {suite}")
    write_reference_candidates(probs, suite)
    _run_eval(suite, EvalConfig(judge=JudgeConfig(timing=_timing(not full))), [p.id for p in probs])
    _print_report(suite)
    console.rule(f"2/4  agents under one budget on {', '.join(DEMO_AGENT_PROBLEMS)}")
    ctx.invoke(
        agent_cmd,
        run_dir=agents,
        methods=DEMO_AGENT_METHODS,
        problems=DEMO_AGENT_PROBLEMS,
        budget=6,
        quick=True,
        kernel_db=kernels,
    )
    console.rule(f"3/4  {DEMO_DEPLOY} deployed: the kernel database's decisions, rule-based ones elsewhere")
    ctx.invoke(
        deploy_cmd, model=DEMO_DEPLOY, out=run_dir / "deploy", kernel_db=kernels, rules=True, quick=True
    )
    console.rule("4/4  the report")
    html = run_dir / "report.html"
    ctx.invoke(report, run_dirs=(suite, agents), html_path=html)
    console.print(f"report: {html}")
