"""Models deployed from LEKA runs: does the artifact reproduce the speedup the judge measured, and what does an
engineer read off it before shipping (size, memory, latency percentiles, the kernels' profile)?

    .venv/bin/python benchmarks/deploy_from_run.py [--work runs/deploy_from_run] [--budget 32]
        [--problem L3/dscnn_kws ...] [--run L3/dscnn_kws=RUN_DIR ...] [--runs 200] [--quick]

For each model (default: DS-CNN KWS, ResNet-8 and the zoo's ResNet-18 with PyTorch's names), a LEKA run
(`ekb agent --methods leka --budget B --quick`, offline proposer, into WORK/<model>; skipped when the run
directory, or --run's, already holds a judged result of the model), then `ekb deploy MODEL --from RUN
--no-db` on host-cpu: the run's best candidate whole (graph passes, kernels' decisions, fast math), verified
against ONNX Runtime by run.py and by the static C program, both timed (200 single runs: p50 / p90 / p99), the
kernels profiled with their roofline, and the artifact timed against tvm-default and ONNX Runtime with the
judge's protocol (25 interleaved rounds of >= 10 ms; --quick: 3). "reproduced": the paired 95% interval of
the artifact's speedup over tvm-default overlaps the judged one. Then the same deploy with --max-memory one
byte below its plan, which must fail before writing anything, with one line naming the planned figure. And
the model deployed from the rule-based schedules alone (`--rules --no-db`, no run), timed the same way: the
rules-only figures beside the search's.

Writes results/deploy.json (benchmarks/results_io.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from results_io import machine, write

import edgekernelbench
from edgekernelbench.deploy.memory import human
from edgekernelbench.errors import EKBError
from edgekernelbench.problems import get_problem
from edgekernelbench.store import RunStore

DEFAULT = ("L3/dscnn_kws", "L3/resnet8_ic", "L3/zoo_resnet18_bn")


def has_result(run: Path, pid: str) -> bool:
    if not (run / "results.db").is_file():
        return False
    with RunStore(run) as store:
        return any(r.correct for r in store.results(backend="host-cpu", problems=[pid]))


def leka_run(pid: str, run: Path, budget: int, kernel_db: Path) -> float:
    """Runs LEKA on `pid` into `run` (seconds taken)."""
    cmd = [sys.executable, "-m", "edgekernelbench.cli", "agent", "--methods", "leka", "--budget", str(budget)]
    cmd += ["--quick", "--problem", pid, "--out", str(run), "--kernel-db", str(kernel_db)]
    cmd += ["--suite", "zoo"] if "zoo" in get_problem(pid).tags else []
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return time.perf_counter() - t0


def headline(rows: list[dict]) -> str:
    """The judged speedups reproduced, and each model against ONNX Runtime as the search found it and from
    the rules alone."""

    def x(d: dict | None) -> str:
        return f"{d['speedup']:.2f}x" if d and d.get("speedup") else "-"

    reproduced = sum(bool(r["reproduced"]) for r in rows)
    return (
        f"the judged speedup reproduced (95% intervals overlap) for {reproduced}/{len(rows)}; vs ONNX Runtime, "
        "deployed from LEKA's run / from the rules alone: "
        + "; ".join(
            f"{r['problem']} {x(r['vs_onnxruntime'])} / {x((r.get('rules_only') or {}).get('vs_onnxruntime'))}"
            for r in rows
        )
    )


def budget_check(pid: str, run: Path, work: Path, planned: int) -> str:
    """The deploy with --max-memory one byte below the plan: its one-line error (or why it did not fail)."""
    out = work / "budget" / pid.split("/", 1)[1]
    try:
        edgekernelbench.deploy(
            pid,
            "host-cpu",
            out,
            from_run=run,
            use_db=False,
            verify=False,
            measure=False,
            max_memory=planned - 1,
        )
    except EKBError as e:
        text = str(e)
        written = out.exists() and any(out.iterdir())
        return text + (" (but files were written)" if written else "")
    return "did not fail"


def row(pid: str, d, budget_line: str, leka_s: float | None) -> dict:
    m, v = d.manifest, d.verification or {}
    timing, rep = v.get("timing") or {}, v.get("reproduction") or {}
    lat = {x["runner"].split()[0]: x for x in v.get("latency") or []}
    forms = {f["name"]: f["total_bytes"] for f in m["size"]["forms"]}
    prof = (v.get("profile") or {}).get("rows") or []
    carry = m.get("carryover") or {}
    return {
        "problem": pid,
        "verified": bool(v.get("verified")),
        "c_program_verified": bool((v.get("c_program") or {}).get("verified")),
        "candidate": carry.get("candidate"),
        "carried_whole": carry.get("whole"),
        "not_carried": carry.get("not_carried"),
        "graph": carry.get("graph"),
        "target_attrs": m.get("target_attrs"),
        "judged": rep.get("judged"),
        "judged_ci": rep.get("judged_ci"),
        "deployed": rep.get("deployed"),
        "deployed_ci": rep.get("deployed_ci"),
        "reproduced": rep.get("within"),
        "verdict": rep.get("verdict"),
        "vs_onnxruntime": (timing.get("speedups") or {}).get("onnxruntime"),
        "disturbed": (timing.get("timing_env") or {}).get("disturbed"),
        "size": forms,
        "memory": {k: m["memory"][k] for k in ("planned_bytes", "activations_bytes", "workspace_bytes")}
        | {"weights_bytes": m["memory"]["weights_bytes"], "measured": v.get("memory")},
        "latency": lat,
        "top_kernels": prof[:3],
        "max_memory_check": budget_line,
        "leka_seconds": leka_s,
        "deploy_seconds": round(sum(m["seconds"].values()) + v.get("seconds", 0.0), 1),
    }


def rules_only(pid: str, out: Path, quick: bool) -> dict:
    """The same model deployed from the rule-based schedules alone (`--rules --no-db`, no run), verified and
    timed the same way: what the search adds. Its speedups ({"speedup", "ci"}) over both baselines."""
    d = edgekernelbench.deploy(pid, "host-cpu", out, use_db=False, rules=True, quick=quick, runs=20)
    speedups = ((d.verification or {}).get("timing") or {}).get("speedups") or {}
    return {
        "verified": bool((d.verification or {}).get("verified")),
        "vs_tvm_default": speedups.get("tvm-default"),
        "vs_onnxruntime": speedups.get("onnxruntime"),
    }


def _speedup(x: dict | None) -> str:
    return f"{x['speedup']:.2f}x [{x['ci'][0]:.2f}, {x['ci'][1]:.2f}]" if x else "-"


def table_row(r: dict) -> list:
    c, py = r["latency"].get("c/model", {}), r["latency"].get("run.py", {})

    def us(x, key):
        return f"{x[key] * 1e6:,.0f}" if x.get(key) else "-"

    ci = r["judged_ci"] or [0, 0]
    dci = r["deployed_ci"] or [0, 0]
    ort = r["vs_onnxruntime"] or {}
    return [
        r["problem"],
        "yes" if r["verified"] and r["c_program_verified"] else "NO",
        f"{r['judged']:.2f}x [{ci[0]:.2f}, {ci[1]:.2f}]" if r["judged"] else "-",
        f"{r['deployed']:.2f}x [{dci[0]:.2f}, {dci[1]:.2f}]" if r["deployed"] else "-",
        "yes" if r["reproduced"] else "no",
        f"{ort['speedup']:.2f}x [{ort['ci'][0]:.2f}, {ort['ci'][1]:.2f}]" if ort else "-",
        _speedup((r.get("rules_only") or {}).get("vs_tvm_default")),
        _speedup((r.get("rules_only") or {}).get("vs_onnxruntime")),
        f"{us(c, 'p50_s')} / {us(c, 'p90_s')} / {us(c, 'p99_s')}",
        f"{us(py, 'p50_s')} / {us(py, 'p99_s')}",
        human(r["memory"]["planned_bytes"]) + f" + weights {human(r['memory']['weights_bytes'])}",
        human(c["peak_rss_bytes"]) if c.get("peak_rss_bytes") else "-",
        human(r["size"]["c-program"]) if r["size"].get("c-program") else "-",
        human(r["size"]["relax-vm"]) if r["size"].get("relax-vm") else "-",
        ", ".join(f"{k['kernel']} {100 * k['share']:.0f}%" for k in r["top_kernels"][:2]),
        "disturbed" if r["disturbed"] else "quiet",
    ]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("runs/deploy_from_run"))
    ap.add_argument("--budget", type=int, default=32)
    ap.add_argument("--problem", action="append", default=[])
    ap.add_argument("--run", action="append", default=[], help="PROBLEM=RUN_DIR: an existing LEKA run")
    ap.add_argument("--runs", type=int, default=200, help="single runs timed for the percentiles")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    given = dict(x.split("=", 1) for x in a.run)
    rows = []
    for pid in a.problem or DEFAULT:
        name = pid.split("/", 1)[1]
        run = Path(given.get(pid, a.work / "runs" / name))
        leka_s = None
        if not has_result(run, pid):
            print(f"LEKA on {pid} -> {run} ...", file=sys.stderr, flush=True)
            leka_s = round(leka_run(pid, run, a.budget, a.work / "kernels.db"), 1)
        print(f"deploying {pid} from {run} ...", file=sys.stderr, flush=True)
        d = edgekernelbench.deploy(
            pid,
            "host-cpu",
            a.work / "deploy" / name,
            from_run=run,
            use_db=False,
            quick=a.quick,
            runs=a.runs,
            profile_dir=a.work / "profile" / name,
        )
        line = budget_check(pid, run, a.work, d.manifest["memory"]["planned_bytes"])
        rows.append(row(pid, d, line, leka_s))
        print(f"deploying {pid} with the rules only (no run, no database) ...", file=sys.stderr, flush=True)
        rows[-1]["rules_only"] = rules_only(pid, a.work / "rules" / name, a.quick)
        print(json.dumps({k: rows[-1][k] for k in ("problem", "verdict", "max_memory_check")}), flush=True)
    protocol = "3 rounds (--quick)" if a.quick else "25 rounds"
    path = write(
        "deploy",
        {
            "title": "Deployed from a LEKA run: the judged speedup reproduced, and what ships",
            "about": "Each model's best LEKA candidate (one offline run, budget "
            f"{a.budget}, --quick) deployed whole by `ekb deploy --from RUN --no-db` for host-cpu: the artifact "
            "verified against ONNX Runtime by run.py (TVM runtime only) and by the static C program, timed "
            "against tvm-default and ONNX Runtime, its speedup held against the judged one (reproduced: the two "
            "paired 95% intervals overlap); latency of the C program over single runs; planned memory (Relax "
            "VM static plan + the kernels' workspace) and the board's files.",
            "headline": {
                "what": "LEKA candidates deployed --from their run (host-cpu)",
                "figure": headline(rows),
            },
            "machine": machine(),
            "protocol": f"paired timing {protocol} of >= 10 ms against tvm-default and ONNX Runtime in a fresh "
            f"process; latency: {a.runs} single runs per runner; the judged figures are the runs' final judgments",
            "notes": [f"{r['problem']}, one byte below the plan: {r['max_memory_check']}" for r in rows]
            + [f"{r['problem']}: {r['verdict']}" for r in rows],
            "table": {
                "columns": [
                    "model",
                    "verified (run.py, C)",
                    "judged vs tvm-default",
                    "deployed vs tvm-default",
                    "reproduced",
                    "deployed vs ONNX Runtime",
                    "rules only vs tvm-default",
                    "rules only vs ONNX Runtime",
                    "C program p50 / p90 / p99 us",
                    "run.py p50 / p99 us",
                    "planned memory",
                    "C peak RSS",
                    "C program on a board",
                    "Relax VM form",
                    "top kernels",
                    "machine",
                ],
                "rows": [table_row(r) for r in rows],
            },
            "rows": rows,
        },
    )
    print(f"wrote {path}")
    return 0 if all(r["verified"] and r["c_program_verified"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
