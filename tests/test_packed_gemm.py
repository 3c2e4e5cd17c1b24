"""Float GEMMs on packed weight panels (ir/packed_gemm.py): the graph pass, its kernels, the judge's verdict."""

from __future__ import annotations

import numpy as np
import pytest

from edgekernelbench.ir.packed_gemm import CONV_BLOCK, MATMUL_BLOCK, packed_func, panel_width
from edgekernelbench.search.graph import NHWC, PACKED_WEIGHTS, graph_alternatives, graph_key, graph_reference


def test_panel_widths():
    assert [panel_width(n) for n in (1024, 128, 96, 64, 48, 32, 8, 100)] == [
        64,
        64,
        32,
        32,
        16,
        16,
        None,
        None,
    ]


def test_the_packed_kernel_is_the_gemm():
    """The kernel alone, unscheduled, against NumPy: D = A @ W with W packed as [N / P, K, P]."""
    import tvm

    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 3, 2, 48)).astype("float32")
    w = rng.standard_normal((48, 128)).astype("float32")
    packed = np.ascontiguousarray(w.reshape(48, 2, 64).transpose(1, 0, 2))
    func = packed_func((1, 3, 2), 48, 128, 64, conv=True).with_attr("global_symbol", "main")
    lib = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    dev = tvm.cpu(0)
    out = tvm.runtime.tensor(np.zeros((1, 3, 2, 128), "float32"), dev)
    lib["main"](tvm.runtime.tensor(a, dev), tvm.runtime.tensor(packed, dev), out)
    np.testing.assert_allclose(out.numpy(), a @ w, rtol=1e-5, atol=1e-5)


def _rule_spec(pid: str, passes: list[dict]):
    """The candidate LEKA's graph layer judges: the graph's kernels at the rules' starting points."""
    from edgekernelbench.agents.leka import Whole, build_spec
    from edgekernelbench.search.kernels import kernels
    from edgekernelbench.search.rules import build_target, schedule_func

    key = graph_key(passes)
    funcs = graph_reference(pid, key).primfuncs()
    state, workloads = {}, {}
    for k in kernels(pid, key):
        fs = schedule_func(funcs[k.name], k.name, 8, parallel=False, target=build_target(1))
        if fs.traces:
            state[k.name] = dict(fs.traces)
        workloads[k.name] = k.workload
    from edgekernelbench.problems import get_problem

    return build_spec(get_problem(pid), state, "test", workloads=workloads, whole=Whole(passes))


@pytest.mark.parametrize(
    ("pid", "passes", "block", "packed_shape"),
    [
        # 64 -> 128 channels, 1x1: two panels of 64 columns
        ("L1/pwconv_vww_64x128", NHWC + PACKED_WEIGHTS, CONV_BLOCK, "(2, 64, 64)"),
        # 128 x 128 @ 128 x 512: eight panels
        ("L1/matmul_mobilebert_ffn_in", PACKED_WEIGHTS, MATMUL_BLOCK, "(8, 128, 64)"),
    ],
)
def test_packed_weights_are_laid_out_once_and_judged_correct(pid, passes, block, packed_shape):
    """The pass is offered; the rewritten GEMM's weight is re-laid out in main_transform_params (once, at
    load) and main passes the packed panels to a kernel that fuses the epilogue; the rules schedule it and
    the judge (an independent oracle) finds the candidate correct."""
    from edgekernelbench.harness.api import evaluate
    from edgekernelbench.harness.timing import TimingConfig
    from edgekernelbench.problems import get_problem
    from edgekernelbench.search.kernels import kernels

    assert PACKED_WEIGHTS in [p for _, p in graph_alternatives(get_problem(pid))]
    key = graph_key(passes)
    ref = graph_reference(pid, key)
    assert f"R.Tensor({packed_shape}" in ref.module["main_transform_params"].script()
    funcs = ref.primfuncs()
    names = [k.name for k in kernels(pid, key) if block in funcs[k.name].script()]
    assert len(names) == 1
    spec = _rule_spec(pid, passes)
    assert names[0] in spec.decisions.loop  # the rules scheduled the packed kernel
    res = evaluate(pid, spec, "host-cpu", trials=2, timing=TimingConfig.quick(), baselines=("tvm-default",))
    assert res.correct, res.detail


def test_gemms_without_a_constant_weight_are_left_alone():
    """Attention's matmuls multiply two activations: nothing to pack, the pass is not offered; a 3x3
    convolution is not a GEMM by a weight row either."""
    from edgekernelbench.problems import get_problem

    for pid in ("L1/tiny_conv3x3", "L1/softmax_mobilebert_attn"):
        assert PACKED_WEIGHTS not in [p for _, p in graph_alternatives(get_problem(pid))]
