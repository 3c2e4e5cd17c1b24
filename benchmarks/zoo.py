"""LEKA on the held-out zoo (problems/zoo.py) against ONNX Runtime: the figure the search is not tuned on.

    .venv/bin/python benchmarks/zoo.py --out runs/zoo [--budget 32] [--backend host-cpu]
        [--json docs/results/zoo.json] [--markdown docs/zoo.md]

Runs `ekb agent --methods leka --budget N --quick --no-reuse --suite zoo` (host CPU, 1 thread, offline;
resumable: a finished run is only read again), then reads its store (benchmarks/leka_alone.py): per model,
correct, LEKA's time and ONNX Runtime's with the paired 95% interval, the speedups, the judgments used.
Then the bars of issue 48: Correct@1 100%, faster than ONNX Runtime (whole interval above 1) on at least
60% of the zoo, geomean at least 1.0. Writes the JSON (with the machine, its ISA and the commit) and the
Markdown page.
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

ROOT = Path(__file__).resolve().parent.parent


def machine(backend: str) -> dict:
    from edgekernelbench.backends.hostinfo import host_facts
    from edgekernelbench.backends.registry import get_profile

    facts = host_facts()
    profile = get_profile(backend)
    return {
        "cpu": facts.model,
        "llvm_cpu": facts.cpu,
        "isa": list(facts.isa),
        "backend": backend,
        "target": profile.target,
        "vector_bits": profile.vector_bits,
    }


def commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


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


def markdown(report: dict) -> str:
    m, b = report["machine"], report["bars"]
    lines = [
        "# LEKA on the held-out zoo",
        "",
        f"`python benchmarks/zoo.py --out RUN --budget {report['budget']} --markdown docs/zoo.md`: LEKA "
        f"(offline proposer, budget {report['budget']}, search protocol `--quick`, no kernel database) on the "
        f"{b['models']} models of problems/zoo.py, which the search was not developed on. Latest run: "
        f"{report['date']}, commit {report['commit']}, {m['cpu']} (LLVM `{m['llvm_cpu']}`, "
        f"{', '.join(m['isa'])}), backend {m['backend']} ({m['vector_bits']}-bit vectors), 1 thread.",
        "",
        f"- correct: {b['correct']} of {b['models']}; faster than ONNX Runtime (95% interval above 1): "
        f"{b['faster_than_ort']} ({b['ties']} ties); geomean vs ONNX Runtime "
        f"{(b['geomean_vs_ort'] or 0):.2f}x, vs tvm-default {(b['geomean_vs_tvm_default'] or 0):.2f}x",
        f"- bars (issue 48): Correct@1 100% {'met' if b['met']['correct_100pct'] else 'NOT met'}; faster on "
        f">= 60% {'met' if b['met']['faster_on_60pct'] else 'NOT met'}; geomean >= 1.0 "
        f"{'met' if b['met']['geomean_at_least_1'] else 'NOT met'}",
        "",
        "| model | correct | LEKA us | ONNX Runtime us | vs ONNX Runtime [95%] | vs tvm-default | judgments |",
        "|---|---|---:|---:|---|---:|---:|",
    ]
    for r in report["rows"]:
        ci = r["ci"] or [None, None]
        vs = f"{r['vs_ort']:.2f}x [{ci[0]:.2f}, {ci[1]:.2f}]" if r["vs_ort"] and ci[0] else "-"
        lines.append(
            f"| {r['problem']} | {'yes' if r['correct'] else 'no'} | "
            + (f"{r['us']:.0f}" if r["us"] else "-")
            + " | "
            + (f"{r['ort_us']:.0f}" if r["ort_us"] else "-")
            + f" | {vs} | "
            + (f"{r['vs_tvm_default']:.2f}x" if r["vs_tvm_default"] else "-")
            + f" | {r['trials']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out", type=Path, required=True, help="the agent run's directory (resumed when it exists)"
    )
    ap.add_argument("--budget", type=int, default=32)
    ap.add_argument("--backend", default="host-cpu")
    ap.add_argument("--json", type=Path, help="write the report here")
    ap.add_argument("--markdown", type=Path, help="write the page here")
    args = ap.parse_args(argv)
    cmd = [
        sys.executable, "-m", "edgekernelbench.cli", "agent", "--methods", "leka", "--budget", str(args.budget),
        "--quick", "--no-reuse", "--suite", "zoo", "--backend", args.backend, "--out", str(args.out),
        "--kernel-db", str(args.out / "kernels.sqlite"),
    ]  # fmt: skip
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    rs = rows(args.out, "leka")
    report = {
        "benchmark": "zoo",
        "date": time.strftime("%Y-%m-%d"),
        "commit": commit(),
        "budget": args.budget,
        "wall_s": round(time.perf_counter() - t0, 1),
        "machine": machine(args.backend),
        "bars": bars(rs),
        "rows": rs,
    }
    print(json.dumps(report["bars"], indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
