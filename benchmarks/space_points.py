"""Points of one kernel's schedule space timed side by side, with the cost model's rank of each.

    .venv/bin/python benchmarks/space_points.py PROBLEM:KERNEL [--graph reference|channels-last|packed]
        [--run RUN_DIR [--method leka]] [--top 8] [--label LABEL ...] [--rounds 15]

    # yamnet's 512 -> 1024 pointwise convolution: the cost model's first four points and the 6 x 32 tile
    .venv/bin/python benchmarks/space_points.py L3/yamnet:fused_conv2d_nhwc_packed7_add9_relu9 \
        --graph packed --top 4 --label "tile+cache/16 lanes/acc 12/vec 2/unroll 64"

The kernel is taken from the problem's graph: the reference's (`reference`), channels last (`channels-last`:
search.graph.NHWC, after ClipAsOps where the model has Clip), channels last with the float GEMMs on packed
weight panels (`packed`: + PackedWeights), or, with --run, the graph of the method's best candidate in a run
(benchmarks/peak_fraction.py `best_spec`). The points are the builtin proposer's space (search/variants.py
KernelSpace, host CPU, 1 thread): the first --top points the cost model estimates and every --label given, in
that order. Each is built for this host, run on the same random inputs and checked against the first
point's output, then all of them and the peak FLOP/s micro-kernel (backends/peak.py) are timed in the same
interleaved rounds (the harness's protocol). Per point: its rank and estimate in the cost model, its
median, its speed over the first point's (the median of the per-round ratios, with its 95% confidence
interval) and its fraction of the peak side by side (FLOPs: 2 per multiply-add of the main block). Not a
judgment: nothing here decides what a search keeps.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
from sliding_tile import build  # benchmarks/sliding_tile.py, beside this script

GRAPHS = ("reference", "channels-last", "packed")


def graph_of(problem_id: str, which: str) -> str:
    """The graph key of `which` (one of GRAPHS) for a problem."""
    from edgekernelbench.problems import get_problem
    from edgekernelbench.search.graph import CLIP_AS_OPS, NHWC, PACKED_WEIGHTS, graph_key

    if which == "reference":
        return ""
    clamps = any(n.op_type == "Clip" for n in get_problem(problem_id).model.graph.node)
    passes = (CLIP_AS_OPS if clamps else []) + NHWC
    return graph_key(passes + (PACKED_WEIGHTS if which == "packed" else []))


def run_graph(run_dir: Path, problem_id: str, method: str) -> str:
    """The graph key of the method's best candidate of a problem in a run (ValueError: none)."""
    from peak_fraction import best_spec  # beside this script

    from edgekernelbench.search.graph import graph_key
    from edgekernelbench.store import RunStore

    if not (run_dir / "results.db").is_file():
        raise ValueError(f"{run_dir}: no run store (results.db) there")
    with RunStore(run_dir) as store:
        spec, why = best_spec(run_dir, store, problem_id, method)
    if spec is None:
        raise ValueError(f"{problem_id}: no {method} candidate to take the graph from ({why})")
    return graph_key(spec.decisions.graph.get("passes"))


def chosen_points(space, top: int, labels: list[str]) -> list[tuple[int, float, str, dict]]:
    """[(rank in the cost model, its estimate, label, layers)]: the first `top` points the cost model estimates
    (tiled points, a dot kernel's VNNI tiles, a streamed matrix-vector product), then `labels`."""
    ranked = [(i, cost, cfg) for i, (cost, cfg) in enumerate(space.ranked)]
    picked = [x for x in ranked if x[2].acc_vectors is not None or x[2].label in space._modelled][:top]
    by_label = {cfg.label: (i, cost, cfg) for i, cost, cfg in ranked}
    for label in labels:
        if label not in by_label:
            raise ValueError(f"no point {label!r} in this kernel's space")
        if by_label[label] not in picked:
            picked.append(by_label[label])
    out = []
    for i, cost, cfg in picked:
        v = space._record(cfg)
        if v is not None:
            out.append((i, cost, cfg.label, v.layers))
        elif cfg.label in labels:  # a point asked for by name is shown or refused, never left out
            raise ValueError(f"point {cfg.label!r} does not replay on this kernel")
    return out


def random_inputs(func, rng) -> list[np.ndarray]:
    """Random values for each parameter but the last (the output): normal floats, small integers."""
    out = []
    for p in func.params[:-1]:
        shape, dtype = [int(d) for d in p.ty.shape], str(p.ty.dtype)
        if dtype.startswith(("int", "uint")):
            lo = 0 if dtype.startswith("uint") else -8
            out.append(rng.integers(lo, 8, shape).astype(dtype))
        else:
            out.append(rng.standard_normal(shape).astype(dtype))
    return out


