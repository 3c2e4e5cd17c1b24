"""Compute-bound kernels against one core's peak FLOP/s, timed side by side.

    .venv/bin/python benchmarks/peak_fraction.py RUN_DIR [--method leka] [--ids L1/a L2/b] [--rounds 25]
        [--stock-lowering]

For each problem of RUN_DIR (a run of `ekb agent` or benchmarks/leka_vs_metaschedule.py), the method's
best correct candidate (highest speedup over tvm-default; decisions-only specs, replayed here on the
problem's reference, never a candidate's own code) is built for this host, its kernels are called once
through main to get each call's arguments, and every compute-bound kernel call -- operator class conv2d,
pointwise, matmul or contraction (dense at batch > 4 is "matmul"; classified on the kernel before the
candidate's schedule, whose cached copies can hide the contraction) whose arithmetic intensity puts it under
the compute roof of the run's peak record -- is timed in the same interleaved rounds as the peak FLOP/s
micro-kernel (backends/peak.py: the harness's timing protocol, 1 thread); the u8 x s8 dot-product kernels
of the Int8DotProduct graph (ir/int8_dot.py, on a CPU with VNNI) likewise against the int8 peak's
micro-kernel (vpdpbusd), their roof the run's "int8_ops" (else measured here). Per kernel it prints:

- "vs ceiling": FLOP/s at the kernel's median over the run's recorded peak, a best-of-7 figure (the
  roofline column of the reports, a conservative ceiling: on a shared machine a median is slower than a
  best);
- "side by side": the median over the rounds of (kernel FLOP/s / peak kernel FLOP/s in the same round),
  with its 95% confidence interval: what the kernel reaches of the peak under the conditions it ran in.

The issue's bar (compute-bound kernels at >= 60% of one core's peak) is checked on the side-by-side
figure; both are printed. A kernel's FLOPs are its contraction's: 2 per multiply-add of its main block
(TVM's estimate also counts a fused epilogue -- a bias, a ReLU, the dozens of operations of a polynomial
log -- which read a few kernels above 100%). Kernels that take less than --min-share of their problem's time are left out.

--stock-lowering: each kernel is also built with TVM's own lowering (tvm.compile: buffers of 1 KiB or more,
e.g. a register tile, on the heap via TVMBackendAllocWorkspace) and timed in the same rounds; the column
"stock lowering / this" is that build's median over the judge's (tvm_env.compile: such buffers up to 4 KiB
on the stack).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from stability import cpu_model  # benchmarks/stability.py, beside this script

from edgekernelbench.backends.host import evaluator_timer
from edgekernelbench.backends.peak import int8_contender, measure_int8_ops, peak_contender
from edgekernelbench.harness.timing import TimingConfig, fraction_of_peak, time_interleaved
from edgekernelbench.ir.int8_dot import DOT_BLOCK
from edgekernelbench.metrics import roofline
from edgekernelbench.problems import get_problem
from edgekernelbench.search.rules import analyze, build_target
from edgekernelbench.store import RunStore
from edgekernelbench.tvm_env import compile as tvm_compile

COMPUTE_CLASSES = ("conv2d", "pointwise", "matmul", "contraction")
BAR = 0.60
TVM_DEFAULT = "tvm-default"


def best_spec(run_dir: Path, store: RunStore, problem_id: str, method: str):
    """The method's best correct, plausible, decisions-only candidate of a problem (None, why)."""
    from edgekernelbench.deploy.decisions import _candidate_file, unusable
    from edgekernelbench.ir.spec import load_candidate

    rows = [
        r
        for r in store.results(problems=[problem_id])
        if r.correct and r.method.endswith(method) and not r.implausible
    ]
    if not rows:
        return None, f"no correct {method} candidate"
    r = max(rows, key=lambda r: r.speedups.get(TVM_DEFAULT) or 0.0)
    path = _candidate_file(run_dir, r.problem, r.sample, r.candidate)
    if path is None:
        return None, "candidate file not found"
    spec = load_candidate(path, problem_id)
    why = unusable(spec)
    return (None, why) if why else (spec, "")


def spec_target(spec):
    """This host's 1-thread target with the spec's target attributes (e.g. LEKA's fast-math flags): its
    kernels as the judge built them."""
    import tvm

    target = build_target(1)
    if spec.decisions.target_attrs:
        target = tvm.target.Target({**target.export(), **spec.decisions.target_attrs})
    return target


