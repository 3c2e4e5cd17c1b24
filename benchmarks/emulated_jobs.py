"""Wall time of `ekb eval` on an emulated backend with one worker vs several (`--jobs`), alternating
the two in each repetition (these machines are shared and noisy); prints medians and their ratio.

    .venv/bin/python benchmarks/emulated_jobs.py [--backend rpi4] [--jobs 2] [--reps 3] [--level 1]
                                                 [--problem L1/... ...] [--out runs/bench-jobs]

The candidates are the built-in ones (`ekb generate --model builtin`: the unscheduled reference and the
rule-based schedule of each problem), generated once and copied into a fresh run directory per timing.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

EKB = [sys.executable, "-m", "edgekernelbench.cli"]


def run(*args) -> None:
    p = subprocess.run([*EKB, *map(str, args)], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"ekb {' '.join(map(str, args))} failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")


def timed_eval(source: Path, run_dir: Path, backend: str, jobs: int) -> float:
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.copytree(source / "candidates", run_dir / "candidates")
    t0 = time.perf_counter()
    run("eval", run_dir, "--backend", backend, "--jobs", jobs, "--trials", 5)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="rpi4")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--problem", action="append", default=[])
    ap.add_argument("--out", type=Path, default=Path("runs/bench-jobs"))
    args = ap.parse_args()
    source = args.out / "source"
    shutil.rmtree(source, ignore_errors=True)
    run("generate", "--model", "builtin", "--out", source, "--level", args.level, "--backend", args.backend,
        *[a for p in args.problem for a in ("--problem", p)])  # fmt: skip
    n = len(list((source / "candidates").rglob("sample*")))
    times: dict[int, list[float]] = {1: [], args.jobs: []}
    for rep in range(args.reps):
        for jobs in (1, args.jobs) if rep % 2 == 0 else (args.jobs, 1):  # alternate who goes first
            t = timed_eval(source, args.out / f"jobs{jobs}", args.backend, jobs)
            times[jobs].append(t)
            print(f"rep {rep}: --jobs {jobs}: {t:.1f} s", flush=True)
    one, many = statistics.median(times[1]), statistics.median(times[args.jobs])
    print(
        f"{args.backend}, {n} candidates, {args.reps} rep(s): --jobs 1 median {one:.1f} s, "
        f"--jobs {args.jobs} median {many:.1f} s, ratio {one / many:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
