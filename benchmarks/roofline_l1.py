"""Roofline fractions of the rule-based candidates: per-level roofs vs one memory figure.

    .venv/bin/python benchmarks/roofline_l1.py RUN_DIR [--level 1] [--ids L1/a L1/b] [--top 10]

Writes the rule-based candidate of each problem into RUN_DIR (kept: a second call only reports),
evaluates them on host-cpu (1 thread, short timing, no baselines: only the candidate's own time
matters here), then prints the distribution of roofline fractions (max, mean, count above 1) under
the run's per-level peak record, and under one memory figure for every size (that record's DRAM
stream figure, as before per-level roofs), with the candidates nearest their roof.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from edgekernelbench import metrics
from edgekernelbench.harness.api import JudgeConfig
from edgekernelbench.harness.timing import TimingConfig
from edgekernelbench.problems import get_problem, select
from edgekernelbench.runs import EvalConfig, eval_run
from edgekernelbench.search.rules import rule_spec
from edgekernelbench.store import RunStore

TIMING = TimingConfig(warmup_ms=10, min_repeat_ms=5, rounds=7)


def _stats(name: str, fractions: list[float]) -> str:
    if not fractions:
        return f"{name}: no fractions"
    over = sum(f > 1 for f in fractions)
    return (
        f"{name}: n={len(fractions)} max={max(fractions):.3f} mean={statistics.mean(fractions):.3f} "
        f"median={statistics.median(fractions):.3f} above 1: {over}"
    )


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--ids", nargs="*")
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args(argv)

    probs = select(level=args.level, ids=args.ids or None)
    for p in probs:
        path = args.run_dir / "candidates" / p.id / "sample1.json"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(rule_spec(p).to_json() + "\n")
    t0 = time.perf_counter()
    counts = eval_run(
        args.run_dir,
        EvalConfig(judge=JudgeConfig(timing=TIMING, baselines=(), trials=2)),
        [p.id for p in probs],
    )
    print(f"{counts} in {time.perf_counter() - t0:.0f} s")

    with RunStore(args.run_dir) as store:
        results = [r for r in store.results() if r.correct and r.runtime]
        peak = store.get_meta("peak:host-cpu:1")
    if not peak or not peak.get("levels"):
        print("no per-level peak record in this run directory (an older one, or measurement off)")
        return 1
    for lv in peak["levels"]:
        read = lv.get("read_bandwidth")
        print(
            f"  {lv['level']:5s} capacity {lv['capacity']} B: {lv['bandwidth'] / 1e9:.1f} GB/s read+write"
            + (f", {read / 1e9:.1f} GB/s read-only" if read else "")
        )
    dram = peak["levels"][-1]["bandwidth"]
    rows = []
    for r in results:
        written = get_problem(r.problem).cost.bytes_written
        new = metrics.roofline(
            r.flops, r.bytes, r.runtime.median, peak["flops"], dram, peak["levels"], written
        )
        one = metrics.roofline(r.flops, r.bytes, r.runtime.median, peak["flops"], dram)
        rows.append((new, one, r))
    print(_stats("one memory figure (DRAM) ", [one.fraction for _, one, _ in rows]))
    print(_stats("per-level roofs          ", [new.fraction for new, _, _ in rows]))
    for new, one, r in sorted(rows, key=lambda x: -x[0].fraction)[: args.top]:
        print(
            f"  {new.fraction:6.3f} (one figure {one.fraction:6.3f}) {r.problem:38s} {r.bytes / 1024:8.1f} KiB "
            f"{new.level:5s} {new.bound:8s} {r.runtime.median * 1e6:8.2f} us"
            + (f"  FLAG: {new.reason}" if new.flag else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
