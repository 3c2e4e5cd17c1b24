"""Is a run's verdict a result? Judge the same candidates twice, back to back, and print the spread.

    .venv/bin/python benchmarks/stability.py [--level 1] [--problem L1/a ...] [--rounds N]
        [--min-repeat-ms MS] [--out runs/stability] [--json out.json] [--reuse]

Writes the demo's candidates (the unscheduled reference and the rule-based schedule of each problem),
evaluates them into RUN/a and then into RUN/b with the same configuration (host CPU, 1 thread, the
harness's timing protocol), and compares the two runs candidate by candidate:

- the run-to-run ratio of each speedup (vs tvm-default, vs onnxruntime): the share within +-5 % and
  +-10 %, the median and worst |log2 ratio|;
- Fast@1.0 of each run, ties counted apart, and how many candidates changed their verdict
  (fast / tie / slow);
- the same figures for the old estimator (ratio of the medians, every verdict on the point estimate)
  computed from the same rounds, so the two estimators are compared on identical data.

--reuse compares existing RUN/a and RUN/b without judging again. The target: speedups within
+-5 % for at least 90 % of the candidates, Fast@1.0 within +-2 points.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shutil
import statistics
import sys
import time
from datetime import date
from pathlib import Path

from edgekernelbench import metrics
from edgekernelbench.generators.reference_candidates import write_reference_candidates
from edgekernelbench.harness.api import JudgeConfig
from edgekernelbench.harness.timing import TimingConfig
from edgekernelbench.problems import select
from edgekernelbench.records import Result
from edgekernelbench.runs import EvalConfig, eval_run
from edgekernelbench.store import RunStore

BASELINES = ("tvm-default", "onnxruntime")


def judge(run_dir: Path, problems: list[str], cfg: EvalConfig) -> float:
    t0 = time.perf_counter()
    eval_run(run_dir, cfg, problems, on_result=lambda r: print(".", end="", flush=True))
    print(flush=True)
    return time.perf_counter() - t0


def load(run_dir: Path) -> dict[tuple[str, int], Result]:
    with RunStore(run_dir) as store:
        return {(r.problem, r.sample): r for r in store.results() if r.backend == "host-cpu"}


def ratio_of_medians(r: Result, b: str) -> float | None:
    t = r.baselines.get(b)
    return t.median / r.runtime.median if t and r.runtime and r.runtime.median > 0 else None


def point_only(r: Result, b: str) -> Result:
    """A copy of `r` judged the old way: speedup = ratio of the medians, no interval."""
    s = ratio_of_medians(r, b)
    return Result(
        r.problem, r.sample, r.backend, compiled=r.compiled, correct=r.correct, speedups={b: s} if s else {}
    )


def compare(a: dict, b: dict) -> dict:
    keys = sorted(k for k in a if k in b and a[k].correct and b[k].correct)
    out: dict = {"candidates": len(keys)}
    for bl in BASELINES:
        for est in ("paired", "ratio_of_medians"):
            logs, flips = [], 0
            for k in keys:
                if est == "paired":
                    sa, sb = a[k].speedups.get(bl), b[k].speedups.get(bl)
                    va, vb = metrics.verdict(a[k], 1.0, bl), metrics.verdict(b[k], 1.0, bl)
                else:
                    sa, sb = ratio_of_medians(a[k], bl), ratio_of_medians(b[k], bl)
                    va = metrics.verdict(point_only(a[k], bl), 1.0, bl)
                    vb = metrics.verdict(point_only(b[k], bl), 1.0, bl)
                if sa and sb:
                    logs.append(abs(math.log2(sa / sb)))
                    flips += va != vb
            if not logs:
                continue
            ra = [a[k] if est == "paired" else point_only(a[k], bl) for k in keys]
            rb = [b[k] if est == "paired" else point_only(b[k], bl) for k in keys]
            fa = metrics.fast_at_k(ra, 1.0, bl).value or 0.0
            fb = metrics.fast_at_k(rb, 1.0, bl).value or 0.0
            out[f"{bl}/{est}"] = {
                "n": len(logs),
                "within_5pct": sum(x <= math.log2(1.05) for x in logs) / len(logs),
                "within_10pct": sum(x <= math.log2(1.10) for x in logs) / len(logs),
                "median_abs_log2": statistics.median(logs),
                "worst_ratio": 2 ** max(logs),
                "fast_a": fa,
                "fast_b": fb,
                "fast_diff_points": 100 * abs(fa - fb),
                "ties_a": metrics.ties(ra, 1.0, bl),
                "ties_b": metrics.ties(rb, 1.0, bl),
                "verdict_flips": flips,
            }
    return out


def worst(a: dict, b: dict, bl: str, n: int = 8) -> list[tuple[str, float, float]]:
    rows = []
    for k in a:
        if k in b and a[k].correct and b[k].correct:
            sa, sb = a[k].speedups.get(bl), b[k].speedups.get(bl)
            if sa and sb:
                rows.append((f"{k[0]}#{k[1]}", sa, sb))
    return sorted(rows, key=lambda r: -abs(math.log(r[1] / r[2])))[:n]


def print_report(cmp: dict, a: dict, b: dict, seconds: list[float], cfg: TimingConfig) -> None:
    print(f"\nstability ({date.today()}, {cpu_model()}): {cmp['candidates']} candidates correct in both runs")
    print(f"timing: {cfg}")
    if seconds:
        print("judging time: " + ", ".join(f"{s:.0f} s" for s in seconds))
    head = (
        f"{'baseline / estimator':38s} {'+-5%':>6s} {'+-10%':>6s} {'med|log2|':>9s} {'worst':>7s} "
        f"{'Fast@1 a':>8s} {'Fast@1 b':>8s} {'diff':>6s} {'ties':>7s} {'flips':>5s}"
    )
    print(head)
    for key, v in cmp.items():
        if not isinstance(v, dict):
            continue
        print(
            f"{key:38s} {100 * v['within_5pct']:5.1f}% {100 * v['within_10pct']:5.1f}% "
            f"{v['median_abs_log2']:9.3f} {v['worst_ratio']:6.2f}x {100 * v['fast_a']:7.1f}% "
            f"{100 * v['fast_b']:7.1f}% {v['fast_diff_points']:5.1f}p {v['ties_a']:>3d}/{v['ties_b']:<3d} "
            f"{v['verdict_flips']:5d}"
        )
    for bl in BASELINES:
        print(f"largest swings vs {bl} (run a, run b):")
        for name, sa, sb in worst(a, b, bl):
            print(f"  {name:45s} {sa:7.3f} {sb:7.3f}")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--problem", action="append", default=[])
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--min-repeat-ms", type=float, default=None)
    ap.add_argument("--out", type=Path, default=Path("runs/stability"))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--reuse", action="store_true", help="compare RUN/a and RUN/b as they are")
    args = ap.parse_args(argv)

    timing = TimingConfig()
    over = {
        k: v for k, v in (("rounds", args.rounds), ("min_repeat_ms", args.min_repeat_ms)) if v is not None
    }
    timing = TimingConfig(**{**timing.__dict__, **over})
    cfg = EvalConfig(judge=JudgeConfig(timing=timing))
    problems = select(level=args.level, ids=args.problem or None)
    ids = [p.id for p in problems]
    seconds: list[float] = []
    if not args.reuse:
        if args.out.exists():
            shutil.rmtree(args.out)
        write_reference_candidates(problems, args.out / "a")
        shutil.copytree(args.out / "a" / "candidates", args.out / "b" / "candidates")
        for run in ("a", "b"):
            print(f"run {run}: {len(ids) * 2} candidates", flush=True)
            seconds.append(judge(args.out / run, ids, cfg))
    a, b = load(args.out / "a"), load(args.out / "b")
    cmp = compare(a, b)
    print_report(cmp, a, b, seconds, timing)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "date": date.today().isoformat(),
                    "cpu": cpu_model(),
                    "timing": timing.__dict__,
                    "seconds": seconds,
                    **cmp,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
