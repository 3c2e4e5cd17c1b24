"""Judging on Ray: throughput at 1 and N workers, and whether timing on N workers at once stays
honest.

    .venv/bin/python benchmarks/cluster_throughput.py [--level 1] [--problem ID ...] [--workers 2]
        [--skip-timing] [--quick] [--out runs/cluster-bench] [--json results/cluster.json]

The demo's candidates (the unscheduled reference and the rule-based schedule of every problem of the level:
generators/reference_candidates.py), judged on this machine's CPU, 1 thread:

1. correctness only (--no-measure): one at a time without Ray (`ekb eval --jobs 1`), then on a local Ray
   instance of 1 and of N workers (`--jobs 1` through Ray, `--jobs N`); wall time of each run, the start of
   the Ray instance included; throughput of N workers against one without Ray (the target: >= 1.7x for 2
   workers on a 2-core machine) and Ray's own cost at 1 worker. Every run's verdicts are compared with the
   first's: they must be equal.
2. with timing (unless --skip-timing): two runs one at a time without Ray (a, b: their run-to-run spread is
   the stability benchmark's, measured here and now) and one on N workers, each timed judgment on a core
   of its own (cluster/cores.py); the N-worker run's speedups against run a, beside run b's against run a
   (benchmarks/stability.compare: the share within +-5 % and +-10 %, the median |log2 ratio|, Fast@1.0 and
   its verdict flips), and how many timings each run marked disturbed (another CPU busy while it timed).

Writes results/cluster.json (benchmarks/results_io.py; --json elsewhere for a trial run). On a 2-core
machine: about 4 min for part 1 and 25 min for part 2 at level 1 (106 candidates); run it on a quiet
machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import psutil
from results_io import RESULTS, machine, write
from stability import BASELINES, compare

from edgekernelbench.cluster.session import ClusterConfig
from edgekernelbench.generators.reference_candidates import write_reference_candidates
from edgekernelbench.harness.api import JudgeConfig
from edgekernelbench.harness.timing import TimingConfig
from edgekernelbench.problems import select
from edgekernelbench.records import Result
from edgekernelbench.runs import EvalConfig, eval_run
from edgekernelbench.store import RunStore

TARGET = 1.7  # the throughput target for 2 workers on 2 cores


def judge(source: Path, run_dir: Path, judge_cfg: JudgeConfig, workers: int | None) -> tuple[float, dict]:
    """Judges a fresh copy of `source`'s candidates: without Ray (workers None) or on a local Ray instance of
    `workers`; returns (wall seconds, {(problem, sample): Result})."""
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.copytree(source / "candidates", run_dir / "candidates")
    cfg = EvalConfig(judge=judge_cfg, jobs=1)
    if workers is not None:
        cfg.cluster = ClusterConfig(jobs=workers)
    busy0, t0 = busy_cpu_seconds(), time.perf_counter()
    eval_run(run_dir, cfg, on_result=lambda r: print(".", end="", flush=True))
    seconds = time.perf_counter() - t0
    BUSY[run_dir.name] = round((busy_cpu_seconds() - busy0) / seconds, 2)
    print(f" {run_dir.name}: {seconds:.1f} s, {BUSY[run_dir.name]} CPUs busy on average", flush=True)
    with RunStore(run_dir) as store:
        return seconds, {(r.problem, r.sample): r for r in store.results()}


BUSY: dict[str, float] = {}  # run -> the machine's busy CPU seconds per wall second while it ran


def busy_cpu_seconds() -> float:
    """The machine's CPU seconds spent not idle so far (all processes: Ray's workers are not our children;
    on a quiet machine the run's own)."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def verdict(r: Result) -> tuple:
    return (r.correct, r.reason)


def differing(a: dict, b: dict) -> list[str]:
    """The candidates whose verdict differs between two runs (or that one of them lacks)."""
    keys = sorted(set(a) | set(b))
    return [f"{k[0]}#{k[1]}" for k in keys if k not in a or k not in b or verdict(a[k]) != verdict(b[k])]


def nodes(results: dict) -> dict:
    """How many judgments each node made, and on how many distinct CPUs (cores) a run's judges ran."""
    per: dict[str, int] = {}
    for r in results.values():
        label = r.node.label if r.node else "unknown"
        per[label] = per.get(label, 0) + 1
    cpus = sorted({c for r in results.values() if r.node for c in r.node.cpus})
    return {"per_node": per, "cpus": cpus}


def disturbed(results: dict) -> int:
    return sum(1 for r in results.values() if r.timing_env and r.timing_env.disturbed)


def correctness(source: Path, out: Path, workers: int, trials: int) -> dict:
    cfg = JudgeConfig(trials=trials, measure=False)
    runs = {}
    for name, w in (("serial", None), ("ray-1", 1), (f"ray-{workers}", workers)):
        seconds, results = judge(source, out / f"correct-{name}", cfg, w)
        runs[name] = {"seconds": seconds, "results": results}
    n = len(runs["serial"]["results"])
    base = runs["serial"]
    summary = {
        name: {
            "seconds": round(r["seconds"], 1),
            "candidates_per_min": round(60 * n / r["seconds"], 2),
            "throughput_vs_serial": round(base["seconds"] / r["seconds"], 3),
            "verdicts_differ_from_serial": differing(base["results"], r["results"]),
            "cpus_busy": BUSY.get(f"correct-{name}"),  # the machine's busy CPUs on average while it ran
            **nodes(r["results"]),
        }
        for name, r in runs.items()
    }
    return {"candidates": n, "runs": summary}


