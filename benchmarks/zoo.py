"""LEKA on the held-out zoo (problems/zoo.py) against ONNX Runtime: the figure the search is not tuned on.

    .venv/bin/python benchmarks/zoo.py --out runs/zoo [--budget 32] [--backend host-cpu] [--name zoo]

Runs `ekb agent --methods leka --budget N --quick --no-reuse --suite zoo` (host CPU, 1 thread, offline;
resumable: a finished run is only read again), then reads its store (benchmarks/leka_alone.py): per model,
correct, LEKA's time and ONNX Runtime's with the paired 95% interval, the speedups, the judgments used.
Then the bars the zoo is held to: Correct@1 100%, faster than ONNX Runtime (whole interval above 1) on at least
60% of the zoo, geomean at least 1.0. Per model also where LEKA's judgments went (per kept improvement, on
failed candidates, on points wider than the machine's vectors: report/agents.search_rows), and for each model
it is not faster than ONNX Runtime on, the kernels of its final candidate that take the most time, with their
GFLOP/s against the peak. Writes results/zoo.json (benchmarks/results_io.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from leka_alone import geomean, rows  # noqa: E402
from results_io import machine, pinned_isa_notes, write  # noqa: E402

from edgekernelbench.agents.run import METHOD_SAMPLES  # noqa: E402
from edgekernelbench.problems import get_problem  # noqa: E402
from edgekernelbench.report.agents import search_rows  # noqa: E402
from edgekernelbench.store import RunStore  # noqa: E402


def searches(run_dir: Path, backend: str) -> dict[str, dict]:
    """Per model, where LEKA's judgments went (report/agents.search_rows), with this machine's float32
    lanes for a run that did not record them."""
    from edgekernelbench.backends.registry import get_profile

    with RunStore(run_dir) as store:
        runs, steps = store.agent_runs(), store.agent_steps()
    lanes = getattr(get_profile(backend), "vector_lanes", None)
    return {r.problem: {**r.__dict__, "per_kept": r.per_kept} for r in search_rows(runs, steps, lanes=lanes)}


def behind(run_dir: Path, rs: list[dict]) -> dict[str, str]:
    """For each model LEKA is not faster than ONNX Runtime on, where its final candidate's time goes (the
    judge's per-kernel profile): per kind of kernel (search.kernels' operator class: pointwise, depthwise,
    conv2d, dense, ...), its share of the time, GFLOP/s and fraction of the backend's peak (the int8 peak for
    an integer model where the peak record has one), the largest kind first; then the largest kernel."""
    from edgekernelbench.search.kernels import kernels

    with RunStore(run_dir) as store:
        results = {(r.problem, r.sample): r for r in store.results()}
        peaks = [store.get_meta(k) for k in store.meta_keys("peak:")]
    peak = next((p for p in peaks if isinstance(p, dict) and p.get("flops")), None)
    out = {}
    for row in rs:
        if row["verdict"] == "fast":
            continue
        r = results.get((row["problem"], METHOD_SAMPLES["leka"]))
        if r is None or not r.kernels:
            out[row["problem"]] = "no per-kernel profile in its final judgment"
            continue
        roof = peak and ((peak.get("int8_ops") if get_problem(r.problem).integer else None) or peak["flops"])
        kind = {k.name: k.op_class for k in kernels(r.problem, _graph(run_dir, r.problem))}
        total = sum(k.per_run for k in r.kernels) or 1.0
        by_kind: dict[str, list[float]] = {}
        for k in r.kernels:
            acc = by_kind.setdefault(kind.get(k.kernel, "other"), [0.0, 0.0])
            acc[0] += k.per_run
            acc[1] += k.flops * k.calls
        parts = []
        for name, (seconds, flops) in sorted(by_kind.items(), key=lambda kv: -kv[1][0]):
            if seconds / total < 0.05:
                continue
            rate = flops / seconds / 1e9 if flops and seconds else None
            text = f"{name} kernels {100 * seconds / total:.0f}% of the time"
            if rate:
                text += f" at {rate:.1f} GFLOP/s" + (
                    f" ({100 * rate * 1e9 / roof:.0f}% of the peak)" if roof else ""
                )
            parts.append(text)
        big = max(r.kernels, key=lambda k: k.per_run)
        parts.append(
            f"largest kernel {big.kernel}: {100 * big.per_run / total:.0f}%, {big.median * 1e6:.1f} us"
        )
        out[row["problem"]] = "; ".join(parts)
    return out


def _graph(run_dir: Path, problem: str) -> str:
    """The graph (search.graph's key of its passes) of the final candidate LEKA wrote for `problem`: its
    kernels' names are that graph's (channels last renames the convolutions)."""
    from edgekernelbench.ir.spec import load_candidate
    from edgekernelbench.rundir import existing_candidate
    from edgekernelbench.search.graph import graph_key

    path = existing_candidate(run_dir, problem, METHOD_SAMPLES["leka"])
    if path is None or path.suffix != ".json":
        return ""
    return graph_key(load_candidate(path, problem).decisions.graph.get("passes"))


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


def _per_kept(s: dict | None) -> str:
    return f"{s['per_kept']:.1f}" if s and s.get("per_kept") else "-"


def _too_wide(s: dict | None) -> str:
    return "-" if not s or s.get("too_wide") is None else str(s["too_wide"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out", type=Path, required=True, help="the agent run's directory (resumed when it exists)"
    )
    ap.add_argument("--budget", type=int, default=32)
    ap.add_argument("--backend", default="host-cpu")
    ap.add_argument(
        "--name",
        default="zoo",
        help="the results file's name: results/NAME.json [zoo]; one per ISA measured, e.g. zoo_avx512",
    )
    ap.add_argument("--results", type=Path, help="write the report here instead [results/NAME.json]")
    args = ap.parse_args(argv)
    cmd = [
        sys.executable, "-m", "edgekernelbench.cli", "agent", "--methods", "leka", "--budget", str(args.budget),
        "--quick", "--no-reuse", "--suite", "zoo", "--backend", args.backend, "--out", str(args.out),
        "--kernel-db", str(args.out / "kernels.sqlite"),
    ]  # fmt: skip
    subprocess.run(cmd, check=True)
    rs = rows(args.out, "leka")
    b = bars(rs)
    spent = searches(args.out, args.backend)
    kernels_behind = behind(args.out, rs)
    path = write(
        args.name,
        {
            "title": "LEKA on the held-out zoo"
            + ("" if args.backend == "host-cpu" else f" ({args.backend})"),
            "about": f"LEKA (offline proposer, budget {args.budget}, the search's short protocol, no kernel "
            f"database) on the {b['models']} models of problems/zoo.py, which the search was not developed on, "
            "against ONNX Runtime (all graph optimizations, same thread count).",
            "headline": {
                "what": f"LEKA on the zoo ({b['models']} held-out models)"
                + ("" if args.backend == "host-cpu" else f", built for {args.backend}")
                + " vs ONNX Runtime",
                "figure": f"{b['correct']}/{b['models']} correct, faster on {b['faster_than_ort']} "
                f"({b['ties']} ties), geomean {(b['geomean_vs_ort'] or 0):.2f}x",
            },
            "machine": machine(args.backend),
            "protocol": f"budget {args.budget}, search protocol --quick; final judgment with the full protocol",
            # the episodes' own wall time, from the store: a resumed run's command only reads it again
            "wall_s": round(sum(r["wall_s"] for r in rs), 1),
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
                    "per kept",
                    "too wide",
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
                        _per_kept(spent.get(r["problem"])),
                        _too_wide(spent.get(r["problem"])),
                    ]
                    for r in rs
                ],
            },
            "rows": rs,
            "search": spent,
            "notes": [
                *pinned_isa_notes(args.backend, rs),
                *(f"{pid} (not faster than ONNX Runtime): {text}" for pid, text in kernels_behind.items()),
            ],
        },
        args.results,
    )
    print(json.dumps(b, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
