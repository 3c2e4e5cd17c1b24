"""LEKA on the held-out zoo (problems/zoo.py) against ONNX Runtime: the figure the search is not tuned on.

    .venv/bin/python benchmarks/zoo.py --out runs/zoo [--budget 32] [--backend host-cpu]

Runs `ekb agent --methods leka --budget N --quick --no-reuse --suite zoo` (host CPU, 1 thread, offline;
resumable: a finished run is only read again), then reads its store (benchmarks/leka_alone.py): per model,
correct, LEKA's time and ONNX Runtime's with the paired 95% interval, the speedups, the judgments used.
Then the bars the zoo is held to: Correct@1 100%, faster than ONNX Runtime (whole interval above 1) on at least
60% of the zoo, geomean at least 1.0. Writes results/zoo.json (benchmarks/results_io.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from leka_alone import geomean, rows  # noqa: E402
from results_io import machine, write  # noqa: E402


def bars(rs: list[dict]) -> dict:
    n = len(rs)
    correct = sum(r["correct"] for r in rs)
    fast = sum(r["verdict"] == "fast" for r in rs)
    g = geomean(r["vs_ort"] for r in rs if r["correct"])
    return {
        "models": n,
        "correct": correct,
        "faster_than_ort": fast,
        "ties": sum(r["verdict"] == "tie" for r in rs),
        "geomean_vs_ort": g,
        "geomean_vs_tvm_default": geomean(r["vs_tvm_default"] for r in rs if r["correct"]),
        "met": {
            "correct_100pct": n > 0 and correct == n,
            "faster_on_60pct": n > 0 and fast >= 0.6 * n,
            "geomean_at_least_1": g is not None and g >= 1.0,
        },
        "behind": [r["problem"] for r in rs if r["verdict"] == "slow"],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out", type=Path, required=True, help="the agent run's directory (resumed when it exists)"
    )
    ap.add_argument("--budget", type=int, default=32)
    ap.add_argument("--backend", default="host-cpu")
    ap.add_argument("--results", type=Path, help="write the report here [results/zoo.json]")
    args = ap.parse_args(argv)
    cmd = [
        sys.executable, "-m", "edgekernelbench.cli", "agent", "--methods", "leka", "--budget", str(args.budget),
        "--quick", "--no-reuse", "--suite", "zoo", "--backend", args.backend, "--out", str(args.out),
        "--kernel-db", str(args.out / "kernels.sqlite"),
    ]  # fmt: skip
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    rs = rows(args.out, "leka")
    b = bars(rs)
    path = write(
        "zoo",
        {
            "title": "LEKA on the held-out zoo",
            "about": f"LEKA (offline proposer, budget {args.budget}, the search's short protocol, no kernel "
            f"database) on the {b['models']} models of problems/zoo.py, which the search was not developed on, "
            "against ONNX Runtime (all graph optimizations, same thread count).",
            "headline": {
                "what": f"LEKA on the zoo ({b['models']} held-out models) vs ONNX Runtime",
                "figure": f"{b['correct']}/{b['models']} correct, faster on {b['faster_than_ort']} "
                f"({b['ties']} ties), geomean {(b['geomean_vs_ort'] or 0):.2f}x",
            },
            "machine": machine(args.backend),
            "protocol": f"budget {args.budget}, search protocol --quick; final judgment with the full protocol",
            "wall_s": round(time.perf_counter() - t0, 1),
            "bars": b,
            "table": {
                "columns": [
                    "model",
                    "correct",
                    "LEKA us",
                    "ONNX Runtime us",
                    "vs ONNX Runtime [95%]",
                    "vs tvm-default",
                    "judgments",
                ],
                "rows": [
                    [
                        r["problem"],
                        "yes" if r["correct"] else "no",
                        f"{r['us']:.0f}" if r["us"] else "-",
                        f"{r['ort_us']:.0f}" if r["ort_us"] else "-",
                        f"{r['vs_ort']:.2f}x [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}]"
                        if r["vs_ort"] and r["ci"]
                        else "-",
                        f"{r['vs_tvm_default']:.2f}x" if r["vs_tvm_default"] else "-",
                        r["trials"],
                    ]
                    for r in rs
                ],
            },
            "rows": rs,
        },
        args.results,
    )
    print(json.dumps(b, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
