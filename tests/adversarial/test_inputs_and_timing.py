"""Attacks on what the judge feeds a candidate, what it times and what a module may keep between calls.

Each attack is a candidate written to cheat one rule; each got through the judge before (issue 47):
- predictable inputs: it carries the expected outputs of the inputs a public seed gives;
- tame inputs: a softmax without the max subtraction, right on N(0, 2^2) logits, NaN on large ones;
- unchecked timed calls: it keeps a call counter in a pooled buffer and does a quarter of its work from
  the 40th call on (the correctness trials are far fewer calls);
- state in a constant: a counter kept in a Relax constant (the executable's own storage);
- the judge's own process: with --threads 2 the candidate ran inside the judge.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgekernelbench.harness.api import evaluate
from edgekernelbench.harness.inputs import InputPlan
from edgekernelbench.harness.isolation import Limits
from edgekernelbench.harness.timing import TimingConfig
from edgekernelbench.ir.spec import KernelSpec
from edgekernelbench.oracle import Oracle
from edgekernelbench.problems import get_problem

LIMITS = Limits(timeout_s=300, memory_mb=4096)
QUICK = TimingConfig(warmup_ms=5, min_repeat_ms=2, rounds=5)
SCALE_ADD = "L1/tiny_scale_add"
SIG = (
    'x: T.Buffer((4, 8), "float32"), w1: T.Buffer((8,), "float32"), b3: T.Buffer((8,), "float32"), '
    'out: T.Buffer((4, 8), "float32")'
)


def judge(problem: str, module: str, **kw):
    kw.setdefault("trials", 5)
    kw.setdefault("limits", LIMITS)
    kw.setdefault("baselines", ("tvm-default",))
    return evaluate(problem, KernelSpec(problem=problem, module=module, method="attack"), **kw)


def primfunc_module(name: str, sig: str, body: str) -> str:
    lines = "\n".join("        " + ln for ln in body.strip().splitlines())
    return f"@I.ir_module\nclass Module:\n    @T.prim_func(private=True)\n    def {name}({sig}):\n{lines}\n"


def f32(v) -> str:
    return f"T.float32({float(np.float32(v))!r})"


# ------------------------------------------------------------------------------------------ inputs
def lookup_table_attack(seed: int) -> str:
    """A kernel that returns, for each input set the judge draws from `seed` (its trials and its timing
    sets), the oracle's outputs, recognised by x[0, 0]; zeros for any other input. No arithmetic at all."""
    problem = get_problem(SCALE_ADD)
    plan = InputPlan(problem, seed, trials=5, timing_sets=TimingConfig().input_sets)
    oracle = Oracle(problem)
    body = []
    for inputs in [t.inputs for t in plan.trials()] + plan.timing_sets():
        (want,) = oracle.run(inputs)
        body.append(f"if x[0, 0] == {f32(inputs['x'][0, 0])}:")
        body += [f"    out[{i}, {j}] = {f32(want[i, j])}" for i in range(4) for j in range(8)]
    body.append("for i, j in T.grid(4, 8):")
    body.append("    if T.isnan(out[i, j]):  # untouched (the judge's sentinel): zero")
    body.append("        out[i, j] = T.float32(0)")
    return primfunc_module("fused_multiply_add", SIG, "\n".join(body))


def test_expected_outputs_for_a_known_seed_pass_only_when_the_judge_uses_that_seed():
    attack = lookup_table_attack(seed=0)
    replayed = judge(SCALE_ADD, attack, measure=False, seed=0)  # the seed the table was made for
    assert replayed.correct and replayed.seed == 0, replayed.detail  # so the table is right for it
    fresh = judge(SCALE_ADD, attack, measure=False)  # the judge's own seed, drawn after the candidate
    assert not fresh.correct and fresh.reason == "wrong_output", fresh.detail
    assert fresh.seed not in (None, 0) and fresh.correctness.first_failing_trial == 0


def test_a_seed_replays_a_judgment_exactly():
    honest = primfunc_module(
        "fused_multiply_add", SIG, "for i, j in T.grid(4, 8):\n    out[i, j] = x[i, j] * w1[j] + b3[j]"
    )
    first = judge(SCALE_ADD, honest, measure=False)
    again = judge(SCALE_ADD, honest, measure=False, seed=first.seed)
    assert first.correct and again.seed == first.seed
    assert again.correctness.inputs == first.correctness.inputs
    assert again.correctness.max_abs_err == first.correctness.max_abs_err


