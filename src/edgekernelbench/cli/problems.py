"""`ekb list`, `ekb show`, `ekb add-model`: the problems of the suite."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from ..rundir import DB_NAME
from .common import console, err_console


# ------------------------------------------------------------------------------------------ list / show
@click.command("list")
@click.option("--level", type=int, help="Only this level (1, 2, 3).")
@click.option("--domain", help="Only this domain (vision, kws, wakeword, anomaly, nlp, sensors, audio).")
@click.option("--category", help="Only this operator class or block kind.")
@click.option("--tag", help="Only problems with this tag.")
@click.option(
    "--suite",
    type=click.Choice(["suite", "zoo", "user"]),
    help="Only this suite's problems: the built-in suite, the held-out zoo, or your own (ekb add-model). "
    "Default: all but the zoo.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_cmd(level, domain, category, tag, suite, as_json):
    """List the problems of the suite."""
    from ..problems import select
    from ..problems.registry import tags_of

    probs = select(level=level, domain=domain, tag=tag, category=category, suite=suite)
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
                        "tags": list(tags_of(p)),
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
        t.add_row(Text(p.id), p.category, p.domain, Text(p.source), Text(",".join(tags_of(p))))
    console.print(t)


@click.command()
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
    from ..problems import get_problem
    from ..reference import build_reference

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
    if baselines_dir.joinpath(DB_NAME).exists():
        from ..store import RunStore

        with RunStore(baselines_dir) as store:
            rows = {k: v for k, v in store.baselines().items() if k[0] == p.id}
    console.print(_kernel_table(ref, rows))
    for (_, backend, name), rec in sorted(rows.items()):
        t = rec["timing"]
        out = rec.get("extra", {}).get("output") or {}
        console.print(
            Text(
                f"baseline {name} on {backend}: median {t['median'] * 1e6:.1f} us "
                f"(IQR {t['iqr'] * 1e6:.1f} us, {t['count']} rounds)"
                + (
                    f"; its output differs from the oracle ({out.get('oracle')}), max abs err "
                    f"{out.get('max_abs_err', 0):.3g}"
                    if out.get("matches_oracle") is False
                    else ""
                )
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
    from ..reference import kernel_flops

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
@click.command("add-model")
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
    from ..checks.add_model import add_model
    from ..checks.selfcheck import check_problem
    from ..problems.user import parse_shapes, user_suite_dir

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
    for f in check.findings:  # e.g. ONNX Runtime off the exact oracle on this CPU
        err_console.print(Text(f"note: {f}"))
