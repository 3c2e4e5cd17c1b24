"""Rule-based schedules vs the unscheduled reference, tvm-default (dlight) and ONNX Runtime.

    .venv/bin/python benchmarks/rules_vs_reference.py [--level 1] [--ids L1/a L1/b] [--json out.json]

Evaluates, per problem, the reference candidate and the rules candidate with evaluate() (one
thread, host CPU); each run also times the baselines. Prints one row per problem: correctness,
median times in microseconds, and the rules candidate's speedups.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from edgekernelbench.generators.reference_candidates import reference_spec
from edgekernelbench.harness.api import evaluate
from edgekernelbench.harness.isolation import Limits
from edgekernelbench.harness.timing import TimingConfig
from edgekernelbench.problems import select
from edgekernelbench.search.rules import rule_schedules, rule_spec

TIMING = TimingConfig(warmup_ms=10, min_repeat_ms=5, rounds=5)
LIMITS = Limits(timeout_s=180)


def _us(t) -> float | None:
    return t.median * 1e6 if t is not None else None


def run(problems, threads: int = 1) -> list[dict]:
    rows = []
    for p in problems:
        t0 = time.perf_counter()
        ref = evaluate(p, reference_spec(p), timing=TIMING, threads=threads, limits=LIMITS)
        spec = rule_spec(p, threads=threads)
        rules = evaluate(p, spec, timing=TIMING, threads=threads, limits=LIMITS)
        base = rules.baselines or ref.baselines
        row = {
            "problem": p.id,
            "category": p.category,
            "ref_correct": ref.correct,
            "rules_correct": rules.correct,
            "rules_reason": rules.reason,
            "rules_detail": rules.detail[:300] if not rules.correct else "",
            "ref_us": _us(ref.runtime),
            "rules_us": _us(rules.runtime),
            "tvm_default_us": _us(base.get("tvm-default")),
            "onnxruntime_us": _us(base.get("onnxruntime")),
            "rules_compile_s": rules.compile_seconds,
            "schedules": [
                f"{fs.name}: {fs.op_class}/{fs.strategy}" for fs in rule_schedules(p, threads=threads)
            ],
            "seconds": time.perf_counter() - t0,
        }
        rows.append(row)
        print(_line(row), flush=True)
    return rows


def _fmt(x: float | None) -> str:
    return f"{x:10.2f}" if x is not None else f"{'-':>10}"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:7.2f}" if a and b else f"{'-':>7}"


HEADER = (
    f"{'problem':36s} {'ok':>5} {'ref us':>10} {'rules us':>10} {'tvm-def us':>10} {'ort us':>10}"
    f" {'x ref':>7} {'x tvmd':>7} {'x ort':>7} {'comp s':>6}  schedules"
)


def _line(r: dict) -> str:
    ok = ("Y" if r["ref_correct"] else "n") + "/" + ("Y" if r["rules_correct"] else "N")
    return (
        f"{r['problem']:36s} {ok:>5} {_fmt(r['ref_us'])} {_fmt(r['rules_us'])} {_fmt(r['tvm_default_us'])}"
        f" {_fmt(r['onnxruntime_us'])} {_ratio(r['ref_us'], r['rules_us'])}"
        f" {_ratio(r['tvm_default_us'], r['rules_us'])} {_ratio(r['onnxruntime_us'], r['rules_us'])}"
        f" {r['rules_compile_s']:6.1f}  {'; '.join(r['schedules'])}"
        + (f"  [{r['rules_reason']}: {r['rules_detail']}]" if not r["rules_correct"] else "")
    )


def summary(rows: list[dict]) -> str:
    ok = [r for r in rows if r["rules_correct"] and r["rules_us"]]
    beat_ref = sum(1 for r in ok if r["ref_us"] and r["rules_us"] < r["ref_us"])
    beat_tvmd = sum(1 for r in ok if r["tvm_default_us"] and r["rules_us"] < r["tvm_default_us"])
    beat_ort = sum(1 for r in ok if r["onnxruntime_us"] and r["rules_us"] < r["onnxruntime_us"])
    return (
        f"{len(rows)} problems, rules correct on {len(ok)}; faster than reference on {beat_ref}, "
        f"than tvm-default on {beat_tvmd}, than onnxruntime on {beat_ort}"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--ids", nargs="*")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args(argv)
    problems = select(ids=args.ids) if args.ids else select(level=args.level)
    print(HEADER, flush=True)
    rows = run(problems, args.threads)
    print(summary(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r["rules_correct"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
