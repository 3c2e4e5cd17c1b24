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