def kernel_calls(problem, spec, target):
    """[(kernel name, PrimFunc, time evaluator factory, call args)] of main's kernel calls, the candidate's
    kernels built for `target`, with the weights main_transform_params makes."""
    import tvm

    from edgekernelbench.backends.host import primfunc_library
    from edgekernelbench.deploy.artifact import graph_module, transformed_weights
    from edgekernelbench.executor import KernelRunner
    from edgekernelbench.ir.replay import materialize
    from edgekernelbench.reference import build_reference
    from edgekernelbench.search.graph import graph_key, graph_reference

    ref = build_reference(problem)
    mod = materialize(spec, problem, ref)
    weights = transformed_weights(graph_reference(problem.id, graph_key(spec.decisions.graph.get("passes"))))
    main = graph_module(mod)
    lib = tvm_compile(primfunc_library(main), target)
    dev = tvm.cpu(0)
    runner = KernelRunner(main, lib, dev, lambda a: tvm.runtime.tensor(a, dev), check_inputs=False)
    sample = problem.sample_inputs(0)
    args = [tvm.runtime.tensor(np.ascontiguousarray(sample[s.name]), dev) for s in problem.inputs]
    args += [tvm.runtime.tensor(w, dev) for w in weights]
    calls: list = []
    runner.run("main", args, calls=calls)
    return [(name, main[name], lib, call_args) for name, call_args, _ in calls]


def measure(
    problem, spec, peak: dict, cfg: TimingConfig, min_share: float, extra=None, stock: bool = False
) -> list[dict]:
    """One row per compute-bound kernel call of the candidate (see the module docstring). `extra`: a
    callable (kernel name, runtime module, bytes its inputs hold, bytes its output holds, its arguments) ->
    {label: contender} timed in the same rounds as the kernel and the peak (benchmarks/kernel_profile.py);
    every contender's timing is in the row's "times". `stock`: also the same kernel lowered by TVM's own
    pipeline (tvm.compile, not tvm_env.compile), timed in the same rounds as "stock"."""
    import tvm

    from edgekernelbench.reference import kernel_flops

    dev = tvm.cpu(0)
    target = spec_target(spec)
    calls = kernel_calls(problem, spec, target)
    peak_run, peak_flops = peak_contender(target)
    int8 = int8_contender(target)  # (run, int8 ops per call), or None without VNNI
    # each call's share of the candidate's time, from one short interleaved pass over all of them
    quick = time_interleaved(
        {f"{i}:{n}": evaluator_timer(lib.mod, n, dev, a) for i, (n, _, lib, a) in enumerate(calls)},
        TimingConfig(warmup_ms=5, min_repeat_ms=2, rounds=3),
    )
    total = sum(t.median for t in quick.values()) or 1.0
    shares: dict[str, float] = {}
    for i, (name, *_rest) in enumerate(calls):
        shares[name] = shares.get(name, 0.0) + quick[f"{i}:{name}"].median / total
    # each kernel classified and counted on its unscheduled PrimFunc (the graph's, before the candidate's
    # decisions): a scheduled one reads cached copies, where the analysis may no longer see a contraction
    # (a tiled pointwise convolution read as a plain reduction was left out of the table)
    from edgekernelbench.search.graph import graph_key, graph_reference

    unscheduled = graph_reference(problem.id, graph_key(spec.decisions.graph.get("passes"))).primfuncs()
    rows, seen = [], set()
    for name, func, lib, call_args in calls:
        if name in seen:  # a kernel called several times (same code, other weights): timed once
            continue
        seen.add(name)
        share = shares[name]
        scheduled, func = func, unscheduled.get(name, func)
        try:
            facts = analyze(func, name)
            op_class = facts.op_class
        except Exception:  # noqa: BLE001 -- an opaque kernel: not a contraction
            facts, op_class = None, "opaque"
        flops = kernel_flops(func)
        if facts is not None and op_class in COMPUTE_CLASSES:  # the contraction's multiply-adds only
            flops = 2.0 * math.prod(facts.block(facts.main).extents)
        # u8 x s8 dot products (ir/int8_dot.py; after tensorize its block is renamed): against the int8 peak
        dot = name.startswith(DOT_BLOCK)
        if dot:  # TVM's estimate does not see through the intrinsic: 2 ops per multiply-add
            a_shape, d_shape = (call_args[0].shape, call_args[-1].shape)
            flops = 2.0 * math.prod(d_shape) * a_shape[-1]
        if (op_class not in COMPUTE_CLASSES and not dot) or not flops or share < min_share:
            continue
        if not dot and (facts is None or facts.block(facts.main).dtype != "float32"):
            continue  # integer arithmetic without dot products: neither peak is its roof
        if dot and int8 is None:
            continue
        nbytes = float(sum(a.numpy().nbytes for a in call_args))
        out_bytes = float(call_args[-1].numpy().nbytes)
        contender, contender_ops = int8 if dot else (peak_run, peak_flops)
        roof = (peak.get("int8_ops") or measure_int8_ops(target)) if dot else peak["flops"]
        contenders = {"kernel": evaluator_timer(lib.mod, name, dev, call_args), "peak": contender}
        more = extra(name, lib.mod, nbytes - out_bytes, out_bytes, call_args) if extra else {}
        if stock:
            one = tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main")})
            more["stock"] = evaluator_timer(tvm.compile(one, target).mod, "main", dev, call_args)
        times = time_interleaved({**contenders, **more}, cfg)
        line = roofline(
            flops,
            nbytes,
            times["kernel"].median,
            roof,
            peak["bandwidth"],
            peak.get("levels"),
            out_bytes,
        )
        frac, lo, hi = fraction_of_peak(times["kernel"], flops, times["peak"], contender_ops)
        rows.append(
            {
                "problem": problem.id,
                "kernel": name,
                "class": "dot (int8)" if dot else op_class,
                "share": share,
                "mflop": flops / 1e6,
                "intensity": line.intensity,
                "bound": line.bound,
                "gflops": flops / times["kernel"].median / 1e9,
                "vs_ceiling": flops / times["kernel"].median / roof,
                "side_by_side": frac,
                "ci": (lo, hi),
                "peak_gflops": contender_ops / times["peak"].median / 1e9,
                "times": times,
            }
        )
    return rows