def measure(problem_id: str, kernel: str, graph: str, top: int, labels: list[str], rounds: int) -> list[dict]:
    """One row per point (see the module docstring)."""
    import tvm

    from edgekernelbench.backends.host import evaluator_timer
    from edgekernelbench.backends.peak import peak_contender
    from edgekernelbench.backends.registry import get_profile
    from edgekernelbench.harness.timing import (
        TimingConfig,
        fraction_of_peak,
        paired_speedup,
        time_interleaved,
    )
    from edgekernelbench.search.cost import Machine
    from edgekernelbench.search.rules import build_target
    from edgekernelbench.search.variants import KernelSpace

    space = KernelSpace(problem_id, kernel, Machine.for_profile(get_profile("host-cpu", 1)), 1, graph)
    if not space.ranked:
        raise ValueError(f"{problem_id}:{kernel}: no schedule space (not a contraction the rules tile)")
    facts = space.facts
    flops = 2.0 * math.prod(facts.block(facts.main).extents)
    points = chosen_points(space, top, labels)
    target, dev = build_target(1), tvm.cpu(0)
    func = space.func
    out_shape, out_dtype = [int(d) for d in func.params[-1].ty.shape], str(func.params[-1].ty.dtype)
    inputs = random_inputs(func, np.random.default_rng(0))
    contenders, outputs = {}, []
    for i, (_, _, _, layers) in enumerate(points):
        lib = build(func, kernel, layers, target)
        args = [tvm.runtime.tensor(x, dev) for x in inputs] + [
            tvm.runtime.tensor(np.zeros(out_shape, out_dtype), dev)
        ]
        lib["main"](*args)
        outputs.append(args[-1].numpy())
        contenders[f"p{i}"] = evaluator_timer(lib.mod, "main", dev, args)
    peak_run, peak_flops = peak_contender(target)
    contenders["peak"] = peak_run
    times = time_interleaved(contenders, TimingConfig(rounds=rounds))
    rows = []
    for i, (rank, cost, label, _) in enumerate(points):
        t = times[f"p{i}"]
        vs_first = paired_speedup(times["p0"], t)
        frac = fraction_of_peak(t, flops, times["peak"], peak_flops)
        same = np.allclose(outputs[i], outputs[0], rtol=1e-4, atol=1e-4, equal_nan=True)
        rows.append(
            {
                "rank": rank,
                "estimate": cost,
                "label": label,
                "us": t.median * 1e6,
                "vs_first": vs_first,
                "peak": frac,
                "same": same,
            }
        )
    return rows


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kernel", help="PROBLEM:KERNEL")
    ap.add_argument("--graph", choices=GRAPHS, default="reference")
    ap.add_argument("--run", type=Path, help="take the graph of the method's best candidate in this run")
    ap.add_argument("--method", default="leka")
    ap.add_argument("--top", type=int, default=8, help="the first N points the cost model estimates")
    ap.add_argument("--label", action="append", default=[], help="a point of the space by its label")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args(argv)
    from edgekernelbench.errors import EKBError

    problem_id, _, kernel = args.kernel.partition(":")
    try:
        graph = run_graph(args.run, problem_id, args.method) if args.run else graph_of(problem_id, args.graph)
        rows = measure(problem_id, kernel, graph, args.top, args.label, args.rounds)
    except (EKBError, ValueError, KeyError) as e:
        why = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"space_points: error: {args.kernel}: {why}", file=sys.stderr)
        return 2
    if not rows:
        print(f"space_points: error: {args.kernel}: no point of its space replays", file=sys.stderr)
        return 2
    print(
        f"{problem_id} {kernel} ({args.rounds} rounds side by side; speed over p0, fraction of the peak: 95% CI)"
    )
    print(f"{'':4s} {'rank':>4s} {'estimate':>10s} {'us':>9s} {'vs p0':>22s} {'of the peak':>20s}  point")
    for i, r in enumerate(rows):
        s, lo, hi = r["vs_first"]
        f, flo, fhi = r["peak"]
        flag = "" if r["same"] else "  OUTPUT DIFFERS FROM p0"
        print(
            f"p{i:<3d} {r['rank']:4d} {r['estimate']:10.4g} {r['us']:9.3f} {s:6.3f}x [{lo:.3f}, {hi:.3f}]"
            f" {f:6.1%} [{flo:.1%}, {fhi:.1%}]  {r['label']}{flag}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
