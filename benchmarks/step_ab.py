"""Two judged steps of an agent's search, their kernels timed side by side.

    .venv/bin/python benchmarks/step_ab.py RUN_DIR PROBLEM STEP_A STEP_B [--method leka] [--rounds 15]

An agent judges each candidate once, so two candidates' profiles come from two judgments minutes apart; on
a shared machine a kernel moves by a few percent between them, as much as the gain a decision is kept for.
This script takes the specs of two judge steps of one problem in a run (`ekb agent` or
benchmarks/leka_vs_metaschedule.py: the step numbers are those of the trajectory, `ekb report RUN
--per-problem` and the run store's agent_steps), replays both on the problem's reference (decisions-only
specs: a candidate's own code is never run here), builds them for this host and times every kernel call of
both in the same interleaved rounds (the harness's timing protocol, 1 thread). It prints each call's median
and the two totals: B's total over A's in each round, its median and its spread (the 2.5th and 97.5th
percentiles over the rounds).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from peak_fraction import kernel_calls, spec_target  # benchmarks/peak_fraction.py, beside this script
from stability import cpu_model

from edgekernelbench.backends.host import evaluator_timer
from edgekernelbench.harness.timing import TimingConfig, time_interleaved
from edgekernelbench.ir.spec import KernelSpec
from edgekernelbench.problems import get_problem
from edgekernelbench.store import RunStore


def step_spec(steps: list[dict], step: int) -> tuple[KernelSpec | None, str]:
    """The spec a judge step judged (None, why not)."""
    found = [s for s in steps if s["step"] == step]
    if not found:
        return None, f"no step {step}"
    rec = found[0]
    if not isinstance(rec.get("spec"), dict):
        return None, f"step {step} ({rec.get('kind')}) judged no spec: give a judge step"
    spec = KernelSpec.from_dict(rec["spec"])
    if spec.module is not None:
        return None, f"step {step} carries a candidate's own code (only decisions are replayed here)"
    return spec, str(rec.get("proposal") or rec.get("kind"))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("problem")
    ap.add_argument("step_a", type=int)
    ap.add_argument("step_b", type=int)
    ap.add_argument("--method", default="leka")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args(argv)
    if not (args.run_dir / "results.db").is_file():
        print(f"{args.run_dir}: no run store (results.db) there", file=sys.stderr)
        return 2
    with RunStore(args.run_dir) as store:
        steps = store.agent_steps(args.problem, args.method)
    specs = {}
    for tag, step in (("A", args.step_a), ("B", args.step_b)):
        spec, label = step_spec(steps, step)
        if spec is None:
            print(f"{args.problem} {args.method}: {label}", file=sys.stderr)
            return 2
        specs[tag] = (spec, label)
    import tvm

    problem, dev = get_problem(args.problem), tvm.cpu(0)
    contenders = {}
    for tag, (spec, _) in specs.items():
        for i, (name, _, lib, call_args) in enumerate(kernel_calls(problem, spec, spec_target(spec))):
            contenders[f"{tag}:{i}:{name}"] = evaluator_timer(lib.mod, name, dev, call_args)
    times = time_interleaved(contenders, TimingConfig(rounds=args.rounds))
    print(
        f"{args.problem}, {args.method}'s steps {args.step_a} (A) and {args.step_b} (B) of {args.run_dir}, "
        f"{cpu_model()}, 1 thread, {args.rounds} interleaved rounds\n"
    )
    for tag, (_, label) in specs.items():
        print(f"{tag}: {label}")
    print("\n| call | us (median) |\n|---|---:|")
    for key, t in times.items():
        print(f"| {key} | {t.median * 1e6:.3f} |")
    per_round = {
        tag: np.sum([t.samples for k, t in times.items() if k.startswith(tag + ":")], axis=0) for tag in specs
    }
    ratios = per_round["B"] / per_round["A"]
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    print(
        f"\ntotal A {np.median(per_round['A']) * 1e6:.2f} us, B {np.median(per_round['B']) * 1e6:.2f} us; "
        f"B / A {np.median(ratios):.3f} [{lo:.3f}, {hi:.3f}]"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
