"""A rule of search/rules/contraction.py against the rules without it, kernel by kernel, standalone: a
depthwise convolution's register tile along its sliding window (`--rule sliding`: `_sliding_tile`, without
it no window axes), or a stride-2 read's buffer laid out as even and odd halves (`--rule deinterleave`:
`_deinterleave`).

    .venv/bin/python benchmarks/sliding_tile.py L1/dwconv3x3_kws:fused_conv2d_add_relu \
        L3/yamnet:fused_conv2d5_add3_relu3 [--top 3] [--rounds 7]
    .venv/bin/python benchmarks/sliding_tile.py --rule deinterleave --graph default --backend host-avx2 \
        L3/resnet8_ic:fused_conv2d2_add2_relu1

For each PROBLEM:KERNEL of the graph (--graph: nhwc, search.graph.NHWC, the default; or default, the
model's own layout), the cost model's first --top points of the builtin proposer's space
(search/variants.py KernelSpace, --backend's profile, 1 thread) are recorded twice: with the rule, and
without it (the rules as they were). Each point is built
for this host, checked against the first one's output on the same random inputs, and timed in --rounds
interleaved rounds (TVM's time evaluator, >= 2 ms per round). Prints each point's median and the ratios
new/old of the first points and of the best of each side."""

from __future__ import annotations

import argparse
import sys

import numpy as np


def points(problem_id: str, kernel: str, graph: str, machine, top: int):
    """(PrimFunc, [(label, layers)]) of the cost model's first `top` tiled points."""
    from edgekernelbench.search.variants import KernelSpace

    space = KernelSpace(problem_id, kernel, machine, 1, graph)
    out = []
    for _, cfg in space.ranked:
        if len(out) >= top:
            break
        v = space._record(cfg)
        if v is not None and cfg.acc_vectors is not None:
            out.append((cfg.label, v.layers))
    return space.func, out


def build(func, kernel: str, layers: dict, target):
    import tvm

    from edgekernelbench.ir.replay import apply_trace, combine_layers
    from edgekernelbench.ir.spec import SCHEDULE_LAYERS
    from edgekernelbench.tvm_env import compile as tvm_compile

    trace, where = combine_layers([(k, layers[k]) for k in SCHEDULE_LAYERS if k in layers])
    f = list(apply_trace(func, trace, kernel, where).mod.functions.values())[0]
    return tvm_compile(tvm.IRModule({"main": f.with_attr("global_symbol", "main")}), target)


RULES = {"sliding": ("window_axes", lambda b: []), "deinterleave": ("DEINTERLEAVE", False)}


def compare(item: str, machine, target, top: int, rounds: int, rule: str = "sliding", graph: str = "nhwc"):
    import tvm

    from edgekernelbench.search.graph import NHWC, graph_key
    from edgekernelbench.search.rules import contraction

    problem_id, kernel = item.split(":")
    key = graph_key(NHWC if graph == "nhwc" else None)
    name, without = RULES[rule]
    kept = getattr(contraction, name)
    func, new = points(problem_id, kernel, key, machine, top)
    setattr(contraction, name, without)
    try:
        _, old = points(problem_id, kernel, key, machine, top)
    finally:
        setattr(contraction, name, kept)
    dev = tvm.cpu(0)
    shapes = [[int(d) for d in p.ty.shape] for p in func.params]
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s).astype("float32") for s in shapes[:-1]]
    libs = {}
    for side, pts in (("old", old), ("new", new)):
        for i, (label, layers) in enumerate(pts):
            lib = build(func, kernel, layers, target)
            args = [tvm.runtime.tensor(x, dev) for x in inputs]
            args.append(tvm.runtime.tensor(np.zeros(shapes[-1], "float32"), dev))
            lib["main"](*args)
            libs[(side, i, label)] = (lib, args)
    first = next(iter(libs.values()))
    t0 = first[0].mod.time_evaluator("main", dev, number=5, repeat=3)(*first[1]).median
    number = max(10, int(2e-3 / max(t0, 1e-7)))
    times: dict = {k: [] for k in libs}
    for _ in range(rounds):
        for k, (lib, args) in libs.items():
            times[k].append(lib.mod.time_evaluator("main", dev, number=number, repeat=1)(*args).median)
    ref = first[1][-1].numpy()
    print(problem_id, kernel)
    for (side, i, label), (_, args) in libs.items():
        ok = np.allclose(args[-1].numpy(), ref, rtol=1e-4, atol=1e-4)
        med = float(np.median(times[(side, i, label)]))
        print(f"  {side}{i} {label:55s} {'same output' if ok else 'OUTPUT DIFFERS'}  {med * 1e6:9.3f} us")
    med = {k: float(np.median(v)) for k, v in times.items()}
    best = {s: min(v for k, v in med.items() if k[0] == s) for s in ("old", "new")}
    firsts = {s: next(v for k, v in med.items() if k[0] == s and k[1] == 0) for s in ("old", "new")}
    print(f"  new/old: first point {firsts['new'] / firsts['old']:.3f}, best {best['new'] / best['old']:.3f}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kernels", nargs="+", help="PROBLEM:KERNEL of the graph")
    ap.add_argument("--top", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--rule", choices=sorted(RULES), default="sliding")
    ap.add_argument("--graph", choices=("nhwc", "default"), default="nhwc")
    ap.add_argument("--backend", default="host-cpu", help="a host profile (host-cpu, host-avx2, ...)")
    args = ap.parse_args(argv)
    import tvm

    from edgekernelbench.backends.host import resolve_target
    from edgekernelbench.backends.registry import get_profile
    from edgekernelbench.errors import EKBError
    from edgekernelbench.search.cost import Machine

    profile = get_profile(args.backend, 1)
    machine, target = (
        Machine.for_profile(profile),
        tvm.target.Target({**resolve_target(profile), "num-cores": 1}),
    )
    for item in args.kernels:
        try:
            compare(item, machine, target, args.top, args.rounds, args.rule, args.graph)
        except EKBError as e:
            print(f"sliding_tile: error: {e}", file=sys.stderr)
            return 2
        except (KeyError, ValueError) as e:
            print(
                f"sliding_tile: error: {item}: not PROBLEM:KERNEL of the channels-last graph ({e})",
                file=sys.stderr,
            )
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
