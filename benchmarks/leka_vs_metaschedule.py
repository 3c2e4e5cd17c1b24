"""LEKA's offline search against TVM's MetaSchedule, side by side in one run, at N measured trials.

    .venv/bin/python benchmarks/leka_vs_metaschedule.py [--n 8 --n 32] [--level 1] [--subset agent]
        [--problem L1/a ...] [--out runs/leka_vs_ms] [--quick] [--results NAME]

For each N, one `ekb agent --methods leka,metaschedule --budget N --trials N --no-reuse` run (host CPU,
1 thread; LEKA: N judge evaluations; MetaSchedule: N tuning trials measured by its own runner, then its
tuned module judged once), both methods problem by problem in the same process, so each pair is measured
side by side. The kernel database is a fresh file per run (LEKA does not start from earlier runs).
Prints, per problem and in total: the speedup of each method's final candidate over tvm-default and over
ONNX Runtime (the judge's paired estimate), its roofline fraction, the trials used and the wall time;
then the issue's bars (geomean at N = 32 at least MetaSchedule's in at most half its wall time; ahead at
N = 8; Fast@1.0 vs ONNX Runtime on >= 60 % with geomean > 1).
Existing runs resume (`ekb agent` skips finished problems), so an interrupted benchmark continues.
Writes results/leka_vs_metaschedule.json (benchmarks/results_io.py; `--results NAME` another name), which
benchmarks/render_results.py renders into docs/results.md.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path

import results_io  # benchmarks/results_io.py, beside this script

from edgekernelbench import metrics
from edgekernelbench.problems import select
from edgekernelbench.store import RunStore

METHODS = ("leka", "metaschedule")
SAMPLES = {"leka": 4, "metaschedule": 5}  # agents.run.METHOD_SAMPLES
EKB = [sys.executable, "-m", "edgekernelbench.cli"]


def run(n: int, problems: list[str], out: Path, quick: bool) -> Path:
    run_dir = out / f"n{n}"
    cmd = [*EKB, "agent", "--methods", ",".join(METHODS), "--budget", str(n), "--trials", str(n)]
    cmd += ["--no-reuse", "--kernel-db", str(out / f"n{n}-kernels.db"), "--out", str(run_dir)]
    cmd += [a for p in problems for a in ("--problem", p)]
    if quick:
        cmd.append("--quick")
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    return run_dir


def rows(run_dir: Path) -> list[dict]:
    with RunStore(run_dir) as store:
        results = {(r.problem, r.sample): r for r in store.results()}
        agent_runs = store.agent_runs()
    out = []
    for (problem, method), rec in sorted(agent_runs.items()):
        if method not in METHODS:
            continue
        r = results.get((problem, SAMPLES[method]))
        usage = rec.get("usage") or {}
        out.append(
            {
                "problem": problem,
                "method": method,
                "correct": bool(r and r.correct),
                "vs_tvm_default": r.speedups.get("tvm-default") if r and r.correct else None,
                "vs_onnxruntime": r.speedups.get("onnxruntime") if r and r.correct else None,
                "fast_vs_onnxruntime": bool(r and metrics.verdict(r, 1.0, "onnxruntime") == "fast"),
                "roofline": r.roofline.fraction if r and r.roofline else None,
                "trials": rec.get("trials", usage.get("evals")),
                "wall_s": usage.get("wall_s"),
            }
        )
    return out


def geomean(xs) -> float | None:
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def totals(table: list[dict]) -> dict:
    out = {}
    for m in METHODS:
        rs = [r for r in table if r["method"] == m]
        if not rs:
            continue
        out[m] = {
            "problems": len(rs),
            "correct": sum(r["correct"] for r in rs),
            # a problem without a correct candidate counts at 1.0 (the method left tvm-default as it was)
            "geomean_vs_tvm_default": geomean([r["vs_tvm_default"] or 1.0 for r in rs]),
            "geomean_vs_onnxruntime": geomean([r["vs_onnxruntime"] for r in rs]),
            "fast_vs_onnxruntime": sum(r["fast_vs_onnxruntime"] for r in rs) / len(rs),
            "trials": sum(r["trials"] or 0 for r in rs),
            "wall_s": sum(r["wall_s"] or 0.0 for r in rs),
        }
    return out


def fmt(x, spec=".2f", suffix="x") -> str:
    return "-" if x is None else f"{x:{spec}}{suffix}"


def markdown(results: dict[int, list[dict]], header: str) -> str:
    lines = [header, ""]
    for n, table in results.items():
        lines += [f"### N = {n} measured trials per problem", ""]
        lines.append("| problem | method | vs tvm-default | vs ONNX Runtime | roofline | trials | wall |")
        lines.append("|---|---|---:|---:|---:|---:|---:|")
        for r in table:
            roof = "-" if r["roofline"] is None else f"{100 * r['roofline']:.1f}%"
            lines.append(
                f"| {r['problem']} | {r['method']} | {fmt(r['vs_tvm_default'])} | {fmt(r['vs_onnxruntime'])} "
                f"| {roof} | {r['trials']} | {fmt(r['wall_s'], '.0f', ' s')} |"
            )
        lines += [
            "",
            "| method | correct | geomean vs tvm-default | geomean vs ORT | Fast@1.0 vs ORT | trials | wall |",
        ]
        lines.append("|---|---:|---:|---:|---:|---:|---:|")
        for m, t in totals(table).items():
            lines.append(
                f"| {m} | {t['correct']}/{t['problems']} | {fmt(t['geomean_vs_tvm_default'])} "
                f"| {fmt(t['geomean_vs_onnxruntime'])} | {100 * t['fast_vs_onnxruntime']:.0f}% | {t['trials']} "
                f"| {t['wall_s']:.0f} s |"
            )
        lines.append("")
    lines += bars(results)
    return "\n".join(lines) + "\n"


def bars(results: dict[int, list[dict]]) -> list[str]:
    """The issue's bars, each with its figures and whether it holds."""
    out = ["### Against the bars", ""]
    for n, table in sorted(results.items()):
        t = totals(table)
        if not all(m in t for m in METHODS):
            continue
        lk, ms = t["leka"], t["metaschedule"]
        ahead = (lk["geomean_vs_tvm_default"] or 0) >= (ms["geomean_vs_tvm_default"] or 0)
        count = head_to_head(table)
        half = lk["wall_s"] <= 0.5 * ms["wall_s"] if ms["wall_s"] else False
        out.append(
            f"- N = {n}: geomean vs tvm-default LEKA {fmt(lk['geomean_vs_tvm_default'])} vs MetaSchedule "
            f"{fmt(ms['geomean_vs_tvm_default'])} ({'met' if ahead else 'NOT met'}); wall {lk['wall_s']:.0f} s "
            f"vs {ms['wall_s']:.0f} s ({'within half: met' if half else 'not within half'}); LEKA Fast@1.0 vs "
            f"ONNX Runtime {100 * lk['fast_vs_onnxruntime']:.0f}% (bar 60%), geomean "
            f"{fmt(lk['geomean_vs_onnxruntime'])} (bar > 1)"
        )
        out.append(
            f"  - per problem, LEKA's speedup over tvm-default against MetaSchedule's (even: within {EVEN:.0%}): "
            f"ahead on {len(count['ahead'])}, even on {len(count['even'])}, behind on {len(count['behind'])}"
            + (f" ({', '.join(count['behind'])})" if count["behind"] else "")
        )
    return out


