"""A kernel faster than the machine allows: flagged, judged again with poisoned outputs, never fast.

The attack of this file's first version: a matmul that computes one output element first and, when the
output buffer already holds that value (the previous timed call left it there), skips the rest. Every
correctness trial starts from a sentinel-filled output, so it computed there; timed back to back on the
same inputs, it skipped nearly all its work. The timed calls now take several input sets in turn
(backends/call_loop.py): the previous call's output is never this call's result, so it computes on every
call and its time is the whole matmul's. The plausibility check stays the backstop for what gets past
that (a kernel that keeps several outputs of inputs it has seen): a result faster than the physical bound
is judged again by a fresh judge that times every kernel on poisoned outputs, and never counts as fast
unless that judge confirms it."""

from __future__ import annotations

import contextlib

import pytest

from edgekernelbench import metrics
from edgekernelbench.harness.api import evaluate, warm_judge
from edgekernelbench.harness.isolation import Limits
from edgekernelbench.harness.timing import TimingConfig
from edgekernelbench.ir.spec import KernelSpec

PROBLEM = "L1/tiny_matmul_128"
SIG = (
    'x: T.Buffer((T.int64(128), T.int64(128)), "float32"), w1: T.Buffer((T.int64(128), T.int64(128)), '
    '"float32"), matmul: T.Buffer((T.int64(128), T.int64(128)), "float32")'
)
HONEST = """
for i, j in T.grid(128, 128):
    matmul[i, j] = T.float32(0)
    for k in range(128):
        matmul[i, j] = matmul[i, j] + x[i, k] * w1[k, j]
"""
CACHING = """
probe = T.decl_buffer((1,), "float32")
probe[0] = T.float32(0)
for k in range(128):
    probe[0] = probe[0] + x[0, k] * w1[k, 0]
if not T.isnan(matmul[0, 0]) and T.fabs(matmul[0, 0] - probe[0]) < T.float32(1e-3):  # (NaN first: unordered)
    T.evaluate(0)
else:
    for i, j in T.grid(128, 128):
        matmul[i, j] = T.float32(0)
        for k in range(128):
            matmul[i, j] = matmul[i, j] + x[i, k] * w1[k, j]
"""
# a machine that does 20 GFLOP/s and moves 100 GB/s: the 4.2 MFLOP matmul takes at least 210 us. The
# scalar loops above compute it at a few GFLOP/s on any CPU (>= 400 us); a call that skips its work costs a
# few us, though on a loaded machine the judge's time per call can reach ~70 us: the bound sits between.
PEAK = {"flops": 2e10, "bandwidth": 1e11, "levels": []}


def module(body: str) -> str:
    lines = "\n".join("        " + ln for ln in body.strip().splitlines())
    return f"@I.ir_module\nclass Module:\n    @T.prim_func(private=True)\n    def matmul({SIG}):\n{lines}\n"


def judge(body: str, peak: dict = PEAK):
    spec = KernelSpec(problem=PROBLEM, module=module(body), method="attack")
    return evaluate(
        PROBLEM,
        spec,
        trials=3,
        timing=TimingConfig(warmup_ms=5, min_repeat_ms=2, rounds=5),
        baselines=("tvm-default",),
        limits=Limits(timeout_s=300, memory_mb=4096),
        peak=peak,
    )


def test_a_kernel_that_reuses_its_last_output_computes_on_rotated_inputs():
    r = judge(CACHING)
    assert r.correct, r.detail  # every correctness trial and every checked timed call computed
    plaus = r.plausibility
    assert plaus.bound_s == 4194304 / 2e10
    assert plaus.status == "plausible" and plaus.seconds >= 0.5 * plaus.bound_s, plaus


def test_a_result_faster_than_the_bound_is_judged_again_and_never_fast_unless_confirmed():
    """The backstop, fed a result it must not believe: the honest matmul's own judgment, its time
    replaced by 1 us (far below the 210 us bound). A fresh judge times every kernel on poisoned outputs,
    finds the whole matmul's time, and the result is "implausible": never fast."""
    from dataclasses import replace

    from edgekernelbench.harness.api import check_plausible
    from edgekernelbench.harness.job import Job

    honest = judge(HONEST)
    assert honest.correct, honest.detail
    job = Job(
        problem=PROBLEM,
        sample=0,
        backend="host-cpu",
        spec=KernelSpec(problem=PROBLEM, module=module(HONEST), method="attack").to_dict(),
        trials=1,
        timing={"warmup_ms": 5.0, "min_repeat_ms": 2.0, "rounds": 3},
        baselines=["tvm-default"],
    )
    honest.runtime = replace(honest.runtime, median=1e-6)
    honest.plausibility = None
    r = check_plausible(honest, job, Limits(timeout_s=300, memory_mb=4096), PEAK)
    plaus = r.plausibility
    assert plaus.status == "implausible" and plaus.poisoned_seconds >= 0.5 * plaus.bound_s, plaus
    assert metrics.verdict(r, 1.0, "tvm-default") == "implausible"
    assert not metrics.is_fast(r, 0.0, "tvm-default")


