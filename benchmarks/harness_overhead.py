"""Harness measurements (numbers quoted in the README; nothing here is asserted by tests).

1. End-to-end time to judge one L1 candidate (sandboxed builder + judge: reference, build, 5 correctness
   trials; then the same with the interleaved timing against two baselines), and its overhead over a bare
   compile + run in-process.
2. With --against REF: the same two figures for the harness at git commit REF (checked out into a
   temporary worktree), measured in the same run, alternating the two versions candidate by candidate,
   so the ratio new/old is a side-by-side figure (e.g. the cost of the builder/judge split and the
   sandbox: `--against 39bf502`).
3. Wall time of `ekb baseline` over the Level-1 suite (--baseline).
4. With --warm: one judgment as an agent's search makes it (the search's timing protocol against
   tvm-default) by fresh workers and by children of a warm judge (harness/zygote.py), alternating in one
   process; the warm judge's first judgment (its start included) apart.

    .venv/bin/python benchmarks/harness_overhead.py [--reps 5] [--against REF] [--baseline] [--warm]
        [--out runs/bench]

Speedup stability (the same run judged twice) is benchmarks/stability.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROBLEM = "L1/dwconv3x3_kws"
ROOT = Path(__file__).resolve().parent.parent


def bare_compile_run(problem_id: str) -> float:
    """In-process: build the reference with TVM, run it once through the VM (no isolation, no checks)."""
    code = f"""
import time; t0 = time.perf_counter()
import numpy as np, tvm
from tvm import relax
from edgekernelbench.problems import get_problem
from edgekernelbench.reference import build_reference
p = get_problem({problem_id!r}); r = build_reference(p)
from edgekernelbench.tvm_env import compile as tvm_compile
ex = tvm_compile(r.module, tvm.target.Target({{"kind": "llvm", "num-cores": 1}}), relax_pipeline="default_build")
vm = relax.VirtualMachine(ex, tvm.cpu()); ws = [tvm.runtime.tensor(w) for w in r.params]
tp = vm["main_transform_params"](tuple(ws)) if r.params else []
x = p.sample_inputs(0); vm["main"](*[tvm.runtime.tensor(x[n]) for n in r.input_names], *tp)
print(time.perf_counter() - t0)
"""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return time.perf_counter() - t0


JUDGE_ONE = """
import sys, time
from edgekernelbench.harness.api import evaluate
from edgekernelbench.ir.spec import KernelSpec
from edgekernelbench.problems import get_problem
from edgekernelbench.reference import build_reference
pid, measure = sys.argv[1], sys.argv[2] == "1"
spec = KernelSpec(problem=pid, module=build_reference(get_problem(pid)).script())
t0 = time.perf_counter()
r = evaluate(pid, spec, measure=measure)
assert r.correct, r.detail
print(time.perf_counter() - t0)
"""


def one_candidate(problem_id: str, measure: bool, src: Path | None = None) -> float:
    """Seconds for evaluate() on the reference candidate, in a fresh process running the harness of `src`
    (a source tree; None: this checkout). The clock runs around evaluate() only."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-c", JUDGE_ONE, problem_id, "1" if measure else "0"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    return float(out.strip().splitlines()[-1])


WARM_VS_FRESH = """
import json, sys, threading, time
from edgekernelbench.harness.api import TimingConfig, evaluate, warm_judge
from edgekernelbench.ir.spec import KernelSpec
from edgekernelbench.problems import get_problem
from edgekernelbench.reference import build_reference
pid, reps = sys.argv[1], int(sys.argv[2])
spec = KernelSpec(problem=pid, module=build_reference(get_problem(pid)).script())

def judge():
    t0 = time.perf_counter()
    r = evaluate(pid, spec, timing=TimingConfig.search(), baselines=("tvm-default",))
    assert r.correct, r.detail
    return time.perf_counter() - t0, r.extra["isolation"]["judge"].get("forked", False)

def fresh():  # another thread: outside this thread's warm judge
    out = []
    t = threading.Thread(target=lambda: out.append(judge()))
    t.start()
    t.join()
    return out[0]

rows = {"fresh_s": [], "warm_s": []}
with warm_judge():
    first, forked = judge()
    assert forked
    for i in range(reps):
        for name, f in (("fresh_s", fresh), ("warm_s", judge))[:: 1 if i % 2 == 0 else -1]:
            seconds, forked = f()
            assert forked == (name == "warm_s")
            rows[name].append(seconds)
print(json.dumps({"warm_first_s": first, **rows}))
"""


def warm_vs_fresh(problem_id: str, reps: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", WARM_VS_FRESH, problem_id, str(reps)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rows = json.loads(out.strip().splitlines()[-1])
    ratios = [f / w for f, w in zip(rows["fresh_s"], rows["warm_s"], strict=True)]
    return {
        "warm_first_s": rows["warm_first_s"],
        "fresh_judgment_s": summary(rows["fresh_s"]),
        "warm_judgment_s": summary(rows["warm_s"]),
        "fresh_over_warm": summary(ratios),
    }


def ekb(*args) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "edgekernelbench.cli", *args], check=True, capture_output=True)
    return time.perf_counter() - t0


