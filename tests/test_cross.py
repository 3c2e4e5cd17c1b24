"""Cross-compiled profiles (kind "cross"): TVM builds for every one, and candidates are judged under qemu-user
with the host's harness (Correct@k against ONNX Runtime; emulated timings are never reported as speed).

`make test` installs the toolchains as root (`make toolchains`); elsewhere these tests skip, naming the
missing tool."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest
from test_harness import PROBLEM as TINY
from test_harness import prim

from edgekernelbench.backends.base import BackendProfile
from edgekernelbench.backends.cross import CrossBackend, EmulatedRunError, kernel_symbol
from edgekernelbench.backends.registry import get_backend, get_profile
from edgekernelbench.errors import ToolchainMissing
from edgekernelbench.harness.api import evaluate
from edgekernelbench.harness.isolation import Limits
from edgekernelbench.ir.spec import KernelSpec
from edgekernelbench.problems import get_problem
from edgekernelbench.reference import build_reference
from edgekernelbench.search.rules import rule_spec

CROSS = ["rpi4", "rpi5", "jetson-orin-cpu", "armv7", "riscv64-rvv"]
BUILD_PROBLEM = "L1/dense_ae_128x128"
# (problem, threads): float depthwise conv, float dense, and an int8 MatMulInteger whose rule-based
# schedule has `parallel` loops with 2 threads (the driver runs 2 tasks per parallel launch)
JUDGED = [("L1/dwconv3x3_kws", 1), ("L1/dense_ae_128x128", 1), ("L1/convint_vww_pw_32x64", 2)]
LIMITS = Limits(timeout_s=240, memory_mb=6144)


def _require(name: str, emulate: bool = True) -> None:
    p = get_profile(name)
    tools = [p.cross_compiler] + ([p.emulator[0]] if emulate else [])
    missing = [t for t in tools if not shutil.which(t)]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (run `make toolchains` as root)")


@pytest.fixture(scope="module")
def reference():
    return build_reference(get_problem(BUILD_PROBLEM))


@pytest.mark.parametrize("name", CROSS)
def test_every_cross_profile_builds(name, reference):
    _require(name, emulate=False)
    backend = get_backend(name)
    assert isinstance(backend, CrossBackend)
    built = backend.build(reference.module)
    kernels = {gv.name_hint for gv, f in reference.module.functions.items() if "PrimFunc" in type(f).__name__}
    assert set(built.kernel_names) == kernels
    for k in kernels:
        assert built.symbols.get(kernel_symbol(k)) == "T", (k, built.symbols)
    assert built.driver.is_file() and built.object_file.is_file()
    assert backend.target().attrs["mtriple"] == get_profile(name).target["mtriple"]


@pytest.fixture(scope="module")
def rule_specs():
    return {
        (pid, threads): rule_spec(get_problem(pid), vector_lanes=4, threads=threads)
        for pid, threads in JUDGED
    }


@pytest.mark.parametrize("backend", ["rpi4", "riscv64-rvv"])
@pytest.mark.parametrize("pid, threads", JUDGED)
def test_rule_candidates_are_correct_under_qemu(backend, pid, threads, rule_specs):
    _require(backend)
    spec = rule_specs[(pid, threads)]
    if threads > 1:
        assert "Parallel" in str(spec.to_dict()), "expected a parallel schedule"
    r = evaluate(pid, spec, backend=backend, threads=threads, trials=2, limits=LIMITS)
    assert r.compiled and r.correct, (r.reason, r.detail)
    assert r.correctness.trials == len(r.correctness.inputs) >= 2  # typical, then every stress kind
    assert r.timing_status == "not measured" and r.runtime is None and not r.baselines and not r.speedups
    # the record says how it ran: a parallel launch of a multi-threaded candidate used `threads` OS threads
    emu = r.extra["emulation"]
    assert emu["threads"] == emu["threads_requested"] == threads, emu
    assert emu["calls"] > 0 and emu["emulator"] == get_profile(backend).emulator[0], emu
    if threads > 1:
        assert emu["parallel_launches"] > 0 and emu["parallel_tasks"] == threads * emu["parallel_launches"]
        assert emu["summary"] == f"{threads} threads, pthreads under {emu['emulator']}", emu
    elif emu["parallel_launches"] == 0:
        assert emu["summary"] == f"no parallel launch (1 thread) under {emu['emulator']}", emu


def test_armv7_correct_under_qemu_arm(rule_specs):
    _require("armv7")
    pid = "L1/dense_ae_128x128"
    r = evaluate(pid, rule_specs[(pid, 1)], backend="armv7", trials=2, limits=LIMITS)
    assert r.correct and r.timing_status == "not measured", (r.reason, r.detail)


def _judge_tiny(body: str, backend: str = "rpi4"):
    spec = KernelSpec(problem=TINY, module=prim(body))
    return evaluate(TINY, spec, backend=backend, trials=2, limits=LIMITS)


def test_kernel_that_writes_nothing_fails_under_qemu():
    _require("rpi4")
    r = _judge_tiny("T.evaluate(0)")
    assert r.compiled and not r.correct and r.reason == "nan_output", (r.reason, r.detail)


def test_kernel_that_crashes_in_qemu_is_a_runtime_error():
    _require("rpi4")
    r = _judge_tiny("for i, j in T.grid(4, 8):\n    out[i * 1000000 + 200000000, j] = x[i, j]")
    assert r.reason == "runtime_error" and "qemu-aarch64" in r.detail and "signal" in r.detail, r.detail


# A parallel loop (workspace + parallel launch) and a parallel barrier: every task must have written
# `tmp` before any task reads a neighbour's element.
PARALLEL_KERNELS = """
@I.ir_module
class Module:
    @T.prim_func
    def par(A: T.Buffer((1000, 64), "float32"), B: T.Buffer((1000, 64), "float32")):
        tmp = T.alloc_buffer((64000,), "float32")
        for i in T.parallel(1000):
            for j in range(64):
                tmp[i * 64 + j] = A[i, j] * T.float32(2)
                B[i, j] = tmp[i * 64 + j] + T.float32(1)

    @T.prim_func
    def bar(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
        tmp = T.alloc_buffer((4,), "float32")
        with T.attr(0, "pragma_parallel_launch_point", 1):
            with T.attr(0, "pragma_parallel_barrier_when_finish", 1):
                for i in T.parallel(4):
                    tmp[i] = A[i] * T.float32(2)
            for i in T.parallel(4):
                B[i] = tmp[(i + 1) % 4]
"""


@pytest.mark.parametrize("name", ["rpi4", "riscv64-rvv"])
def test_driver_runs_parallel_launch_and_barrier(name):
    _require(name)
    import tvm

    mod = tvm.script.from_source(PARALLEL_KERNELS)
    backend = CrossBackend(dataclasses.replace(get_profile(name), threads=4))
    built = backend.build(mod)
    assert "__TVMBackendParallelBarrier" in built.symbols
    loaded = backend.session().load(built)
    a = np.random.default_rng(0).random((1000, 64), dtype=np.float32)
    out = tvm.runtime.tensor(np.full((1000, 64), np.nan, np.float32))
    loaded.kernels["par"](tvm.runtime.tensor(a), out)
    np.testing.assert_array_equal(out.numpy(), a * 2 + 1)
    assert loaded.kernels["par"].last_run == {"launches": 1, "tasks": 4, "barriers": 0, "threads": 4}
    a = np.arange(4, dtype=np.float32)
    out = tvm.runtime.tensor(np.full(4, np.nan, np.float32))
    loaded.kernels["bar"](tvm.runtime.tensor(a), out)
    np.testing.assert_array_equal(out.numpy(), np.roll(a * 2, -1))
    assert loaded.kernels["bar"].last_run == {"launches": 1, "tasks": 4, "barriers": 1, "threads": 4}
    with pytest.raises(Exception, match="emulated"):
        loaded.timer("main", [])


# Each task of one launch stores the id of the OS thread it runs on (gettid, from the static glibc), all
# tasks meet at a barrier, then each reads its neighbour's id. Four distinct ids that every task saw
# across the barrier mean four OS threads were running tasks at the same time: a driver that runs the
# tasks one after the other (in one thread, or in threads started one after the other) cannot produce
# that -- it gives one id, or deadlocks at the barrier. `check` raises in the task of element 3, which is
# not the calling thread's.
CONCURRENT_KERNELS = """
@I.ir_module
class Module:
    @T.prim_func
    def tids(B: T.Buffer((4,), "int32")):
        tmp = T.alloc_buffer((4,), "int32")
        with T.attr(0, "pragma_parallel_launch_point", 1):
            with T.attr(0, "pragma_parallel_barrier_when_finish", 1):
                for i in T.parallel(4):
                    tmp[i] = T.call_extern("int32", "gettid")
            for i in T.parallel(4):
                B[i] = tmp[(i + 1) % 4]

    @T.prim_func
    def check(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
        for i in T.parallel(4):
            assert A[i] < T.float32(100), "value too big"
            B[i] = A[i]
"""


@pytest.mark.parametrize("name", ["rpi4", "armv7", "riscv64-rvv"])
def test_parallel_tasks_run_concurrently_on_os_threads(name):
    _require(name)
    import tvm

    backend = CrossBackend(dataclasses.replace(get_profile(name), threads=4))
    session = backend.session()
    loaded = session.load(backend.build(tvm.script.from_source(CONCURRENT_KERNELS)))
    out = tvm.runtime.tensor(np.zeros(4, np.int32))
    loaded.kernels["tids"](out)
    tids = out.numpy()
    assert len(set(tids.tolist())) == 4 and (tids > 0).all(), tids
    assert loaded.kernels["tids"].last_run == {"launches": 1, "tasks": 4, "barriers": 1, "threads": 4}
    emu = session.describe()["emulation"]
    qemu = get_profile(name).emulator[0]
    assert emu["threads"] == emu["threads_requested"] == 4 and emu["calls"] == 1, emu
    assert emu["summary"] == f"4 threads, pthreads under {qemu}"
    # an error raised in another thread's task ends the run with the kernel's message (exit code 4)
    a = tvm.runtime.tensor(np.array([1, 2, 3, 400], np.float32))
    with pytest.raises(EmulatedRunError, match=r"\(exit code 4\): .*RuntimeError: value too big"):
        loaded.kernels["check"](a, tvm.runtime.tensor(np.zeros(4, np.float32)))


def test_kernel_error_is_reported_with_the_driver_message(reference):
    _require("rpi4")
    import tvm

    backend = get_backend("rpi4")
    loaded = backend.session().load(backend.build(reference.module))
    wrong = tvm.runtime.tensor(np.zeros((3, 3), np.float32))  # transpose expects (128, 128) -> (128, 128)
    with pytest.raises(EmulatedRunError, match=r"kernel transpose failed under qemu-aarch64 \(exit code 4\)"):
        loaded.kernels["transpose"](wrong, wrong)


def _broken(**kw) -> BackendProfile:
    base = get_profile("rpi4")
    return dataclasses.replace(base, name="rpi4-broken", **kw)


def test_missing_cross_compiler_names_the_package(reference):
    p = _broken(cross_compiler="ekb-no-such-gcc", toolchain_package="gcc-ekb-test-cross")
    with pytest.raises(
        ToolchainMissing,
        match="ekb-no-such-gcc not found: install the Debian package "
        r"gcc-ekb-test-cross \(make toolchains\)",
    ):
        CrossBackend(p).build(reference.module)


def test_missing_emulator_names_qemu_user(reference):
    _require("rpi4", emulate=False)
    p = _broken(emulator=("qemu-ekb-nosuch",))
    with pytest.raises(
        ToolchainMissing, match="qemu-ekb-nosuch not found: install the Debian package qemu-user"
    ):
        CrossBackend(p).build(reference.module)


def test_missing_toolchain_is_an_infra_failure_not_the_candidates(tmp_path, monkeypatch):
    """Through run_job (in this process, so the user TOML in EKB_PROFILES is seen)."""
    from edgekernelbench.harness.evaluate import run_job
    from edgekernelbench.harness.job import Job

    toml = tmp_path / "profiles.toml"
    toml.write_text(
        '[rpi4-broken]\nkind = "cross"\nrun = "emulated"\n'
        'target = { kind = "llvm", mtriple = "aarch64-linux-gnu" }\n'
        'cross_compiler = "ekb-no-such-gcc"\ntoolchain_package = "gcc-ekb-test-cross"\n'
        'emulator = ["qemu-aarch64"]\n'
    )
    monkeypatch.setenv("EKB_PROFILES", str(toml))
    job = Job(
        problem=TINY,
        sample=0,
        backend="rpi4-broken",
        spec=KernelSpec(
            problem=TINY, module=prim("for i, j in T.grid(4, 8):\n    out[i, j] = x[i, j] * w1[j] + b3[j]")
        ).to_dict(),
        trials=1,
    )
    r = run_job(job)
    assert r.reason == "infra" and "gcc-ekb-test-cross" in r.detail and not r.compiled, (r.reason, r.detail)


def test_emulated_runs_judge_several_candidates_at_once(tmp_path):
    """Nothing is timed under emulation, so `ekb eval` judges several candidates at once there by default
    (threads); a backend that times here keeps one (a second worker would disturb its timings). `--jobs 2`
    judges on a local Ray instance of two workers (docs/cluster.md)."""
    from test_cli import ekb, write_candidates

    from edgekernelbench.harness.api import JudgeConfig
    from edgekernelbench.runs import EvalConfig, local_jobs
    from edgekernelbench.store import RunStore

    assert local_jobs("host-cpu", EvalConfig(jobs=4)) == 1
    assert local_jobs("host-cpu", EvalConfig(jobs=4, judge=JudgeConfig(measure=False))) == 4
    assert local_jobs("rpi4", EvalConfig(jobs=3)) == 3
    assert (
        1
        <= local_jobs("rpi4", EvalConfig(judge=JudgeConfig(threads=64)))
        <= local_jobs("rpi4", EvalConfig())
        <= 4
    )
    _require("rpi4")
    wrong = prim("for i, j in T.grid(4, 8):\n    out[i, j] = x[i, j] * w1[j]")
    right = prim("for i, j in T.grid(4, 8):\n    out[i, j] = x[i, j] * w1[j] + b3[j]")
    write_candidates(tmp_path, {0: right, 1: wrong, 2: right, 3: wrong})
    p = ekb("eval", tmp_path, "--backend", "rpi4", "--jobs", "2", "--trials", "2")
    assert p.returncode == 0, p.stdout + p.stderr
    got = {r.sample: (r.correct, r.reason) for r in RunStore(tmp_path).results()}
    assert got == {0: (True, None), 1: (False, "wrong_output"), 2: (True, None), 3: (False, "wrong_output")}
    assert "--jobs must be at least 1" in ekb("eval", tmp_path, "--jobs", "0").stderr