def test_an_honest_kernel_is_plausible():
    r = judge(HONEST)
    assert r.correct, r.detail
    assert r.plausibility.status == "plausible", r.plausibility
    assert metrics.verdict(r, 0.0, "tvm-default") in ("fast", "tie", "slow")


def test_an_out_of_bounds_kernel_runs_outside_the_judge():
    """TIR has no bounds checks: a kernel may write past its buffers. It runs in its own process (the
    runner), so the fault kills that process, not the judge, which records it."""
    oob = """
for i, j in T.grid(128, 128):
    matmul[i * 100000 + 400000000, j] = x[i, j]
"""
    spec = KernelSpec(problem=PROBLEM, module=module(oob), method="attack")
    r = evaluate(PROBLEM, spec, trials=1, measure=False, limits=Limits(timeout_s=120, memory_mb=4096))
    assert r.reason == "crash" and "candidate's process died" in r.detail, (r.reason, r.detail)
    assert r.extra.get("runner") == "separate process (forked)" and r.compiled  # the judge lived to say so


# Outputs kept in the kernel's workspace: a scratch buffer too large for the stack comes from TVM's
# workspace pool, which hands the same memory back, uncleared, call after call. This kernel keeps there,
# for each of 4 slots, a fingerprint of the inputs and the output it computed for them; inputs it has seen
# (the timed calls take 3 sets in turn) cost a copy. It never stores into an input or a constant, and every
# output it returns is right. The stateless timing takes its scratch buffers from a pool of its own,
# overwritten before every call, so there it does all its work.
SLOT = 2 + 16384  # used flag, fingerprint, output
WORKSPACE_CACHING = f"""
cache = T.decl_buffer(({4 * SLOT + 1},), "float32")
hit = T.decl_buffer((1,), "int32")
hit[0] = -1
for s in range(4):
    if cache[s * {SLOT}] == T.float32(1) and cache[s * {SLOT} + 1] == x[0, 0] + x[7, 3] * w1[5, 1]:
        hit[0] = s
if hit[0] >= 0:
    for i, j in T.grid(128, 128):
        matmul[i, j] = cache[hit[0] * {SLOT} + 2 + i * 128 + j]
else:
    for i, j in T.grid(128, 128):
        matmul[i, j] = T.float32(0)
        for k in range(128):
            matmul[i, j] = matmul[i, j] + x[i, k] * w1[k, j]
    for s in range(4):
        if s == T.Cast("int32", cache[{4 * SLOT}]) % 4 or (s == 0 and T.isnan(cache[{4 * SLOT}])):
            for i, j in T.grid(128, 128):
                cache[s * {SLOT} + 2 + i * 128 + j] = matmul[i, j]
            cache[s * {SLOT} + 1] = x[0, 0] + x[7, 3] * w1[5, 1]
            cache[s * {SLOT}] = T.float32(1)
    cache[{4 * SLOT}] = T.Cast("float32", (T.Cast("int32", cache[{4 * SLOT}]) + 1) % 4)
"""


@pytest.mark.parametrize("warm", [False, True], ids=["fresh judge", "warm judge"])
def test_a_kernel_that_keeps_outputs_in_its_workspace_is_implausible(warm):
    """Its timed calls cost a copy; the peak given is so high that no bound catches it (this checks the
    stateless timing alone): each kernel alone, on a poisoned workspace, does all its work -- far slower
    than the timed calls beside it -- and the result is implausible, never fast."""
    with warm_judge() if warm else contextlib.nullcontext():
        r = judge(WORKSPACE_CACHING, peak={"flops": 1e14, "bandwidth": 1e14, "levels": []})
    assert r.correct, r.detail  # every output it returns is right
    assert r.stateless.workspace == "ours", r.stateless
    assert r.stateless.ratio > metrics.STATE_FACTOR, r.stateless
    assert r.plausibility.status.startswith("implausible"), r.plausibility
    assert not metrics.is_fast(r, 0.0, "tvm-default")
