"""`ekb deploy`: a model in, a verified deployable artifact out (edgekernelbench/deploy/)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from ..errors import EKBError
from .common import _tracker_option, console


@click.command("deploy")
@click.argument("model", required=False)
@click.option("--backend", default="host-cpu", show_default=True, help="The profile to deploy for.")
@click.option("--out", type=click.Path(path_type=Path), help="Artifact directory [deploy/<model>-<backend>].")
@click.option("--input", "inputs", multiple=True, help="ONNX file: a static input shape, NAME=D1xD2x...")
@click.option(
    "--from", "from_run", type=click.Path(path_type=Path), help="A run directory: its best decisions."
)
@click.option("--kernel-db", type=click.Path(path_type=Path), help="Kernel database ($EKB_KERNEL_DB).")
@click.option("--no-db", is_flag=True, help="Do not take decisions from the kernel database.")
@click.option(
    "--trials", type=click.IntRange(0), default=0, show_default=True, help="LEKA (offline) evaluations."
)
@click.option("--rules", is_flag=True, help="Rule-based schedules for kernels still without a decision.")
@click.option("--threads", type=click.IntRange(1), default=None, help="Threads [the profile's].")
@click.option("--quick", is_flag=True, help="Short timing protocol (3 rounds of >= 10 ms).")
@click.option("--no-measure", is_flag=True, help="Do not time kernels or the model.")
@click.option(
    "--checks", type=click.IntRange(1), default=3, show_default=True, help="Random input sets checked."
)
@click.option("--atol", type=float, default=None, help="Verification tolerance [the problem's].")
@click.option("--rtol", type=float, default=None, help="Verification tolerance [the problem's].")
@click.option("--no-verify", is_flag=True, help="Build the artifact only.")
@click.option(
    "--verify", "verify_dir", type=click.Path(path_type=Path), help="Verify the artifact in this directory."
)
@_tracker_option
def deploy_cmd(
    model,
    backend,
    out,
    inputs,
    from_run,
    kernel_db,
    no_db,
    trials,
    rules,
    threads,
    quick,
    no_measure,
    checks,
    atol,
    rtol,
    no_verify,
    verify_dir,
    tracker,
):
    """Deploy MODEL (an L3 problem, a user problem from `ekb add-model`, or an ONNX file with --input
    shapes) for a backend into --out: the compiled library, the transformed weights, manifest.json, run.py
    (TVM runtime + NumPy only) and, for a cross profile, a C program. Decisions per kernel: --from RUN, the
    kernel database, --trials N of LEKA, --rules; the rest tvm-default (the manifest says which and why). Then
    verifies it
    against ONNX Runtime in a fresh process (qemu for a cross profile; a farm device with --tracker) and, on
    the host, times it against tvm-default and ONNX Runtime. `ekb deploy --verify DIR` verifies again."""
    from .. import deploy as deploy_pkg

    if verify_dir is not None:
        if model is not None:
            raise EKBError("give MODEL to deploy, or --verify DIR to verify an artifact, not both")
        report = deploy_pkg.verify(
            verify_dir, quick=quick, tracker=tracker, checks=checks, measure=not no_measure
        )
        _print_verification(report, verify_dir)
        if not report["verified"]:
            raise EKBError(
                f"{verify_dir}: the artifact's outputs differ from {report['oracle']}: {_why(report)}"
            )
        return
    if model is None:
        raise EKBError("give MODEL (a problem id or an ONNX file), or --verify DIR")
    d = deploy_pkg.deploy(
        model,
        backend,
        out,
        inputs=list(inputs) or None,
        from_run=from_run,
        kernel_db=kernel_db,
        use_db=not no_db,
        trials=trials,
        rules=rules,
        threads=threads,
        verify=not no_verify,
        quick=quick,
        measure=not no_measure,
        tracker=tracker,
        atol=atol,
        rtol=rtol,
        checks=checks,
    )
    for note in d.notes:  # one line each, never wrapped
        click.echo(f"ekb deploy: note: {note}", err=True)
    for kernel, why in d.fallbacks:
        click.echo(f"ekb deploy: fallback: {kernel}: {why}", err=True)
    _print_kernels(d.manifest)
    seconds = sum(d.manifest["seconds"].values())
    console.print(Text(f"artifact: {d.dir} ({d.manifest['backend']['name']}, built in {seconds:.1f} s)"))
    if d.verification is not None:
        _print_verification(d.verification, d.dir)
        if not d.verification["verified"]:
            raise EKBError(
                f"{d.dir}: the artifact's outputs differ from {d.verification['oracle']}: "
                + _why(d.verification)
            )


def _why(report: dict) -> str:
    bad = [c for c in report["checks"] if not c["matches_oracle"]]
    if not bad:
        return ""
    c = bad[0]
    if "error" in c:
        return c["error"]
    err = c["max_abs_err"]
    return f"check {c['check']}: {c['mismatched']} of {c['elements']} elements, max abs err {err:.3g}"


def _print_kernels(manifest: dict) -> None:
    t = Table(title=Text(f"{manifest['model']['id']} on {manifest['backend']['name']}: kernels"))
    for c in ("kernel", "calls", "workload", "decision", "speedup here", "recorded"):
        t.add_column(c)
    for k in manifest["kernels"]:
        src = k["source"]
        if k["provenance"].get("entry") is not None:
            src += f" #{k['provenance']['entry']}"
        s, ci = k["measured_speedup"], k["measured_ci"]
        here = f"{s:.2f}x [{ci[0]:.2f}, {ci[1]:.2f}]" if s is not None else "-"
        rec = f"{k['recorded_speedup']:.2f}x" if k["recorded_speedup"] else "-"
        t.add_row(Text(k["name"]), str(k["calls"]), k["workload"], Text(src), here, rec)
    console.print(t)
    graph = (manifest.get("decisions") or {}).get("graph")
    if graph:
        names = ", ".join(p.get("name", "?") for p in graph["passes"])
        console.print(Text(f"graph: {names} (from {graph['source']}); the kernels above are that graph's"))


def _print_verification(report: dict, folder) -> None:
    n = len(report["checks"])
    ok = sum(c["matches_oracle"] for c in report["checks"])
    status = "verified" if report["verified"] else "NOT verified"
    console.print(Text(f"{status}: {ok}/{n} input sets match {report['oracle']} ({report['where']})"))
    timing = report.get("timing") or {}
    if timing.get("status") != "measured":
        console.print(Text(f"timing: {timing.get('status', 'not measured')}"))
        return
    times = timing["timings"]
    parts = []
    for name in ("deployed", "tvm-default", "onnxruntime"):
        if name in times:
            t = times[name]
            parts.append(f"{name} {t['median'] * 1e6:.1f} us (IQR {t['iqr'] * 1e6:.1f})")
    sp = timing.get("speedups", {})
    vs = ", ".join(
        f"{s['speedup']:.2f}x [{s['ci'][0]:.2f}, {s['ci'][1]:.2f}] over {n}" for n, s in sp.items()
    )
    env = timing.get("timing_env") or {}
    disturbed = " (machine busy: disturbed)" if env.get("disturbed") else ""
    console.print(Text(f"end to end, {timing['threads']} thread(s): {'; '.join(parts)}; {vs}{disturbed}"))
