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
@click.option(
    "--max-memory",
    help="Fail unless the planned memory (activations + workspace) fits, e.g. 256K, 256KiB, 1.5MB.",
)
@click.option(
    "--runs", type=click.IntRange(1), default=200, show_default=True, help="Single runs timed (percentiles)."
)
@click.option(
    "--profile",
    "profile_dir",
    type=click.Path(path_type=Path),
    help="Write and print the per-kernel profile (with the roofline) into this directory.",
)
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
    max_memory,
    runs,
    profile_dir,
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
    the host, times it against tvm-default and ONNX Runtime. `ekb deploy --verify DIR` verifies again.
    The manifest records the artifact's size and planned memory (--max-memory: the deploy fails when it
    does not fit); a verification adds latency percentiles, peak memory, the per-kernel profile (--profile
    DIR prints it) and, --from RUN, whether the run's judged speedup is reproduced."""
    from .. import deploy as deploy_pkg

    if verify_dir is not None:
        if model is not None:
            raise EKBError("give MODEL to deploy, or --verify DIR to verify an artifact, not both")
        if max_memory is not None:
            raise EKBError("--max-memory checks a deploy's plan; the artifact in --verify DIR is built")
        report = deploy_pkg.verify(
            verify_dir,
            quick=quick,
            tracker=tracker,
            checks=checks,
            measure=not no_measure,
            runs=runs,
            profile_dir=profile_dir,
        )
        _print_verification(report, verify_dir, profile_dir)
        if not report["verified"]:
            raise EKBError(
                f"{verify_dir}: the artifact's outputs differ from {report['oracle']}: {_why(report)}"
            )
        return
    if model is None:
        raise EKBError("give MODEL (a problem id or an ONNX file), or --verify DIR")
    if max_memory is not None:
        from ..deploy.memory import parse_size

        parse_size(max_memory)  # one line before anything runs
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
        max_memory=max_memory,
        runs=runs,
        profile_dir=profile_dir,
    )
    for note in d.notes:  # one line each, never wrapped
        click.echo(f"ekb deploy: note: {note}", err=True)
    for kernel, why in d.fallbacks:
        click.echo(f"ekb deploy: fallback: {kernel}: {why}", err=True)
    _print_kernels(d.manifest)
    seconds = sum(d.manifest["seconds"].values())
    console.print(Text(f"artifact: {d.dir} ({d.manifest['backend']['name']}, built in {seconds:.1f} s)"))
    _print_artifact(d.manifest)
    if d.verification is not None:
        _print_verification(d.verification, d.dir, profile_dir)
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


def _print_artifact(manifest: dict) -> None:
    """Size, memory plan and what did not carry over from the run, a line each."""
    from ..deploy.memory import MemoryPlan
    from ..deploy.size import BoardForm, SizeReport

    size = manifest.get("size") or {}
    forms = [BoardForm(**f) for f in size.get("forms", [])]
    if forms:
        console.print(Text(SizeReport([], forms).line()))
    plan = dict(manifest.get("memory") or {})
    if plan:
        plan.pop("planned_bytes", None), plan.pop("total_bytes", None)
        console.print(Text(MemoryPlan(**{**plan, "kernels": []}).summary()))
    carry = manifest.get("carryover")
    if carry:
        whole = "whole" if carry["whole"] else "not whole: " + "; ".join(carry["not_carried"])
        console.print(Text(f"from {carry['candidate']}: {whole}"))


def _print_verification(report: dict, folder, profile_dir=None) -> None:
    n = len(report["checks"])
    ok = sum(c["matches_oracle"] for c in report["checks"])
    status = "verified" if report["verified"] else "NOT verified"
    console.print(Text(f"{status}: {ok}/{n} input sets match {report['oracle']} ({report['where']})"))
    c = report.get("c_program")
    if c:
        ok = sum(x["matches_oracle"] for x in c["checks"])
        console.print(Text(f"{'verified' if c['verified'] else 'NOT verified'}: {ok}/{n} ({c['where']})"))
    _print_measured(report, profile_dir)
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
    if report.get("reproduction"):
        console.print(Text(f"the run's speedup: {report['reproduction']['verdict']}"))


def _print_measured(report: dict, profile_dir) -> None:
    """Latency per runner, peak memory, and (--profile) the per-kernel table."""
    from ..deploy.latency import Latency
    from ..deploy.memory import human
    from ..deploy.profile import KernelProfile, Profile

    for lat in report.get("latency") or []:
        x = Latency(**lat)
        rss = f", peak RSS {human(x.peak_rss_bytes)}" if x.peak_rss_bytes else ""
        console.print(Text(f"latency: {x.line()}{rss}"))
    facts = (report.get("latency") or [{}])[0]
    if facts.get("cpu"):
        gov = facts.get("governor") or "governor not readable"
        mhz = f", {facts['mhz']:.0f} MHz" if facts.get("mhz") else ""
        console.print(Text(f"cpu: {facts['cpu']} ({gov}{mhz})"))
    prof = report.get("profile") or {}
    if profile_dir is not None and prof.get("rows") is not None:
        rows = [KernelProfile(**r) for r in prof["rows"]]
        console.print(Text(Profile(**{**prof, "rows": rows}).table()))
        console.print(Text(f"profile: {profile_dir}/profile.json, profile.txt"))
    elif profile_dir is not None:
        console.print(Text(f"profile: {prof.get('status', 'not measured')}"))
