"""The harness judges candidates: a correct one passes; each kind of bad one fails with the right reason."""

import numpy as np
import pytest
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from edgekernelbench.backends.registry import as_profile
from edgekernelbench.harness.api import evaluate
from edgekernelbench.harness.isolation import Limits
from edgekernelbench.harness.timing import TimingConfig
from edgekernelbench.ir.spec import KernelSpec

PROBLEM = "L1/tiny_scale_add"
SIG = (
    'x: T.Buffer((4, 8), "float32"), w1: T.Buffer((8,), "float32"), b3: T.Buffer((8,), "float32"), '
    'out: T.Buffer((4, 8), "float32")'
)


def prim(body: str, sig: str = SIG, name: str = "fused_multiply_add") -> str:
    """A candidate module with one PrimFunc that replaces the reference's kernel."""
    lines = "\n".join("        " + ln for ln in body.strip().splitlines())
    return f"@I.ir_module\nclass Module:\n    @T.prim_func(private=True)\n    def {name}({sig}):\n{lines}\n"


CORRECT = prim("""
for i, j in T.grid(4, 8):
    out[i, j] = x[i, j] * w1[j] + b3[j]
""")


def judge(text: str, **kw):
    kw.setdefault("trials", 5)
    kw.setdefault("measure", False)
    kw.setdefault("limits", Limits(timeout_s=60, memory_mb=4096))
    return evaluate(PROBLEM, KernelSpec(problem=PROBLEM, module=text), **kw)


def test_correct_candidate_passes_and_is_timed():
    r = judge(CORRECT, measure=True, timing=TimingConfig.quick())
    assert r.compiled and r.correct, r.detail
    assert r.correctness.trials == 5 and max(r.correctness.max_abs_err) < 1e-5
    assert r.timing_status == "measured" and r.runtime.median > 0
    assert set(r.baselines) == {"tvm-default", "onnxruntime"}
    assert set(r.speedups) == {"tvm-default", "onnxruntime"}
    # the speedup is the median of the per-round ratios, inside its confidence interval
    ort, cand = r.baselines["onnxruntime"].samples, r.runtime.samples
    assert len(ort) == len(cand) == 3
    ratios = sorted(o / c for o, c in zip(ort, cand, strict=True))
    assert r.speedups["onnxruntime"] == pytest.approx(ratios[1])
    lo, hi = r.speedup_ci["onnxruntime"]
    assert lo <= r.speedups["onnxruntime"] <= hi and (lo, hi) == pytest.approx((ratios[0], ratios[2]))
    env = r.timing_env  # pinned to one CPU, with what the rest of the machine did meanwhile
    assert env.pinned_cpu is not None and env.cpus == [env.pinned_cpu]
    assert env.seconds > 0 and isinstance(env.disturbed, bool)
    # the candidate and tvm-default: each in a runner of its own, timed around requests whose fixed cost
    # their rounds amortise, over the timing input sets in turn, some of their calls checked
    from edgekernelbench.harness.timing import MAX_ROUND_MS

    assert r.extra["runner"].startswith("separate process")
    round_ms = r.runtime.number * r.runtime.median * 1e3
    assert env.request_overhead_us >= env.round_trip_us > 0
    assert round_ms >= 0.9 * min(MAX_ROUND_MS, 100 * env.request_overhead_us / 1e3)
    calls = r.extra["timed_calls"]
    assert calls["input_sets"] == 3 and calls["state_checks"] == len(cand) + 1
    where = [c["where"] for c in calls["calls_checked"]]
    assert where[0] == "the first timed call" and where[-1] == "after the last round"
    assert all(c["ok"] for c in calls["calls_checked"]) and isinstance(r.seed, int)
    assert r.correctness.inputs[0] == "typical" and len(r.correctness.inputs) >= 3  # and stress inputs


