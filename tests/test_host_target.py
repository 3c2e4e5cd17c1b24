"""The host target is this machine as LLVM sees it: its CPU name and its ISA features, never a feature the
name implies that this host lacks (a hypervisor may hide AVX-512 from a Zen 4 or a Xeon: code for the name
alone then dies of SIGILL)."""

from __future__ import annotations

import numpy as np
import pytest

from edgekernelbench.backends.host import resolve_target
from edgekernelbench.backends.registry import get_profile
from edgekernelbench.tvm_env import host_cpu_features, host_cpu_name, host_target


def test_the_host_target_enables_no_feature_this_host_lacks():
    import tvm
    from tvm.target import codegen

    host = host_cpu_features()
    if not host:
        pytest.skip("this LLVM does not report the host's features")
    target = tvm.target.Target(host_target())
    enabled = set(codegen.llvm_get_cpu_features(target))
    lacking = {f for f, on in host.items() if not on}
    assert not (enabled & lacking), sorted(enabled & lacking)
    assert {f for f, on in host.items() if on} <= enabled


def test_native_profiles_resolve_to_the_host_target():
    t = resolve_target(get_profile("host-cpu"))
    assert t["mcpu"] == host_cpu_name() and t["num-cores"] == 1
    assert t.get("mattr", []) == host_target().get("mattr", [])


def test_a_vectorized_kernel_built_for_the_host_runs_here():
    import tvm
    from tvm.script import tirx as T

    @T.prim_func
    def add(
        a: T.Buffer((1024,), "float32"), b: T.Buffer((1024,), "float32"), c: T.Buffer((1024,), "float32")
    ):
        for i in T.vectorized(1024):
            c[i] = a[i] * b[i] + a[i]

    from edgekernelbench.tvm_env import build_tir

    lib = build_tir(tvm.IRModule({"add": add}), tvm.target.Target(host_target()))
    a = np.arange(1024, dtype="float32")
    out = tvm.runtime.tensor(np.zeros(1024, "float32"))
    lib["add"](tvm.runtime.tensor(a), tvm.runtime.tensor(a), out)
    np.testing.assert_allclose(out.numpy(), a * a + a)


# ------------------------------------------------------------------------------------------ host profiles
def test_a_host_profile_is_this_machine_as_detected():
    from edgekernelbench.backends.hostinfo import host_facts, vector_bits_of
    from edgekernelbench.machine import sysfs_caches

    facts = host_facts()
    p = get_profile("host-cpu")
    assert p.vector_bits == vector_bits_of(facts.isa) == facts.vector_bits
    assert p.caches == (sysfs_caches() or p.caches)
    detected = p.extra["detected"]
    assert detected["cpu"] == host_cpu_name() and detected["isa"] == list(facts.isa)
    assert "LLVM" in detected["vector_bits"] and detected["cores"] >= 1


def _has(*features) -> bool:
    from edgekernelbench.backends.hostinfo import host_facts

    return set(features) <= set(host_facts().isa)


@pytest.mark.skipif(not _has("avx2", "fma"), reason="this host has no AVX2: host-avx2 cannot run here")
def test_the_avx2_code_path_is_built_checked_and_timed_here():
    """host-avx2 holds the target to AVX2 + FMA (LLVM haswell) on any x86 host that has them: the tests
    exercise that code path on every such machine, whatever its own ISA."""
    from edgekernelbench.generators.reference_candidates import rule_spec
    from edgekernelbench.harness.api import evaluate
    from edgekernelbench.harness.timing import TimingConfig
    from edgekernelbench.problems import get_problem

    p = get_profile("host-avx2")
    assert p.vector_bits == 256 and p.target["mcpu"] == "haswell"
    problem = get_problem("L1/dense_kws_classifier")
    r = evaluate(problem.id, rule_spec(problem, p.vector_lanes), p, timing=TimingConfig.quick(), trials=2)
    assert r.correct and r.runtime is not None, r.detail
    assert r.backend == "host-avx2" and r.profile_sha256


def test_a_profile_whose_isa_this_cpu_lacks_is_one_clear_error(tmp_path):
    from test_cli import assert_one_line_error, ekb

    from edgekernelbench.backends.hostinfo import ISAUnavailable, missing_features, require_isa

    p = get_profile("host-avx512")
    assert p.vector_bits == 512
    if _has("avx512f", "avx512bw", "avx512vnni"):
        assert missing_features(p) == []
        require_isa(p)
        return
    with pytest.raises(ISAUnavailable, match="cannot run on this CPU"):
        require_isa(p)
    (tmp_path / "candidates" / "L1" / "tiny_scale_add").mkdir(parents=True)
    (tmp_path / "candidates" / "L1" / "tiny_scale_add" / "sample0.py").write_text("x")
    assert_one_line_error(ekb("eval", tmp_path, "--backend", "host-avx512"), "lacks avx512f")


def test_ekb_backends_shows_the_detected_machine():
    from test_cli import ekb

    p = ekb("backends")
    assert p.returncode == 0 and "this machine:" in p.stdout and host_cpu_name() in p.stdout, p.stdout