NAIVE_SOFTMAX = """
total = T.decl_buffer((4,), "float32")
for i in range(4):
    total[i] = T.float32(0)
    for k in range(16):
        total[i] = total[i] + T.exp(x[i, k])
    for k in range(16):
        T_softmax_norm[i, k] = T.exp(x[i, k]) / total[i]
"""
SOFTMAX_SIG = 'x: T.Buffer((4, 16), "float32"), T_softmax_norm: T.Buffer((4, 16), "float32")'


def test_a_softmax_without_the_max_subtraction_fails_on_large_logits():
    r = judge("L1/tiny_softmax", primfunc_module("softmax", SOFTMAX_SIG, NAIVE_SOFTMAX), measure=False)
    assert not r.correct and r.reason in ("nan_output", "wrong_output"), r.detail
    assert "(large inputs)" in r.detail, r.detail  # right on the typical trial, wrong on the large one
    assert r.correctness.inputs[0] == "typical"


def test_every_judgment_probes_its_problems_stress_distributions():
    from edgekernelbench.harness.inputs import stress_kinds

    honest = primfunc_module(
        "fused_multiply_add", SIG, "for i, j in T.grid(4, 8):\n    out[i, j] = x[i, j] * w1[j] + b3[j]"
    )
    r = judge(SCALE_ADD, honest, measure=False, trials=2)  # fewer trials asked than stress kinds
    kinds = stress_kinds(get_problem(SCALE_ADD).inputs)
    assert r.correct and set(kinds) <= set(r.correctness.inputs) and "large" in kinds, r.correctness


# ------------------------------------------------------------------------------------------ timed calls
COUNTER_MODULE = """
@I.ir_module
class Module:
    @T.prim_func(private=True)
    def count(x: T.Buffer((4, 8), "float32"), n: T.Buffer((2048,), "int32")):
        # n is a fresh intermediate on every call, but the VM's pool hands back the same memory: what the
        # last call left there. Without its mark (a sentinel, or memory never used): start again.
        if n[1] != 1592594996:
            n[0] = 0
            n[1] = 1592594996
        n[0] = n[0] + 1

    @T.prim_func(private=True)
    def fused_multiply_add(x: T.Buffer((4, 8), "float32"), w1: T.Buffer((8,), "float32"),
                           b3: T.Buffer((8,), "float32"), n: T.Buffer((2048,), "int32"),
                           out: T.Buffer((4, 8), "float32")):
        for i, j in T.grid(4, 8):
            if n[0] < 40 or i == 0:  # from the 40th call on: a quarter of the work
                out[i, j] = x[i, j] * w1[j] + b3[j]

    @R.function
    def main(x: R.Tensor((4, 8), "float32"), w1: R.Tensor((8,), "float32"), b3: R.Tensor((8,), "float32")):
        cls = Module
        with R.dataflow():
            n = R.call_tir(cls.count, (x,), out_ty=R.Tensor((2048,), "int32"))
            y = R.call_tir(cls.fused_multiply_add, (x, w1, b3, n), out_ty=R.Tensor((4, 8), "float32"))
            R.output(y)
        return y
"""


def test_a_kernel_that_changes_behaviour_after_some_calls_fails_a_checked_timed_call():
    r = judge(SCALE_ADD, COUNTER_MODULE, timing=QUICK)
    assert r.correctness is not None and r.correctness.correct, r.correctness  # few calls: all computed
    assert not r.correct and r.reason in ("wrong_output", "nan_output"), (r.reason, r.detail)
    assert "a timed call (" in r.detail, r.detail
    checked = r.extra["timed_calls"]["calls_checked"]
    assert checked and not checked[-1]["ok"]


