"""How ONNX Runtime's per-call time depends on how it is timed (numbers quoted in the README; nothing here
is asserted by tests).

A one-node Relu at three sizes, 1 thread, the baseline's session options, timed in one interleaved run
of the harness's protocol (harness/timing.py) through:
  (a) session.run from a Python loop,
  (b) run_with_iobinding from a Python loop (inputs bound, outputs preallocated and bound),
  (c) the native timer: a C loop over RunWithBinding (baselines/ort_native.py),
then the timer floors of `ekb baseline` (an empty kernel through each contender's timer, in a worker).

    .venv/bin/python benchmarks/ort_timers.py [--threads 1] [--rounds 15]
"""

from __future__ import annotations

import argparse

import numpy as np

SHAPES = ((1, 12), (1, 64, 25, 5), (1, 144, 56, 56))


def relu_model(shape):
    from edgekernelbench.problems.graph import GraphBuilder

    g = GraphBuilder("relu")
    g.output(g.node("Relu", [g.input("x", shape)]))
    return g.build()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()

    from types import SimpleNamespace

    from edgekernelbench.baselines.onnxruntime import iobinding_timer, ort_contender, session_run_timer
    from edgekernelbench.baselines.ort_native import build_library
    from edgekernelbench.harness.api import time_floors
    from edgekernelbench.harness.timing import TimingConfig, time_interleaved
    from edgekernelbench.onnxrt import ort_session
    from edgekernelbench.tvm_env import set_threads

    set_threads(args.threads)
    cfg = TimingConfig(rounds=args.rounds)
    lib = str(build_library())
    rows = []
    for shape in SHAPES:
        model = relu_model(shape)
        x = {"x": np.random.default_rng(0).standard_normal(shape).astype("float32")}
        sess = ort_session(model, threads=args.threads, optimize=True)
        native, how = ort_contender(SimpleNamespace(model=model), x, args.threads, lib)
        assert how["timer"] == "native", how
        contenders = {
            "session.run": session_run_timer(sess, x),
            "io_binding": iobinding_timer(sess, x, sess.run(None, x)),
            "native": native,
        }
        t = time_interleaved(contenders, cfg)
        rows.append(("x".join(map(str, shape)), {k: v.median * 1e6 for k, v in t.items()}))
    print(f"one-node Relu, {args.threads} thread(s), median us per call ({args.rounds} interleaved rounds)")
    print(f"{'shape':>14} {'session.run':>12} {'io_binding':>11} {'native C':>9}")
    for name, us in rows:
        print(f"{name:>14} {us['session.run']:12.2f} {us['io_binding']:11.2f} {us['native']:9.2f}")
    res = time_floors("host-cpu", threads=args.threads, timing=cfg)
    if res.reason:
        print("floors not measured:", res.detail)
        return
    print("timer floors on host-cpu (an empty kernel through each timer), median us per call:")
    for name, t in res.baselines.items():
        print(f"  {name:30} {t.median * 1e6:8.2f}")


if __name__ == "__main__":
    main()