def summary(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("runs/bench"))
    ap.add_argument("--against", help="a git commit whose harness is measured side by side")
    ap.add_argument("--baseline", action="store_true", help="also time `ekb baseline` over L1")
    ap.add_argument("--warm", action="store_true", help="also judge with and without a warm judge")
    ap.add_argument("--problem", default=PROBLEM, help="the problem whose reference is judged")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = {"problem": args.problem, "reps": args.reps}
    old_tree = None
    if args.against:
        old_tree = Path(tempfile.mkdtemp(prefix="ekb-old-"))
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old_tree), args.against],
            check=True,
            capture_output=True,
        )
        report["against"] = args.against
    try:
        rows: dict[str, list[float]] = {}
        for _ in range(args.reps):  # one of each per repetition, alternating: shared noise hits both
            rows.setdefault("bare_compile_run_s", []).append(bare_compile_run(args.problem))
            for measure, name in ((False, "correctness_only"), (True, "full")):
                rows.setdefault(f"evaluate_{name}_s", []).append(one_candidate(args.problem, measure))
                if old_tree:
                    rows.setdefault(f"old_evaluate_{name}_s", []).append(
                        one_candidate(args.problem, measure, old_tree / "src")
                    )
        report.update({k: summary(v) for k, v in rows.items()})
        for name in ("correctness_only", "full"):
            new = rows[f"evaluate_{name}_s"]
            report[f"overhead_{name}_x_bare"] = statistics.median(
                n / b for n, b in zip(new, rows["bare_compile_run_s"], strict=True)
            )
            if old_tree:
                old = rows[f"old_evaluate_{name}_s"]
                ratios = [n / o for n, o in zip(new, old, strict=True)]
                report[f"new_over_old_{name}"] = summary(ratios)
                report[f"added_s_{name}"] = statistics.median(n - o for n, o in zip(new, old, strict=True))
        print(json.dumps(report, indent=1), flush=True)
    finally:
        if old_tree:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old_tree)], check=False
            )
            shutil.rmtree(old_tree, ignore_errors=True)
    if args.warm:
        report["warm_judge"] = warm_vs_fresh(args.problem, args.reps)
        print(json.dumps({"warm_judge": report["warm_judge"]}, indent=1), flush=True)
    if args.baseline:
        d = args.out / "baselines"
        shutil.rmtree(d, ignore_errors=True)
        report["ekb_baseline_L1_s"] = ekb(
            "baseline", "--backend", "host-cpu", "--level", "1", "--out", str(d)
        )
        print(json.dumps({"ekb_baseline_L1_s": report["ekb_baseline_L1_s"]}), flush=True)
    (args.out / "harness_overhead.json").write_text(json.dumps(report, indent=1))
    if args.against:
        record_result(report, args)
    return 0


def record_result(report: dict, args) -> None:
    """results/judge_overhead.json (benchmarks/results_io.py): this problem's new/old figures, beside those
    of the other problems measured before (one entry per problem)."""
    from results_io import RESULTS, machine, write

    path = RESULTS / "judge_overhead.json"
    entries = json.loads(path.read_text()).get("problems", {}) if path.exists() else {}
    entries[args.problem] = {
        "against": args.against,
        "reps": args.reps,
        **{k: report[k] for k in report if k.startswith(("new_over_old", "evaluate_", "old_evaluate_"))},
    }
    figure = "; ".join(
        f"{pid}: {e['new_over_old_correctness_only']['median']:.2f}x correctness only, "
        f"{e['new_over_old_full']['median']:.2f}x with timing"
        for pid, e in sorted(entries.items())
    )
    rows = [
        [pid, e["against"], e["reps"], f"{e['old_evaluate_full_s']['median']:.2f}", f"{e['evaluate_full_s']['median']:.2f}",
         f"{e['new_over_old_full']['median']:.2f}x", f"{e['new_over_old_correctness_only']['median']:.2f}x"]
        for pid, e in sorted(entries.items())
    ]  # fmt: skip
    write(
        "judge_overhead",
        {
            "title": "What one judgment costs",
            "about": "The reference candidate of a problem judged by evaluate() (sandboxed builder and judge, "
            "5 correctness trials, then the timing protocol against tvm-default and ONNX Runtime), by this "
            "checkout and by an older commit's, alternating in one run.",
            "headline": {"what": "one judgment's cost, this judge / an older one", "figure": figure},
            "machine": machine(),
            "protocol": f"median of {args.reps} judgments each, alternating the two versions",
            "problems": entries,
            "table": {
                "columns": [
                    "problem",
                    "against",
                    "reps",
                    "older s",
                    "this s",
                    "this/older",
                    "correctness only",
                ],
                "rows": rows,
            },
        },
    )


if __name__ == "__main__":
    sys.exit(main())