CONSTANT_COUNTER = """
@I.ir_module
class Module:
    @T.prim_func(private=True)
    def fused_multiply_add(x: T.Buffer((4, 8), "float32"), w1: T.Buffer((8,), "float32"),
                           b3: T.Buffer((8,), "float32"), n: T.Buffer((1,), "int32"),
                           out: T.Buffer((4, 8), "float32")):
        n[0] = n[0] + 1
        for i, j in T.grid(4, 8):
            if n[0] < 40 or i == 0:
                out[i, j] = x[i, j] * w1[j] + b3[j]

    @R.function
    def main(x: R.Tensor((4, 8), "float32"), w1: R.Tensor((8,), "float32"), b3: R.Tensor((8,), "float32")):
        cls = Module
        with R.dataflow():
            y = R.call_tir(cls.fused_multiply_add, (x, w1, b3, R.const([0], "int32")),
                           out_ty=R.Tensor((4, 8), "float32"))
            R.output(y)
        return y
"""


def test_a_counter_kept_in_a_constant_is_refused_before_it_runs():
    r = judge(SCALE_ADD, CONSTANT_COUNTER, timing=QUICK)
    assert r.reason == "forbidden" and "stores into its input #3" in r.detail, r.detail
    assert not r.compiled


def test_the_runner_finds_a_constant_changed_between_timed_calls():
    """Past the verifier (an index past a buffer's end is not ruled out from the IR): the runner compares
    what main owns -- constants, weights, bound inputs -- after every round."""
    import tvm

    from edgekernelbench.backends.registry import backend_for, get_profile
    from edgekernelbench.executor import KernelFault
    from edgekernelbench.harness.runner import _Served
    from edgekernelbench.ir.replay import parse_module
    from edgekernelbench.reference import build_reference

    problem = get_problem(SCALE_ADD)
    reference = build_reference(problem)
    backend = backend_for(get_profile("host-cpu"))
    served = _Served(backend, backend.session(), reference)
    assert served.load({"module": tvm.ir.save_json(parse_module(CONSTANT_COUNTER))})["ok"]
    sets = [problem.sample_inputs(k) for k in range(3)]
    names = list(sets[0])
    served.bind({"names": names, "sets": 3}, [s[n] for s in sets for n in names])
    served.time({"number": 5})
    with pytest.raises(KernelFault, match="constant #0 of main changed"):
        served.state()


# ------------------------------------------------------------------------------------------ processes
def test_with_two_threads_the_candidate_still_runs_in_its_own_process():
    honest = primfunc_module(
        "fused_multiply_add", SIG, "for i, j in T.grid(4, 8):\n    out[i, j] = x[i, j] * w1[j] + b3[j]"
    )
    r = judge(SCALE_ADD, honest, threads=2, timing=QUICK)
    assert r.correct, r.detail
    assert r.extra["runner"].startswith("separate process"), r.extra["runner"]


def test_a_judge_with_threads_spawns_its_runner_instead_of_running_the_candidate():
    """A process with threads cannot fork safely; the runner is then a fresh process, never the judge."""
    import threading

    from edgekernelbench.backends.registry import backend_for, get_profile
    from edgekernelbench.harness.runner import start_runner
    from edgekernelbench.reference import build_reference

    problem = get_problem(SCALE_ADD)
    reference = build_reference(problem)
    backend = backend_for(get_profile("host-cpu"))
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        spawn = {
            "problem": SCALE_ADD,
            "graph_dir": "",
            "backend_profile": backend.profile.to_dict(),
            "threads": 1,
        }
        proxy, how = start_runner(backend, backend.session(), reference, None, spawn)
    finally:
        stop.set()
        thread.join()
    try:
        assert how.startswith("separate process (spawned: the judge has"), how
        import os

        assert proxy.pid != os.getpid()
        proxy.load_baseline("tvm-default")
        inputs = problem.sample_inputs(1)
        (got,) = proxy.run_vm(inputs)
        (want,) = Oracle(problem).run(inputs)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    finally:
        proxy.close()


