"""Each kernel of a candidate timed in the model's call order and alone, side by side.

    .venv/bin/python benchmarks/in_order.py RUN_DIR [--method leka] [--ids L3/a L3/b] [--rounds 25]

The judge's per-kernel profile, and benchmarks/peak_fraction.py, time each kernel alone: called back to
back, its weights and activations stay in the caches. In the model, a kernel finds in the caches what the
kernels before it left there: its weights come from L3 or DRAM, not from L1 or L2. This script takes the
method's best candidate of each problem (benchmarks/peak_fraction.best_spec: decisions-only, replayed on
the problem's reference), calls main's kernels through main once to get every call's arguments, and then
in each round

- runs the calls once in main's order, each call timed ("in order"),
- then calls each kernel twice back to back, the second call timed ("alone": what the profile sees),

every call timed the same way (a wall clock around one call, Python's call overhead in both). Per problem
it prints the sum over the calls of each call's median in order and alone, their ratio (the median over
the rounds of the per-round ratio, with its 2.5 / 97.5 percentiles), and the kernels that lose the most
time in order. Kernels below --min-share of the time in order are left out of the per-kernel table.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from peak_fraction import best_spec, kernel_calls, spec_target  # beside this script
from stability import cpu_model

from edgekernelbench.problems import get_problem
from edgekernelbench.store import RunStore


def measure(problem, spec, rounds: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(kernel names in call order, seconds in order [rounds, calls], seconds alone [rounds, calls])."""
    calls = [
        (name, lib.mod.get_function(name), args)
        for name, _f, lib, args in kernel_calls(problem, spec, spec_target(spec))
    ]
    clock = time.perf_counter
    in_order = np.zeros((rounds, len(calls)))
    alone = np.zeros((rounds, len(calls)))
    for _, f, args in calls:  # warm-up: code loaded, pages touched
        f(*args)
    for r in range(rounds):
        for i, (_, f, args) in enumerate(calls):
            t0 = clock()
            f(*args)
            in_order[r, i] = clock() - t0
        for i, (_, f, args) in enumerate(calls):
            f(*args)
            t0 = clock()
            f(*args)
            alone[r, i] = clock() - t0
    return [c[0] for c in calls], in_order, alone


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--method", default="leka", help="agent method whose candidates are measured")
    ap.add_argument("--ids", nargs="*", help="problem ids (default: every problem in the run)")
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--min-share", type=float, default=0.05, help="per-kernel rows: this share of time")
    ap.add_argument("--top", type=int, default=5, help="kernels per problem in the per-kernel table")
    args = ap.parse_args(argv)
    if not (args.run_dir / "results.db").is_file():
        print(f"{args.run_dir}: no run store (results.db) there", file=sys.stderr)
        return 2
    with RunStore(args.run_dir) as store:
        ids = args.ids or sorted({r.problem for r in store.results()})
        specs = {pid: best_spec(args.run_dir, store, pid, args.method) for pid in ids}
    t0 = time.perf_counter()
    from edgekernelbench.tvm_env import host_cpu_name

    print(
        f"Kernels in the model's call order vs alone, {time.strftime('%Y-%m-%d')}, {cpu_model()} "
        f"({host_cpu_name()}), 1 thread, {args.method}'s best candidates of {args.run_dir}, "
        f"{args.rounds} rounds\n"
    )
    print("| problem | calls | in order (us) | alone (us) | in order / alone [95%] |")
    print("|---|---:|---:|---:|---:|")
    details, skipped = [], []
    for pid in ids:
        spec, why = specs[pid]
        if spec is None:
            skipped.append(f"{pid}: {why}")
            continue
        names, seq, hot = measure(get_problem(pid), spec, args.rounds)
        ratio = seq.sum(axis=1) / hot.sum(axis=1)
        s, h = np.median(seq, axis=0), np.median(hot, axis=0)
        lo, hi = np.percentile(ratio, [2.5, 97.5])
        print(
            f"| {pid} | {len(names)} | {s.sum() * 1e6:.0f} | {h.sum() * 1e6:.0f} | "
            f"{np.median(ratio):.2f}x [{lo:.2f}, {hi:.2f}] |"
        )
        for i in np.argsort(-(s - h))[: args.top]:
            if s[i] / s.sum() >= args.min_share:
                details.append((pid, names[i], s[i] / s.sum(), s[i] * 1e6, h[i] * 1e6))
    if details:
        print("\n| problem | kernel (call) | share in order | in order (us) | alone (us) | ratio |")
        print("|---|---|---:|---:|---:|---:|")
        for pid, name, share, s_us, h_us in details:
            print(f"| {pid} | {name} | {share:.0%} | {s_us:.1f} | {h_us:.1f} | {s_us / h_us:.2f}x |")
    for s in skipped:
        print(f"skipped {s}")
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