@pytest.mark.parametrize(
    "name, body, reason",
    [
        ("writes nothing", "T.evaluate(0)", "nan_output"),
        (
            "writes part of the output",
            "for i, j in T.grid(2, 8):\n    out[i, j] = x[i, j] * w1[j] + b3[j]",
            "nan_output",
        ),
        ("returns a constant", "for i, j in T.grid(4, 8):\n    out[i, j] = T.float32(1.0)", "wrong_output"),
        (  # refused by the verifier before it is built (harness/verify.py); the runtime check stays for
            # a write the IR does not show (an index past a buffer's end): test_inputs_and_timing.py
            "mutates an input",
            "for i, j in T.grid(4, 8):\n    out[i, j] = x[i, j] * w1[j] + b3[j]\n    x[i, j] = T.float32(0)",
            "forbidden",
        ),
        (
            "reads the output it should write",
            "for i, j in T.grid(4, 8):\n    out[i, j] = out[i, j] + x[i, j] * w1[j] + b3[j]",
            "nan_output",
        ),
        (
            "off by a tolerance",
            "for i, j in T.grid(4, 8):\n    out[i, j] = x[i, j] * w1[j] + b3[j] + T.float32(0.01)",
            "wrong_output",
        ),
    ],
)
def test_bad_kernel_fails_with_reason(name, body, reason):
    r = judge(prim(body))
    assert r.compiled or reason == "forbidden", r.detail
    assert not r.correct and r.reason == reason, (name, r.reason, r.detail)


def test_wrong_signature_is_a_failure_not_a_crash():
    sig = SIG.replace('out: T.Buffer((4, 8), "float32")', 'out: T.Buffer((4, 9), "float32")')
    r = judge(prim("for i, j in T.grid(4, 8):\n    out[i, j] = x[i, j]", sig=sig))
    assert r.reason == "signature" and "parameter 3" in r.detail


def test_unknown_primfunc_name_is_reported():
    r = judge(CORRECT.replace("fused_multiply_add", "my_kernel"))
    assert r.reason == "parse_error" and "fused_multiply_add" in r.detail


def test_full_module_with_wrong_input_shape():
    text = """@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((4, 9), dtype="float32"), w: R.Tensor((8,), dtype="float32"), b: R.Tensor((8,), dtype="float32")):
        return x
"""
    r = judge(text)
    assert r.reason == "signature" and "input 'x'" in r.detail


def test_full_module_with_high_level_ops_is_accepted():
    text = """@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((4, 8), dtype="float32"), w: R.Tensor((8,), dtype="float32"), b: R.Tensor((8,), dtype="float32")):
        with R.dataflow():
            y = R.add(R.multiply(x, w), b)
            R.output(y)
        return y
"""
    r = judge(text, trials=2)
    assert r.correct, r.detail


def test_malformed_tvmscript_is_a_parse_error():
    r = judge("@I.ir_module\nclass Module:\n    def broken(:\n")
    assert r.reason == "parse_error" and not r.compiled


def test_compile_error_keeps_the_compiler_text():
    r = judge(prim("for i, j in T.grid(4, 8):\n    out[i, j] = x[i, j, 0]"))
    assert r.reason in ("parse_error", "compile_error") and r.detail


def test_crash_is_recorded():
    r = judge(prim("for i, j in T.grid(4, 8):\n    out[i * 1000000 + 200000000, j] = x[i, j]"))
    assert r.reason == "crash" and not r.correct, (r.reason, r.detail)


@pytest.mark.fresh_workers  # the limits of a fresh worker (a warm judge's children: test_warm_judge.py)
def test_hang_is_killed_at_the_timeout():
    body = "for k in range(100000000000):\n    out[k % 4, k % 8] = out[k % 4, k % 8] * T.float32(1.0001) + x[0, 0]"
    # killed in whichever phase the limit comes (building, loading, the hang): its reason is the timeout
    r = judge(prim(body), trials=1, limits=Limits(timeout_s=6, memory_mb=4096))
    assert r.reason == "timeout"


@pytest.mark.fresh_workers  # the limits of a fresh worker (a warm judge's children: test_warm_judge.py)
def test_unbounded_allocation_is_a_memory_failure():
    body = """buf = T.alloc_buffer((8000000000,), "float32")
for k in range(8000000000):
    buf[k] = x[0, 0]
for i, j in T.grid(4, 8):
    out[i, j] = buf[i * 8 + j]"""
    r = judge(prim(body), trials=1, limits=Limits(timeout_s=60, memory_mb=3072))
    assert r.reason == "memory", (r.reason, r.detail)


@pytest.mark.fresh_workers  # the limits of a fresh worker (a warm judge's children: test_warm_judge.py)
def test_resident_memory_limit_where_the_address_space_is_not_limited():
    """Local-GPU workers have no RLIMIT_AS (GPU runtimes reserve huge address ranges): the parent kills
    a worker whose resident memory passes the limit."""
    body = """buf = T.alloc_buffer((1000000000,), "float32")
for k in range(1000000000):
    buf[k] = x[0, 0]
for i, j in T.grid(4, 8):
    out[i, j] = buf[i * 8 + j]"""
    limits = Limits(timeout_s=60, memory_mb=2048, address_space=False)
    r = judge(prim(body), trials=1, limits=limits)
    assert r.reason == "memory" and "resident" in r.detail, (r.reason, r.detail)


