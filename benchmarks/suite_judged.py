"""The suite's built-in candidates judged: per level, the unscheduled reference and the rule-based schedule
of every problem (what `make demo` does for level 1), against tvm-default and ONNX Runtime.

    .venv/bin/python benchmarks/suite_judged.py --level 1 --out runs/suite_l1

Runs `ekb generate --model builtin` and `ekb eval` into --out (resumable), reads `ekb report --json`, and
writes results/suite_l<level>.json (benchmarks/results_io.py): Correct@1, Fast@1.0 with its ties and the
geomean speedup against each baseline, for each kind of candidate.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from results_io import machine, write

BASELINES = ("tvm-default", "onnxruntime")


def ekb(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "edgekernelbench.cli", *args], check=True)


def figures(level: dict) -> dict:
    return {
        "samples": level["samples"],
        "correct_at_1": level["correct_at_1"],
        **{
            b: {
                "fast_at_1": level["fast"][b]["1.0"],
                "ties": level["ties"][b]["1.0"],
                "geomean": level["geomean_speedup"].get(b),
            }
            for b in BASELINES
        },
    }


def pct(f: dict, b: str) -> str:
    return f"{100 * f[b]['fast_at_1']:.1f}% ({f[b]['ties']} ties), {f[b]['geomean']:.2f}x"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True, help="the run directory (resumed when it exists)")
    args = ap.parse_args()
    level = str(args.level)
    ekb("generate", "--model", "builtin", "--level", level, "--out", str(args.out))
    ekb("eval", str(args.out))
    with tempfile.TemporaryDirectory() as tmp:
        report_path = Path(tmp) / "report.json"
        ekb("report", str(args.out), "--json", str(report_path))
        report = json.loads(report_path.read_text())
    per_method = {
        m: figures(r["backends"][0]["levels"][0]) for m, r in report["by_method"].items()
    }  # "reference" is "tvmscript-file" in the store (a .py file): named for what it is here
    names = {"tvmscript-file": "reference", "rules": "rules"}
    per_method = {names.get(m, m): f for m, f in per_method.items()}
    total = figures(report["backends"][0]["levels"][0])
    rules = per_method.get("rules", total)
    path = write(
        f"suite_l{level}",
        {
            "title": f"The level-{level} suite, built-in candidates",
            "about": f"Every level-{level} problem's unscheduled reference and rule-based schedule (generators/), "
            "judged on this machine's CPU against tvm-default and ONNX Runtime.",
            "headline": {
                "what": f"L{level} rule-based candidates: Fast@1.0 and geomean",
                "figure": f"vs tvm-default {pct(rules, 'tvm-default')}; vs ONNX Runtime {pct(rules, 'onnxruntime')}",
            },
            "machine": machine(),
            "protocol": "the judge's full protocol (25 rounds of >= 10 ms), 5 correctness trials with stress inputs",
            "all": total,
            "by_candidate": per_method,
            "table": {
                "columns": ["candidates", "samples", "Correct@1", "vs tvm-default", "vs ONNX Runtime"],
                "rows": [
                    [
                        m,
                        f["samples"],
                        f"{100 * f['correct_at_1']:.0f}%",
                        pct(f, "tvm-default"),
                        pct(f, "onnxruntime"),
                    ]
                    for m, f in [("all", total), *sorted(per_method.items())]
                ],
            },
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