def run_arguments(description: str) -> argparse.ArgumentParser:
    """The arguments of this script and of kernel_profile.py: a run, a method, problems, rounds, a share."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--method", default="leka", help="agent method whose candidates are measured")
    ap.add_argument("--ids", nargs="*", help="problem ids (default: every problem in the run)")
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--min-share", type=float, default=0.05, help="skip kernels below this share of time")
    ap.add_argument(
        "--stock-lowering",
        action="store_true",
        help="also time each kernel lowered by TVM's own pipeline (buffers of 1 KiB or more on the heap)",
    )
    return ap


def open_run(args) -> tuple[dict, list[str], dict] | None:
    """(the run's peak record, its problem ids, each one's (best spec, why not)); None, with one line on
    stderr, for a directory without a run store or a run without a peak record."""
    if not (args.run_dir / "results.db").is_file():
        print(f"{args.run_dir}: no run store (results.db) there", file=sys.stderr)
        return None
    with RunStore(args.run_dir) as store:
        peak = store.get_meta("peak:host-cpu:1")
        if not peak:
            print(f"{args.run_dir}: no peak record (peak:host-cpu:1) in the run", file=sys.stderr)
            return None
        ids = args.ids or sorted({r.problem for r in store.results()})
        return peak, ids, {pid: best_spec(args.run_dir, store, pid, args.method) for pid in ids}


def main(argv: list[str]) -> int:
    args = run_arguments(__doc__.split("\n")[0]).parse_args(argv)
    cfg = TimingConfig(rounds=args.rounds)
    if (opened := open_run(args)) is None:
        return 2
    peak, ids, specs = opened
    t0 = time.perf_counter()
    rows, skipped = [], []
    for pid in ids:
        spec, why = specs[pid]
        if spec is None:
            skipped.append(f"{pid}: {why}")
            continue
        rows += [
            r
            for r in measure(get_problem(pid), spec, peak, cfg, args.min_share, stock=args.stock_lowering)
            if r["bound"] == "compute"
        ]
    from edgekernelbench.tvm_env import host_cpu_name

    print(
        f"Compute-bound kernels vs one core's peak, {time.strftime('%Y-%m-%d')}, {cpu_model()} "
        f"({host_cpu_name()}), 1 thread, {args.method}'s best candidates of {args.run_dir}, "
        f"{args.rounds} interleaved rounds; recorded peak (ceiling) {peak['flops'] / 1e9:.1f} GFLOP/s\n"
    )
    stock = " stock lowering / this |" if args.stock_lowering else ""
    print(
        "| problem | kernel | class | share | MFLOP | FLOP/B | GFLOP/s | vs ceiling | side by side [95% CI] |"
        + stock
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if stock else ""))
    for r in rows:
        lo, hi = r["ci"]
        ratio = f" {r['times']['stock'].median / r['times']['kernel'].median:.2f}x |" if stock else ""
        print(
            f"| {r['problem']} | {r['kernel']} | {r['class']} | {r['share']:.0%} | {r['mflop']:.2f} | "
            f"{r['intensity']:.1f} | {r['gflops']:.1f} | {r['vs_ceiling']:.0%} | "
            f"{r['side_by_side']:.0%} [{lo:.0%}, {hi:.0%}] |{ratio}"
        )
    if rows:
        met = [r for r in rows if r["side_by_side"] >= BAR]
        print(
            f"\n{len(met)} of {len(rows)} compute-bound kernels at >= {BAR:.0%} of the peak side by side "
            f"(median {statistics.median(r['side_by_side'] for r in rows):.0%}); vs the ceiling: "
            f"{sum(r['vs_ceiling'] >= BAR for r in rows)} of {len(rows)} "
            f"(median {statistics.median(r['vs_ceiling'] for r in rows):.0%}); the peak kernel ran at "
            f"{statistics.median(r['peak_gflops'] for r in rows):.1f} GFLOP/s (median) beside them"
        )
    for s in skipped:
        print(f"skipped {s}")
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
