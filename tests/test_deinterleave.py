"""A stride-2 convolution's padded input laid out as even and odd halves (search/rules/contraction.py
`_deinterleave`): applied where each input element serves many multiply-adds, left out of depthwise windows,
the same output as without it, and judged correct by the oracle."""

from __future__ import annotations

import numpy as np
import pytest
from test_packed_gemm import _rule_spec

from edgekernelbench.search.graph import graph_reference
from edgekernelbench.search.kernels import kernels
from edgekernelbench.search.rules import build_target, contraction, schedule_func

STRIDED = "L1/conv2d_resnet8_32ch_s2"  # 3x3 stride 2, 16 -> 32 channels, 32x32 -> 16x16: 68 MACs per input
DEPTHWISE = "L1/dwconv3x3_s2_vww_16ch"  # 3x3 stride 2 depthwise: 2.25 MACs per input element


def _conv(pid: str):
    funcs = graph_reference(pid, "").primfuncs()
    (k,) = [k for k in kernels(pid, "") if k.op_class in ("conv2d", "depthwise")]
    return k.name, funcs[k.name]


def _schedule(pid: str):
    name, func = _conv(pid)
    fs = schedule_func(func, name, 8, parallel=False, target=build_target(1))
    assert fs.traces, fs
    return name, func, fs


def _memory_kinds(fs) -> list[str]:
    return [inst[0] for inst in dict(fs.traces).get("memory", [[]])[0]]


def _run(func, name: str, traces: dict, inputs: list[np.ndarray], out_shape) -> np.ndarray:
    import tvm

    from edgekernelbench.ir.replay import apply_trace, combine_layers
    from edgekernelbench.ir.spec import SCHEDULE_LAYERS

    trace, where = combine_layers([(k, traces[k]) for k in SCHEDULE_LAYERS if k in traces])
    f = list(apply_trace(func, trace, name, where).mod.functions.values())[0]
    lib = tvm.compile(tvm.IRModule({"main": f.with_attr("global_symbol", "main")}), build_target(1))
    dev = tvm.cpu(0)
    out = tvm.runtime.tensor(np.zeros(out_shape, "float32"), dev)
    lib["main"](*[tvm.runtime.tensor(x, dev) for x in inputs], out)
    return out.numpy()


def test_a_strided_convolution_reads_its_input_as_halves_with_the_same_output(monkeypatch):
    name, func, fs = _schedule(STRIDED)
    assert "TransformLayout" in _memory_kinds(fs)
    shapes = [[int(d) for d in p.ty.shape] for p in func.params]
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s).astype("float32") for s in shapes[:-1]]
    new = _run(func, name, dict(fs.traces), inputs, shapes[-1])
    monkeypatch.setattr(contraction, "DEINTERLEAVE", False)
    _, _, old_fs = _schedule(STRIDED)
    assert "TransformLayout" not in _memory_kinds(old_fs)
    old = _run(func, name, dict(old_fs.traces), inputs, shapes[-1])
    np.testing.assert_array_equal(new, old)  # a layout, not an arithmetic change: the same sums in order


def test_a_depthwise_window_keeps_its_input_as_it_is():
    _, _, fs = _schedule(DEPTHWISE)
    assert "TransformLayout" not in _memory_kinds(fs)


@pytest.mark.parametrize("pid", [STRIDED])
def test_the_candidate_with_halves_is_judged_correct(pid):
    from edgekernelbench.harness.api import evaluate
    from edgekernelbench.harness.timing import TimingConfig

    spec = _rule_spec(pid, [])
    assert any(inst[0] == "TransformLayout" for t in spec.decisions.memory.values() for inst in t[0])
    res = evaluate(pid, spec, "host-cpu", trials=2, timing=TimingConfig.quick(), baselines=("tvm-default",))
    assert res.correct, res.detail
