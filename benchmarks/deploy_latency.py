"""Deployed latency of each MLPerf Tiny model on the host CPU, against tvm-default and ONNX Runtime.

    .venv/bin/python benchmarks/deploy_latency.py [--out runs/deploy_latency] [--kernel-db PATH]
        [--no-rules] [--quick] [--threads 1] [--problem L3/dscnn_kws ...] [--json out.json]

Each model of the suite tagged `mlperf-tiny` (float and int8) is deployed with `ekb deploy`'s Python API for
host-cpu: decisions from the kernel database (--kernel-db, default $EKB_KERNEL_DB or the user's), then the
rule-based schedules (unless --no-rules; each kept only when not measured slower than tvm-default's kernel),
the rest tvm-default. The artifact is verified against the oracle in a fresh process (TVM runtime only) and
timed end to end in another fresh process against tvm-default and ONNX Runtime with the harness's protocol
(25 interleaved rounds of >= 10 ms; --quick: 3). Prints a Markdown table: per model the medians (and IQR)
of the three, the paired speedups with their 95% intervals, where the kernels' decisions came from, and
whether the machine was busy while it timed (`disturbed`: the other CPUs more than 25% busy).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from datetime import date
from pathlib import Path

from stability import cpu_model  # benchmarks/stability.py, beside this script

import edgekernelbench
from edgekernelbench.problems import select


def us(t: dict) -> str:
    return f"{t['median'] * 1e6:,.0f} ({t['iqr'] * 1e6:,.0f})"


def speedup(s: dict) -> str:
    return f"{s['speedup']:.2f}x [{s['ci'][0]:.2f}, {s['ci'][1]:.2f}]"


def row(pid: str, d) -> dict:
    v = d.verification or {}
    timing = v.get("timing") or {}
    sources = Counter(k["source"] for k in d.manifest["kernels"])
    return {
        "problem": pid,
        "verified": bool(v.get("verified")),
        "status": timing.get("status"),
        "timings": timing.get("timings"),
        "speedups": timing.get("speedups"),
        "disturbed": (timing.get("timing_env") or {}).get("disturbed"),
        "sources": dict(sources),
        "ort_timer": (timing.get("onnxruntime_timer") or {}).get("timer"),
        "seconds": round(sum(d.manifest["seconds"].values()) + v.get("seconds", 0.0), 1),
    }


def table(rows: list[dict]) -> str:
    out = [
        "| model | verified | deployed us (IQR) | tvm-default us (IQR) | ONNX Runtime us (IQR) "
        "| vs tvm-default | vs ONNX Runtime | kernels: decision | machine |",
        "|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        t, s = r["timings"], r["speedups"]
        src = ", ".join(f"{n} {k}" for k, n in sorted(r["sources"].items()))
        if r["status"] != "measured":
            out.append(f"| {r['problem']} | {r['verified']} | {r['status']} | | | | | {src} | |")
            continue
        out.append(
            f"| {r['problem']} | {'yes' if r['verified'] else 'NO'} | {us(t['deployed'])} | "
            f"{us(t['tvm-default'])} | {us(t['onnxruntime'])} | {speedup(s['tvm-default'])} | "
            f"{speedup(s['onnxruntime'])} | {src} | {'disturbed' if r['disturbed'] else 'quiet'} |"
        )
    return "\n".join(out)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/deploy_latency"))
    ap.add_argument("--kernel-db", type=Path, default=None)
    ap.add_argument("--no-rules", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--problem", action="append", default=[])
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    problems = [p.id for p in select(level=3, tag="mlperf-tiny", ids=a.problem or None)]
    rows = []
    t0 = time.perf_counter()
    for pid in problems:
        print(f"deploying {pid} ...", file=sys.stderr, flush=True)
        d = edgekernelbench.deploy(
            pid,
            "host-cpu",
            a.out / pid.split("/", 1)[1],
            kernel_db=a.kernel_db,
            rules=not a.no_rules,
            threads=a.threads,
            quick=a.quick,
            checks=2,
        )
        rows.append(row(pid, d))
        print(f"  {json.dumps(rows[-1]['speedups'])}", file=sys.stderr, flush=True)
    protocol = "3 rounds (--quick)" if a.quick else "25 rounds"
    print(
        f"host-cpu, {a.threads} thread(s), {cpu_model()}, {date.today().isoformat()}, {protocol} of >= 10 ms, "
        f"{time.perf_counter() - t0:.0f} s in all"
    )
    print(table(rows))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0 if all(r["verified"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
