"""Harness measurements (numbers quoted in the README; nothing here is asserted by tests).

1. End-to-end time to evaluate one L1 candidate (worker start, reference, build, 5 correctness trials,
   interleaved timing against two baselines) and its overhead over a bare compile + run in-process.
2. Wall time of `ekb baseline` over the Level-1 suite.
3. Stability of speedups: the same candidates evaluated twice, speedup ratios between the two runs.

    .venv/bin/python benchmarks/harness_overhead.py [--reps 5] [--skip-baseline] [--out runs/bench]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROBLEM = "L1/dwconv3x3_kws"


def bare_compile_run(problem_id: str) -> float:
    """In-process: build the reference with TVM, run it once through the VM (no isolation, no checks)."""
    code = f"""
import time; t0 = time.perf_counter()
import numpy as np, tvm
from tvm import relax
from edgekernelbench.problems import get_problem
from edgekernelbench.reference import build_reference
p = get_problem({problem_id!r}); r = build_reference(p)
ex = tvm.compile(r.module, tvm.target.Target({{"kind": "llvm", "num-cores": 1}}), relax_pipeline="default_build")
vm = relax.VirtualMachine(ex, tvm.cpu()); ws = [tvm.runtime.tensor(w) for w in r.params]
tp = vm["main_transform_params"](tuple(ws)) if r.params else []
x = p.sample_inputs(0); vm["main"](*[tvm.runtime.tensor(x[n]) for n in r.input_names], *tp)
print(time.perf_counter() - t0)
"""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return time.perf_counter() - t0


def one_candidate(problem_id: str, measure: bool) -> float:
    from edgekernelbench.harness.api import evaluate
    from edgekernelbench.ir.spec import KernelSpec
    from edgekernelbench.problems import get_problem
    from edgekernelbench.reference import build_reference

    spec = KernelSpec(problem=problem_id, module=build_reference(get_problem(problem_id)).script())
    t0 = time.perf_counter()
    r = evaluate(problem_id, spec, measure=measure)
    assert r.correct, r.detail
    return time.perf_counter() - t0


def ekb(*args) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "edgekernelbench.cli", *args], check=True, capture_output=True)
    return time.perf_counter() - t0


def speedup_stability(out: Path, level: int, every: int) -> dict:
    """Evaluates the same candidates (every `every`-th problem of the level) in two separate runs."""
    from edgekernelbench.problems import select
    from edgekernelbench.store import RunStore

    picked = [p.id for p in select(level=level)][::every]
    args = [a for pid in picked for a in ("--problem", pid)]
    runs = []
    for k in (1, 2):
        d = out / f"stability{k}"
        shutil.rmtree(d, ignore_errors=True)
        ekb("generate", "--model", "builtin", "--out", str(d), "--level", str(level), *args)
        ekb("eval", str(d))
        with RunStore(d) as s:
            runs.append({(r.problem, r.sample): r for r in s.results() if r.correct and r.runtime})
    ratios = {b: [] for b in ("tvm-default", "onnxruntime")}
    for key, r1 in runs[0].items():
        r2 = runs[1].get(key)
        if r2:
            for b in ratios:
                if b in r1.speedups and b in r2.speedups:
                    ratios[b].append(r2.speedups[b] / r1.speedups[b])
    return {
        b: {
            "problems": len(picked),
            "pairs": len(v),
            "median_abs_log2_ratio": statistics.median(abs(math.log2(x)) for x in v),
            "max_ratio": max(max(v), 1 / min(v)),
        }
        for b, v in ratios.items()
        if v
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("runs/bench"))
    ap.add_argument("--skip-baseline", action="store_true")
    ap.add_argument("--skip-stability", action="store_true")
    ap.add_argument("--stability-every", type=int, default=4, help="use every N-th L1 problem")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = {"problem": PROBLEM}

    bare = [bare_compile_run(PROBLEM) for _ in range(args.reps)]
    check = [one_candidate(PROBLEM, measure=False) for _ in range(args.reps)]
    full = [one_candidate(PROBLEM, measure=True) for _ in range(args.reps)]
    report["bare_compile_run_s"] = statistics.median(bare)
    report["evaluate_correctness_only_s"] = statistics.median(check)
    report["evaluate_full_s"] = statistics.median(full)
    report["overhead_correctness_only_x"] = statistics.median(c / b for c, b in zip(check, bare, strict=True))
    report["overhead_full_x"] = statistics.median(f / b for f, b in zip(full, bare, strict=True))
    print(json.dumps(report, indent=1), flush=True)

    if not args.skip_baseline:
        d = args.out / "baselines"
        shutil.rmtree(d, ignore_errors=True)
        report["ekb_baseline_L1_s"] = ekb(
            "baseline", "--backend", "host-cpu", "--level", "1", "--out", str(d)
        )
        print(json.dumps({"ekb_baseline_L1_s": report["ekb_baseline_L1_s"]}), flush=True)
    if not args.skip_stability:
        report["speedup_stability"] = speedup_stability(args.out, 1, args.stability_every)
        print(json.dumps(report["speedup_stability"], indent=1), flush=True)
    (args.out / "harness_overhead.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