def test_worker_gets_no_secrets(monkeypatch):
    from edgekernelbench.harness.isolation import worker_env

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "secret2")
    env = worker_env(1, "/tmp")
    assert (
        "sk-test-secret" not in env.values()
        and "OPENAI_API_KEY" not in env
        and "ANTHROPIC_API_KEY" not in env
    )
    assert env["TVM_NUM_THREADS"] == "1"


@pytest.mark.fresh_workers  # the limits of a fresh worker (a warm judge's children: test_warm_judge.py)
def test_a_worker_dies_with_the_process_that_started_it(tmp_path):
    """A worker has its own session (so a hang can be killed as a group) but must not outlive its
    parent: kill the parent with SIGKILL while its worker hangs; the worker goes too."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    body = "for k in range(100000000000):\n    out[k % 4, k % 8] = out[k % 4, k % 8] * T.float32(1.0001) + x[0, 0]"
    (tmp_path / "cand.py").write_text(prim(body))
    code = (
        "from pathlib import Path\n"
        "from edgekernelbench.harness.api import evaluate\n"
        "from edgekernelbench.harness.isolation import Limits\n"
        f"evaluate({PROBLEM!r}, Path({str(tmp_path / 'cand.py')!r}), trials=1, measure=False,\n"
        "         limits=Limits(timeout_s=600))\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code])
    worker = None
    try:
        deadline = time.time() + 60
        while worker is None and time.time() < deadline:
            kids = psutil.Process(parent.pid).children(recursive=True)
            worker = next(
                (p for p in kids if "edgekernelbench.harness.worker" in " ".join(p.cmdline())), None
            )
            time.sleep(0.2)
        assert worker is not None, "the worker did not start"
        time.sleep(2)  # well into the candidate's hang
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        worker.wait(timeout=15)  # raises psutil.TimeoutExpired if it outlives its parent
    finally:
        if parent.poll() is None:
            parent.kill()
        if worker is not None and worker.is_running():
            worker.kill()  # when the test fails: no orphan left hanging


def test_the_host_backend_compiles_the_kernels_once():
    """The kernels the judge runs one by one are looked up in the library the graph's VM runs (one build,
    one code generation); a remote device's builder still makes the kernel library of its own it ships."""
    from edgekernelbench.backends.host import LocalBackend
    from edgekernelbench.backends.registry import as_profile
    from edgekernelbench.backends.rpc import RPCBackend
    from edgekernelbench.harness.runner import Runner
    from edgekernelbench.problems import get_problem
    from edgekernelbench.reference import build_reference

    problem = get_problem("L1/tiny_scale_add")
    ref = build_reference(problem)
    backend = LocalBackend(as_profile("host-cpu", 1))
    built = backend.build(ref.module)
    assert built.kernels.mod.kind == "llvm" and built.kernels.mod.same_as(built.graph.mod.imports[0])
    runner = Runner(ref.module, built, backend.session(), ref)
    inputs = problem.sample_inputs(0)
    assert all(
        np.array_equal(a, b) for a, b in zip(runner.run_kernels(inputs), runner.run_vm(inputs), strict=True)
    )
    remote = RPCBackend(as_profile("host-cpu", 1), tracker="127.0.0.1:1")._builder.build(ref.module)
    assert not remote.kernels.mod.same_as(remote.graph.mod.imports[0])  # its own library, its own file


@pytest.mark.parametrize("loop", ["c", "python"])
def test_timed_calls_take_the_input_sets_in_turn_and_make_exactly_the_calls_they_count(loop):
    """The runner's timed calls (backends/call_loop.py) take the bound input sets in turn, continuing from
    one request to the next, and make exactly the calls they count, in C and in Python (a kernel that
    counts its calls in its input says so: each set's counter)."""
    import tvm

    from edgekernelbench.backends.call_loop import resolve_library
    from edgekernelbench.backends.host import LocalBackend, LocalLoaded

    lib, why = resolve_library() if loop == "c" else (None, "asked for")
    if loop == "c" and lib is None:
        pytest.skip(f"no C call loop here: {why}")
    loaded = LocalLoaded(LocalBackend(as_profile("host-cpu", 1)).build(Count), tvm.cpu())
    counters = [tvm.runtime.tensor(np.zeros(1, "int32")) for _ in range(3)]
    caller = loaded.rotating("main", [[c] for c in counters], lib, why)
    assert caller.how.startswith(f"{loop} loop")
    caller.run(7)  # sets 0 1 2 0 1 2 0
    caller.run(1)  # set 1
    assert caller.call_next().numpy()[0] == 3  # set 2, its third call
    assert [int(c.numpy()[0]) for c in counters] == [3, 3, 3] and caller.calls == 9
    assert caller.next_set == 0


