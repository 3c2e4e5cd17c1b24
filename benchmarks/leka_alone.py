"""One agent method's final candidates in a finished `ekb agent` run, problem by problem, against ONNX Runtime.

    .venv/bin/ekb agent --methods leka --budget 32 --quick --no-reuse --level 3 --out runs/l3
    .venv/bin/python benchmarks/leka_alone.py runs/l3 [--method leka] [--rows]

Reads the run's store (nothing is measured again): per problem, the judge's speedup over tvm-default, its
paired speedup over ONNX Runtime with the 95% confidence interval, the candidate's median time and ONNX
Runtime's (the candidate's median times the paired ratio: both from the same interleaved rounds), and the
verdict at p = 1.0 (fast only when the whole interval lies above 1). Then the totals: correct, Fast@1.0 (and
ties), the geomeans, the judgments used and the wall time, and the problems behind ONNX Runtime.
`--rows` prints the per-problem table (for the L3 models; the L1 suite's 50-odd rows are left out by default).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from edgekernelbench import metrics
from edgekernelbench.agents.run import METHOD_SAMPLES
from edgekernelbench.store import DB_NAME, RunStore

ORT = "onnxruntime"


def rows(run_dir: Path, method: str) -> list[dict]:
    sample = METHOD_SAMPLES[method]
    with RunStore(run_dir) as store:
        results = {(r.problem, r.sample): r for r in store.results()}
        agent_runs = store.agent_runs()
    out = []
    for (problem, m), rec in sorted(agent_runs.items()):
        if m != method:
            continue
        r = results.get((problem, sample))
        ok = bool(r and r.correct)
        usage = rec.get("usage") or {}
        us = r.runtime.median * 1e6 if ok and r.runtime else None
        s_ort = r.speedups.get(ORT) if ok else None
        out.append(
            {
                "problem": problem,
                "backend": r.backend if r else None,
                "correct": ok,
                "vs_tvm_default": r.speedups.get("tvm-default") if ok else None,
                "vs_ort": s_ort,
                "ci": (r.speedup_ci.get(ORT) if ok else None) or None,
                "verdict": metrics.verdict(r, 1.0, ORT) if r else None,
                "us": us,
                "ort_us": us * s_ort if us and s_ort else None,
                "trials": rec.get("trials", usage.get("evals")) or 0,
                "wall_s": usage.get("wall_s") or 0.0,
                # what the judge hid from ONNX Runtime's CPUID (baselines/ort_isa.py): {"hidden": [...]}
                "ort_isa": (r.extra.get("onnxruntime_isa") if ok else None) or {},
            }
        )
    return out


def geomean(xs) -> float | None:
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def fmt(x, spec=".2f", suffix="x") -> str:
    return "-" if x is None else f"{x:{spec}}{suffix}"


def table(rs: list[dict]) -> list[str]:
    lines = ["| problem | vs tvm-default | vs ONNX Runtime [95% CI] | candidate us | ORT us | verdict |"]
    lines.append("|---|---:|---:|---:|---:|---|")
    for r in rs:
        ci = f" [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}]" if r["ci"] else ""
        lines.append(
            f"| {r['problem']} | {fmt(r['vs_tvm_default'])} | {fmt(r['vs_ort'])}{ci} | {fmt(r['us'], '.0f', '')} "
            f"| {fmt(r['ort_us'], '.0f', '')} | {r['verdict'] or 'not correct'} |"
        )
    return lines


def summary(rs: list[dict]) -> list[str]:
    n = len(rs)
    fast = sum(r["verdict"] == "fast" for r in rs)
    ties = sum(r["verdict"] == "tie" for r in rs)
    behind = sorted(
        (r for r in rs if r["vs_ort"] is not None and r["vs_ort"] < 1.0), key=lambda r: r["vs_ort"]
    )
    lines = [
        f"{n} problems, {sum(r['correct'] for r in rs)} correct: Fast@1.0 vs ONNX Runtime {100 * fast / n:.1f}% "
        f"({fast} of {n}, {ties} tie(s)), geomean vs ONNX Runtime {fmt(geomean(r['vs_ort'] for r in rs))}, "
        # a problem without a correct candidate counts at 1.0 (tvm-default left as it was)
        f"vs tvm-default {fmt(geomean(r['vs_tvm_default'] or 1.0 for r in rs))}, "
        f"{sum(r['trials'] for r in rs)} judgments, {sum(r['wall_s'] for r in rs):.0f} s.",
    ]
    if behind:
        lines.append(
            "Behind ONNX Runtime (point estimate below 1): "
            + ", ".join(f"{r['problem']} {r['vs_ort']:.2f}x ({r['verdict']})" for r in behind)
            + "."
        )
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--method", default="leka", choices=sorted(METHOD_SAMPLES))
    ap.add_argument("--rows", action="store_true", help="print the per-problem table")
    ap.add_argument(
        "--results",
        metavar="NAME",
        help="also write results/NAME.json (benchmarks/results_io.py), e.g. suite_l3_leka",
    )
    args = ap.parse_args(argv)
    if not (args.run_dir / DB_NAME).exists():
        print(f"error: {args.run_dir} is not a run directory (no {DB_NAME})", file=sys.stderr)
        return 2
    rs = rows(args.run_dir, args.method)
    if not rs:
        print(f"error: no {args.method} runs in {args.run_dir}", file=sys.stderr)
        return 2
    print("\n".join([*(table(rs) + [""] if args.rows else []), *summary(rs)]))
    if args.results:
        record(args.results, args.run_dir, args.method, rs)
    return 0


def record(name: str, run_dir: Path, method: str, rs: list[dict]) -> None:
    from results_io import machine, pinned_isa_notes, write

    backend = next((r["backend"] for r in rs if r["backend"]), "host-cpu")
    built = "" if backend == "host-cpu" else f", built for {backend}"
    n, fast = len(rs), sum(r["verdict"] == "fast" for r in rs)
    ties = sum(r["verdict"] == "tie" for r in rs)
    g = geomean(r["vs_ort"] for r in rs)
    write(
        name,
        {
            "title": f"{method} on {', '.join(sorted({r['problem'].split('/')[0] for r in rs}))}{built} "
            "vs ONNX Runtime",
            "about": f"The final candidates of an `ekb agent --methods {method}` run ({run_dir.name}), read from "
            "its store: each one's paired speedup over ONNX Runtime and tvm-default from the final judgment.",
            "headline": {
                "what": f"{method} on {n} problems ({rs[0]['problem'].split('/')[0]}){built} vs ONNX Runtime",
                "figure": f"{sum(r['correct'] for r in rs)}/{n} correct, faster on {fast} ({ties} ties), "
                f"geomean {fmt(g)}",
            },
            "machine": machine(backend),
            "notes": pinned_isa_notes(backend, rs),
            "protocol": "budget 32, --quick search protocol, --no-reuse; final judgment with the full protocol",
            "table": {
                "columns": [
                    "problem",
                    "vs tvm-default",
                    "vs ONNX Runtime [95%]",
                    "candidate us",
                    "ORT us",
                    "verdict",
                ],
                "rows": [
                    [
                        r["problem"],
                        fmt(r["vs_tvm_default"]),
                        fmt(r["vs_ort"]) + (f" [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}]" if r["ci"] else ""),
                        fmt(r["us"], ".0f", ""),
                        fmt(r["ort_us"], ".0f", ""),
                        r["verdict"] or "not correct",
                    ]
                    for r in rs
                ],
            },
            "rows": rs,
        },
    )


if __name__ == "__main__":
    sys.exit(main())