# ------------------------------------------------------------------------------------------ reuse
def output_cache_attack(n: int = 128, slots: int = 4, pad: int = 0) -> str:
    """A matmul that keeps its outputs for the last `slots` inputs (keyed by 8 of their elements) in a
    pooled intermediate -- an unused second output of its kernel, whose memory the VM's pool hands back on
    every call -- and copies the cached output on a hit (after `pad` dummy steps, to look slower). Every
    output it returns is right; the checked calls see right outputs; none of main's constants, weights or
    inputs changes. Found by the red team of 2026-12-07 (32x-111x over tvm-default, "plausible")."""
    fp = [((f * 37 + 5) % n, (f * 53 + 11) % n) for f in range(8)]
    slot = 1 + len(fp) + n * n
    size = 2 + slots * slot
    match = "\n".join(
        f"                if cache[2 + s * {slot} + {1 + f}] != x[{i}, {j}]:\n                    ok[0] = 0"
        for f, (i, j) in enumerate(fp)
    )
    keep = "\n".join(
        f"                    cache[2 + s * {slot} + {1 + f}] = x[{i}, {j}]" for f, (i, j) in enumerate(fp)
    )
    return f"""
@I.ir_module
class Module:
    @T.prim_func(private=True)
    def matmul_cached(x: T.Buffer(({n}, {n}), "float32"), w1: T.Buffer(({n}, {n}), "float32"),
                      cache: T.Buffer(({size},), "float32"), out: T.Buffer(({n}, {n}), "float32")):
        hit = T.decl_buffer((1,), "int32")
        ok = T.decl_buffer((1,), "int32")
        acc = T.decl_buffer((1,), "float32")
        hit[0] = -1
        if cache[0] == T.float32(12345.5):
            for s in range({slots}):
                ok[0] = 1
                if cache[2 + s * {slot}] != T.float32(1):
                    ok[0] = 0
{match}
                if ok[0] == 1 and hit[0] < 0:
                    hit[0] = s
        else:
            cache[0] = T.float32(12345.5)
            cache[1] = T.float32(0)
            for s in range({slots}):
                cache[2 + s * {slot}] = T.float32(0)
        if hit[0] >= 0:
            acc[0] = T.float32(0)
            for p in range({pad}):
                acc[0] = acc[0] * T.float32(0.5) + T.float32(1)
            for i, j in T.grid({n}, {n}):
                out[i, j] = cache[2 + hit[0] * {slot} + {1 + len(fp)} + i * {n} + j] + T.min(acc[0], T.float32(0))
        else:
            for i, j in T.grid({n}, {n}):
                out[i, j] = T.float32(0)
                for k in range({n}):
                    out[i, j] = out[i, j] + x[i, k] * w1[k, j]
            for s in range({slots}):
                if s == T.Cast("int32", cache[1]):
                    cache[2 + s * {slot}] = T.float32(1)
{keep}
                    for i, j in T.grid({n}, {n}):
                        cache[2 + s * {slot} + {1 + len(fp)} + i * {n} + j] = out[i, j]
            cache[1] = T.Cast("float32", T.truncmod(T.Cast("int32", cache[1]) + 1, {slots}))

    @R.function
    def main(x: R.Tensor(({n}, {n}), "float32"), w1: R.Tensor(({n}, {n}), "float32")):
        cls = Module
        with R.dataflow():
            lv = R.call_tir(cls.matmul_cached, (x, w1),
                            out_ty=[R.Tensor(({size},), "float32"), R.Tensor(({n}, {n}), "float32")])
            gv = lv[1]
            R.output(gv)
        return gv
"""


@pytest.mark.parametrize("pad", [0, 20000])
def test_outputs_kept_in_pooled_memory_are_found_by_the_stateless_timing(pad):
    from edgekernelbench import metrics

    r = judge("L1/tiny_matmul_128", output_cache_attack(pad=pad), timing=QUICK)
    assert r.correct, r.detail  # right outputs, every one of them
    plaus = r.plausibility
    assert plaus.status == "implausible" and plaus.stateless_ratio > metrics.STATE_FACTOR, plaus
    assert "reuses what earlier calls left in memory" in plaus.reason
    assert metrics.verdict(r, 0.0, "tvm-default") == "implausible" and not metrics.is_fast(
        r, 0.0, "tvm-default"
    )


def test_an_honest_kernels_stateless_timing_agrees_with_its_timed_calls():
    honest = primfunc_module(
        "matmul",
        'x: T.Buffer((128, 128), "float32"), w1: T.Buffer((128, 128), "float32"), '
        'matmul: T.Buffer((128, 128), "float32")',
        "for i, j in T.grid(128, 128):\n    matmul[i, j] = T.float32(0)\n    for k in range(128):\n"
        "        matmul[i, j] = matmul[i, j] + x[i, k] * w1[k, j]",
    )
    r = judge("L1/tiny_matmul_128", honest, timing=QUICK)
    assert r.correct and r.plausibility.status == "plausible", r.plausibility
    assert r.stateless.kernels[0].kernel == "matmul"