@I.ir_module
class Count:
    """main(c) calls a kernel that adds one to c[0] (its input) on every call."""

    @T.prim_func
    def inc(c: T.Buffer((1,), "int32"), out: T.Buffer((1,), "int32")):
        c[0] = c[0] + 1
        out[0] = c[0]

    @R.function
    def main(c: R.Tensor((1,), "int32")) -> R.Tensor((1,), "int32"):
        cls = Count
        y = R.call_tir(cls.inc, (c,), out_ty=R.Tensor((1,), "int32"))
        return y


def test_a_profile_of_named_kernels_times_only_the_candidates_calls_of_them():
    """profile=True: every kernel call of the candidate and of tvm-default; profile=[names]: only the
    candidate's calls of those kernels (what a search comparing one kernel's versions reads), one timed per
    kernel and the others counted (profile_rows: the time per run of main in that kernel)."""
    from edgekernelbench.agents.episode import profile_rows
    from edgekernelbench.problems import get_problem
    from edgekernelbench.search.rules import rule_spec

    pid = "L1/tiny_matmulint_i8_u8w"  # two kernels: the zero-point subtraction, the matmul
    spec = rule_spec(get_problem(pid))
    kw = {"trials": 1, "timing": TimingConfig.quick(), "baselines": ("tvm-default",)}
    full = evaluate(pid, spec, profile=True, **kw)
    assert full.correct, full.detail
    assert {k.kernel for k in full.kernels} == {"fused_cast_subtract", "matmul"}
    assert full.baseline_kernels["tvm-default"]
    one = evaluate(pid, spec, profile=["matmul"], **kw)
    assert [k.kernel for k in one.kernels] == ["matmul"] and one.kernels[0].median > 0
    assert "tvm-default" not in one.baseline_kernels
    # a kernel main calls twice: every call in a full profile; named, its first call timed and both counted
    pid = "L1/tiny_matmul_twice"
    spec = rule_spec(get_problem(pid))
    full = evaluate(pid, spec, profile=True, **kw)
    assert [(k.kernel, k.calls) for k in full.kernels] == [("matmul", 1), ("matmul", 1)]
    one = evaluate(pid, spec, profile=["matmul"], **kw)
    assert [(k.kernel, k.calls, k.share) for k in one.kernels] == [("matmul", 2, 1.0)]
    (row,) = profile_rows(one)
    # where the judgment's time went: the judge's phases, and what the parent waited for
    assert {"module", "verify", "correctness", "timing", "profile"} <= set(one.extra["phases"])
    assert set(one.extra["parent_phases"]) == {"started", "builder", "judge_after_builder"}
    assert row.calls == 2 and abs(row.us - 2e6 * one.kernels[0].median) < 1e-9


@pytest.mark.parametrize(
    "text", ["", "not json", '{"root": 1, "nodes": [{"type": "no.SuchNode"}]}', '{"nodes": [], "root": 7}']
)
def test_the_judge_loads_its_module_as_data_and_refuses_what_does_not_load(tmp_path, monkeypatch, text):
    """The judge reads the builder's module.json with tvm_ffi's JSON graph reader (tvm_env.load_json): a
    module TVM wrote comes back equal, node for node; bytes a candidate's Python wrote there instead are a
    MalformedCandidate (the candidate's parse error), never an exception that escapes the judge."""
    import io

    import tvm

    from edgekernelbench.errors import MalformedCandidate
    from edgekernelbench.harness.worker import module_from_parent
    from edgekernelbench.problems import get_problem
    from edgekernelbench.reference import build_reference
    from edgekernelbench.tvm_env import load_json

    mod = build_reference(get_problem("L1/tiny_conv3x3")).module
    saved = tvm.ir.save_json(mod)
    assert tvm.ir.save_json(load_json(saved)) == saved
    tvm.ir.assert_structural_equal(load_json(saved), mod)
    (tmp_path / "module.json").write_text(text)
    monkeypatch.setattr("sys.stdin", io.StringIO("module.json\n"))
    with pytest.raises(MalformedCandidate, match="does not load"):
        module_from_parent(tmp_path)()