def timing(source: Path, out: Path, workers: int, trials: int, quick: bool) -> dict:
    cfg = JudgeConfig(trials=trials, timing=TimingConfig.quick() if quick else TimingConfig())
    sa, a = judge(source, out / "timed-serial-a", cfg, None)
    sb, b = judge(source, out / "timed-serial-b", cfg, None)
    sn, n = judge(source, out / f"timed-ray-{workers}", cfg, workers)
    return {
        "protocol": str(cfg.timing),
        "seconds": {"serial_a": round(sa, 1), "serial_b": round(sb, 1), f"ray_{workers}": round(sn, 1)},
        "disturbed": {"serial_a": disturbed(a), "serial_b": disturbed(b), f"ray_{workers}": disturbed(n)},
        "verdicts_differ": {"serial_b": differing(a, b), f"ray_{workers}": differing(a, n)},
        "spread_serial_b_vs_a": compare(a, b),  # the stability benchmark's spread, here and now
        f"ray_{workers}_vs_serial_a": compare(a, n),
        "nodes": nodes(n),
    }


def table(part1: dict, part2: dict | None, workers: int) -> dict:
    rows = [
        [
            f"correctness only, {name}",
            r["seconds"],
            r["candidates_per_min"],
            r["cpus_busy"],
            r["throughput_vs_serial"],
            "-",
            "-",
        ]
        for name, r in part1["runs"].items()
    ]
    if part2:
        for name, cmp in (
            ("serial b", part2["spread_serial_b_vs_a"]),
            (f"ray-{workers}", part2[f"ray_{workers}_vs_serial_a"]),
        ):
            v = cmp.get("tvm-default/paired") or {}
            seconds = part2["seconds"]["serial_b" if name == "serial b" else f"ray_{workers}"]
            rows.append(
                [f"timed, {name} vs serial a", seconds, "-", "-", round(part2["seconds"]["serial_a"] / seconds, 3),
                 f"{100 * v.get('within_5pct', 0):.1f}%", f"{v.get('median_abs_log2', float('nan')):.3f}"]
            )  # fmt: skip
    cols = [
        "run",
        "wall s",
        "candidates/min",
        "CPUs busy",
        "throughput vs serial",
        "speedups within +-5%",
        "median |log2|",
    ]
    return {"columns": cols, "rows": rows}


def ceiling(part1: dict) -> str:
    """Why N workers cannot give N x here: what one judgment at a time keeps busy already."""
    busy, cpus = part1["runs"]["serial"]["cpus_busy"], os.cpu_count() or 1
    return (
        f"one judgment at a time keeps {busy} CPUs busy (the driver, and each judgment's builder and judge "
        f"overlapping): on this machine's {cpus} CPUs, workers can give at most {cpus / busy:.2f}x its throughput"
    )


def headline(part1: dict, part2: dict | None, workers: int) -> str:
    r = part1["runs"][f"ray-{workers}"]
    text = (
        f"correctness only: {workers} workers {r['throughput_vs_serial']:.2f}x the throughput of one "
        f"(target {TARGET}x), verdicts {'equal' if not r['verdicts_differ_from_serial'] else 'DIFFER'}"
    )
    if part2:
        spread = part2["spread_serial_b_vs_a"].get("tvm-default/paired") or {}
        ray = part2[f"ray_{workers}_vs_serial_a"].get("tvm-default/paired") or {}
        text += (
            f"; timed on {workers} workers: {100 * ray.get('within_5pct', 0):.0f}% of speedups vs tvm-default "
            f"within +-5% of a 1-worker run (two 1-worker runs: {100 * spread.get('within_5pct', 0):.0f}%)"
        )
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--problem", action="append", default=[], help="only these problems (repeatable)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--trials", type=int, default=5, help="correctness trials per candidate")
    ap.add_argument("--skip-timing", action="store_true", help="part 1 only")
    ap.add_argument("--quick", action="store_true", help="part 2 with the short timing protocol")
    ap.add_argument("--out", type=Path, default=Path("runs/cluster-bench"))
    ap.add_argument("--json", type=Path, default=RESULTS / "cluster.json")
    args = ap.parse_args()
    problems = [p for p in select(level=args.level, ids=args.problem or None) if "test" not in p.tags]
    source = args.out / "source"
    shutil.rmtree(source, ignore_errors=True)
    write_reference_candidates(problems, source)
    part1 = correctness(source, args.out, args.workers, args.trials)
    part2 = None if args.skip_timing else timing(source, args.out, args.workers, args.trials, args.quick)
    report = {
        "title": f"Judging on Ray: {args.workers} workers on one machine",
        "about": "The demo's candidates (reference and rule-based schedule of each problem) judged one at a "
        f"time without Ray and on a local Ray instance of 1 and {args.workers} workers (`ekb eval --jobs N`), "
        "correctness only; then timed one at a time twice and on the workers (each timed judgment on a "
        "physical core of its own), the workers' speedups compared with the spread of two 1-worker runs.",
        "headline": {
            "what": f"ekb eval on {args.workers} Ray workers",
            "figure": headline(part1, part2, args.workers),
        },
        "machine": machine(),
        "protocol": "wall time of each whole run (a Ray instance's start included); part 2: "
        + (part2["protocol"] if part2 else "skipped")
        + f"; {args.trials} correctness trials; compared as benchmarks/stability.py compares two runs",
        "notes": [
            f"baselines compared: {', '.join(BASELINES)} (paired speedups, tvm-default in the table)",
            ceiling(part1),
        ],
        "correctness_only": part1,
        "timed": part2,
        "table": table(part1, part2, args.workers),
    }
    path = write("cluster", report, args.json)
    for row in report["table"]["rows"]:
        print("  ".join(str(v) for v in row))
    print(f"{report['headline']['figure']}\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
