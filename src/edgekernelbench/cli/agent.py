"""`ekb agent` (LEKA and the methods it is compared with, under one budget) and `ekb db` (the kernel
database of decisions)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from ..errors import EKBError
from .common import _cluster, _profiles, _progress, _ray_option, console


@click.command("agent")
@click.option(
    "--out", "run_dir", type=click.Path(path_type=Path), default=Path("runs/agent"), show_default=True
)
@click.option("--methods", default="direct,flat,cli,leka", show_default=True, help="Comma-separated methods.")
@click.option("--model", default=None, help="The model for every method (as `ekb generate`); none: offline.")
@click.option(
    "--budget",
    type=click.IntRange(1),
    default=8,
    show_default=True,
    help="Model calls and judge evaluations per problem and method.",
)
@click.option(
    "--wall", type=float, default=1800.0, show_default=True, help="Wall-clock cap per problem and method (s)."
)
@click.option("--subset", default=None, help="A named subset of problems (agent).")
@click.option(
    "--suite",
    type=click.Choice(["suite", "zoo", "user"]),
    help="Only this suite's problems (zoo: the held-out models, problems/zoo.py). Default: all but the zoo.",
)
@click.option("--level", type=int, default=None)
@click.option("--problem", "problems", multiple=True, help="Only these problems (repeatable).")
@click.option("--backend", default="host-cpu", show_default=True)
@click.option("--threads", type=int, default=1, show_default=True)
@click.option(
    "--check-trials",
    "check_trials",
    type=int,
    default=5,
    show_default=True,
    help="The judge's correctness trials per candidate.",
)
@click.option(
    "--trials",
    "tune_trials",
    type=click.IntRange(1),
    default=None,
    help="MetaSchedule: measured trials per problem [default: --budget].",
)
@click.option(
    "--quick",
    is_flag=True,
    help="Short timing protocol for the search's judgments (9 rounds of 8 ms; up to 27 while they disagree).",
)
@click.option(
    "--agent-cmd",
    default=None,
    help="The external coding agent (method cli): a command line with {workspace}, {task}, {model}.",
)
@click.option(
    "--kernel-db", type=click.Path(path_type=Path), default=None, help="Kernel database ($EKB_KERNEL_DB)."
)
@click.option("--no-reuse", is_flag=True, help="LEKA: do not replay decisions from the kernel database.")
@click.option(
    "--patience",
    type=click.IntRange(0),
    default=8,
    show_default=True,
    help="LEKA: stop after this many judgments in a row that kept nothing (0: spend the whole budget).",
)
@click.option("--temperature", type=float, default=0.2, show_default=True)
@click.option("--no-cache", is_flag=True, help="Call the model again even for cached answers.")
@click.option(
    "--jobs",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="N > 1: the episodes on a local Ray instance of N workers, one (problem, method) per worker, each "
    "on a physical core of its own (pip install 'edgekernelbench[cluster]'; docs/cluster.md).",
)
@_ray_option
def agent_cmd(
    run_dir,
    suite,
    methods,
    model,
    budget,
    wall,
    subset,
    level,
    problems,
    backend,
    threads,
    check_trials,
    tune_trials,
    quick,
    agent_cmd,
    kernel_db,
    no_reuse,
    patience,
    temperature,
    no_cache,
    jobs=1,
    ray=None,
):
    """Optimize problems with agents under one budget: direct (one-shot, and best of B), flat (one
    conversation with the judge's feedback), cli (an external coding agent), leka (layer by layer),
    metaschedule (TVM's auto-tuner, --trials measured trials per problem, then judged once).
    Without --model the offline (builtin) proposer is used: no key, no network. Resumable. On Ray (--ray,
    --jobs N > 1) the model calls are made here, with this process's keys: the workers hold none."""
    from ..agents.budget import Budget
    from ..agents.episode import AgentConfig
    from ..agents.run import METHODS, run_agents
    from ..harness.timing import TimingConfig
    from ..problems import select
    from ..runs import backend_peak
    from ..store import RunStore

    wanted = [m.strip() for m in methods.split(",") if m.strip()]
    bad = [m for m in wanted if m not in METHODS]
    if bad:
        raise EKBError(f"unknown method(s) {', '.join(bad)}; methods: {', '.join(METHODS)}")
    (profile,) = _profiles(backend, threads)
    from ..backends.hostinfo import require_isa

    cluster = _cluster(ray, jobs)
    if not (cluster and cluster.address):  # a cluster's nodes check their own CPU (cluster/tasks)
        require_isa(profile)  # candidates for an ISA this CPU lacks would only die of SIGILL
    if not profile.can_time:
        raise EKBError(f"{backend} cannot time anything here: agents need a backend that can (e.g. host-cpu)")
    probs = select(level=level, subset=subset, ids=list(problems) or None, suite=suite)
    if not probs:
        raise EKBError("no problems selected")
    if cluster is not None and agent_cmd and "cli" in wanted:
        raise EKBError(
            "--methods cli with --agent-cmd runs an external agent that needs API keys where it runs: "
            "not on Ray (run it without --ray and --jobs)"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    peak = None  # on Ray, each node's own (cluster/tasks.node_peak)
    if cluster is None:
        with RunStore(run_dir) as store:
            peak = backend_peak(store, profile, threads)
    cfg = AgentConfig(
        backend=profile,
        threads=threads,
        trials=check_trials,
        tune_trials=tune_trials,
        timing=TimingConfig.search() if quick else TimingConfig(),
        peak=peak,
        budget=Budget(calls=budget, evals=budget, wall_s=wall),
        model=model,
        temperature=temperature,
        use_cache=not no_cache,
        agent_cmd=agent_cmd,
        kernel_db=kernel_db,
        reuse=not no_reuse,
        patience=patience,
    )
    console.print(
        f"ekb agent: {len(probs)} problem(s) x {', '.join(wanted)}; proposer {model or 'builtin (offline)'}; "
        f"budget {budget} calls / {budget} evaluations / {wall:.0f} s per problem and method -> {run_dir}"
    )

    def done(pid, method, record):
        s, f = record.get("best_speedup"), record.get("final_speedup")
        u = record.get("usage") or {}
        console.print(
            f"  {pid} {method}: {record.get('status')}"
            + (f", best {s:.2f}x over tvm-default in the search" if s else "")
            + (f", {f:.2f}x judged afresh" if f else "")
            + (f", {u.get('evals')} evaluations, {u.get('wall_s', 0):.0f} s" if u else "")
        )

    if cluster is None:
        counts = run_agents(run_dir, probs, wanted, cfg, on_done=done)
    else:
        from ..cluster.agents import run_agents_on_cluster

        console.print(f"on {cluster.describe()}")
        with _progress() as prog:
            bar = prog.add_task("episodes", total=None, status="")

            def progress(p):
                prog.update(bar, total=p.total, completed=p.done, status=p.line())

            counts = run_agents_on_cluster(run_dir, probs, wanted, cfg, cluster, done, progress)
    console.print(f"done {counts['done']}, already done {counts['skipped']}")
    from .report import _print_report

    _print_report(run_dir)


@click.group("db")
def db():
    """The kernel database: decisions judged correct and faster, by workload and target ($EKB_KERNEL_DB)."""


def _open(path):
    from ..kerneldb import KernelDB

    return KernelDB(path)


_db_option = click.option(
    "--db", "path", type=click.Path(path_type=Path), default=None, help="Database file."
)


@db.command("list")
@_db_option
@click.option("--json", "as_json", is_flag=True)
def db_list(path, as_json):
    """One line per stored kernel decision."""
    with _open(path) as kdb:
        entries = kdb.entries()
        if as_json:
            click.echo(
                json.dumps(
                    [
                        {k: v for k, v in e.to_dict().items() if k != "layers"} | {"layers": sorted(e.layers)}
                        for e in entries
                    ],
                    indent=1,
                )
            )
            return
        t = Table(title=Text(f"{len(entries)} decision(s) in {kdb.path}"))
        for c in ("id", "workload", "func", "layers", "problem", "method", "speedup", "target", "created"):
            t.add_column(c)
        for e in entries:
            t.add_row(
                str(e.id),
                e.workload,
                Text(e.func),
                ",".join(k for k in ("loop", "memory", "target") if k in e.layers),
                Text(e.problem),
                Text(e.method),
                f"{e.speedup:.2f}x" if e.speedup else "-",
                Text(json.loads(e.target).get("kind", "?") + " " + str(json.loads(e.target).get("mcpu", ""))),
                e.created,
            )
        console.print(t)


@db.command("show")
@_db_option
@click.argument("entry_id", type=int)
def db_show(path, entry_id):
    """One decision, with its traces, as JSON."""
    with _open(path) as kdb:
        click.echo(json.dumps(kdb.get(entry_id).to_dict(), indent=1))


@db.command("export")
@_db_option
@click.argument("out", type=click.Path(path_type=Path), required=False)
def db_export(path, out):
    """Every decision as JSON lines (to OUT, or standard output)."""
    with _open(path) as kdb:
        text = "".join(json.dumps(e.to_dict()) + "\n" for e in kdb.entries())
    if out:
        out.write_text(text)
    else:
        sys.stdout.write(text)


@db.command("import")
@_db_option
@click.argument("src", type=click.Path(path_type=Path))
def db_import(path, src):
    """Adds the decisions of a JSON-lines file (from `ekb db export`)."""
    if not src.is_file():
        raise EKBError(f"{src}: no such file")
    rows = []
    for n, line in enumerate(src.read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as e:
                raise EKBError(f"{src}:{n}: not JSON ({e})") from None
    with _open(path) as kdb:
        console.print(f"imported {kdb.import_entries(rows)} decision(s) into {kdb.path}")