EVEN = 0.02  # two speedups within 2% of each other count as even (a judgment's own noise is about that)


def head_to_head(table: list[dict]) -> dict[str, list[str]]:
    """Problems where LEKA's final candidate is ahead of, even with, or behind MetaSchedule's (speedup over
    tvm-default; a method without a correct candidate counts at 1.0, tvm-default left as it was)."""
    by = {(r["problem"], r["method"]): r["vs_tvm_default"] or 1.0 for r in table}
    out = {"ahead": [], "even": [], "behind": []}
    for p in sorted({r["problem"] for r in table}):
        if (p, "leka") not in by or (p, "metaschedule") not in by:
            continue
        q = by[(p, "leka")] / by[(p, "metaschedule")]
        out["ahead" if q > 1 + EVEN else "behind" if q < 1 / (1 + EVEN) else "even"].append(p)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, action="append", help="measured trials per problem (default: 8 and 32)")
    ap.add_argument("--level", type=int)
    ap.add_argument("--subset")
    ap.add_argument("--problem", action="append", default=[])
    ap.add_argument("--out", type=Path, default=Path("runs/leka_vs_ms"))
    ap.add_argument("--quick", action="store_true", help="the judge's short timing protocol")
    ap.add_argument("--results", default="leka_vs_metaschedule", help="results/NAME.json to write")
    args = ap.parse_args(argv)
    ns = args.n or [8, 32]
    problems = [p.id for p in select(level=args.level, subset=args.subset, ids=args.problem or None)]
    if not problems:
        print("no problems selected", file=sys.stderr)
        return 2
    results = {n: rows(run(n, problems, args.out, args.quick)) for n in ns}
    header = f"LEKA (offline) vs MetaSchedule, host CPU, 1 thread, {len(problems)} problem(s)"
    print(markdown(results, header))
    path = results_io.write(args.results, record(results, problems, args.quick))
    print(f"wrote {path}")
    return 0


def record(results: dict[int, list[dict]], problems: list[str], quick: bool) -> dict:
    """The results file: per N, each method's totals and the per-problem rows; the headline at the largest N."""
    n = max(results)
    t = totals(results[n])
    lk, ms = t.get("leka", {}), t.get("metaschedule", {})
    figure = (
        f"N = {n}: LEKA {fmt(lk.get('geomean_vs_tvm_default'))} vs MetaSchedule "
        f"{fmt(ms.get('geomean_vs_tvm_default'))} over tvm-default (geomean, {len(problems)} problems), "
        f"wall {lk.get('wall_s', 0):.0f} s vs {ms.get('wall_s', 0):.0f} s; LEKA vs ONNX Runtime "
        f"{fmt(lk.get('geomean_vs_onnxruntime'))}, Fast@1.0 {100 * lk.get('fast_vs_onnxruntime', 0):.0f}%"
    )
    table = {
        "columns": [
            "N",
            "problem",
            "method",
            "vs tvm-default",
            "vs ONNX Runtime",
            "roofline",
            "trials",
            "wall s",
        ],
        "rows": [
            [
                k,
                r["problem"],
                r["method"],
                r["vs_tvm_default"],
                r["vs_onnxruntime"],
                r["roofline"],
                r["trials"],
                r["wall_s"],
            ]
            for k, rs in sorted(results.items())
            for r in rs
        ],
    }
    return {
        "title": "LEKA against MetaSchedule at equal trials",
        "about": "LEKA's offline search and TVM's MetaSchedule, each given N measured trials per problem, "
        "problem by problem in one run; each final candidate judged afresh against tvm-default and ONNX Runtime.",
        "headline": {"what": "LEKA vs MetaSchedule, equal trials", "figure": figure},
        "machine": results_io.machine(),
        "protocol": ("the search's short protocol" if quick else "the judge's full protocol")
        + "; each method's final candidate judged afresh with the full protocol",
        "problems": problems,
        "totals": {str(k): totals(rs) for k, rs in sorted(results.items())},
        "bars": bars(results),
        "table": table,
    }


if __name__ == "__main__":
    sys.exit(main())
