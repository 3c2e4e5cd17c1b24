"""The graph pass "BiasInit" (ir/bias_init.py): a depthwise convolution's sums start at its bias."""

from __future__ import annotations

import numpy as np
import pytest

TINY_QDQ_DW = "L1/tiny_qdq_dwconv"


def _conv_module(layout: str, groups: int, bias_shape=None, twice: bool = False, stride: int = 2):
    """main(x; w, b) = relu(conv2d(x, w) + b) (16 channels, 3x3, padding 1), weights after num_input; with
    `twice` the convolution's output is also returned on its own."""
    import tvm
    from tvm import relax
    from tvm.relax import op as R

    nhwc = layout == "NHWC"
    xs = (1, 8, 6, 16) if nhwc else (1, 16, 8, 6)
    ws = (3, 3, 16 // groups, 16) if nhwc else (16, 16 // groups, 3, 3)
    bs = bias_shape or ((1, 1, 1, 16) if nhwc else (1, 16, 1, 1))
    x = relax.Var("x", relax.TensorType(xs, "float32"))
    w = relax.Var("w", relax.TensorType(ws, "float32"))
    b = relax.Var("b", relax.TensorType(bs, "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            c = bb.emit(
                R.nn.conv2d(
                    x,
                    w,
                    strides=stride,
                    padding=[1, 1, 1, 1],
                    groups=groups,
                    data_layout=layout,
                    kernel_layout="HWIO" if nhwc else "OIHW",
                )
            )
            y = bb.emit(R.nn.relu(R.add(b, c)))
            out = bb.emit_output(relax.Tuple([y, c]) if twice else y)
        bb.emit_func_output(out)
    return tvm.IRModule({"main": bb.get()["main"].with_attr("num_input", 1)})


def _run(mod, args):
    import tvm
    from tvm import relax

    from edgekernelbench.reference import legalize_and_fuse
    from edgekernelbench.search.rules import build_target

    fused = legalize_and_fuse(mod)
    vm = relax.VirtualMachine(tvm.compile(fused, build_target(1)), tvm.cpu(0))
    out = vm["main"](*[tvm.runtime.tensor(a) for a in args])
    return (out.numpy() if hasattr(out, "numpy") else out[0].numpy()), fused


def _args(mod, integers: bool):
    rng = np.random.default_rng(0)
    shapes = [[int(d) for d in p.ty.shape] for p in mod["main"].params]
    if integers:  # every sum an exact integer in float32: any order gives the same value
        return [rng.integers(-8, 9, s).astype("float32") for s in shapes]
    return [rng.normal(size=s).astype("float32") for s in shapes]


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_a_depthwise_convolution_starts_at_its_bias(layout):
    """The convolution and its add become one kernel whose reduction's init reads the bias, fused with the
    ReLU; the same values as the graph without the pass (exactly on integer data, within float32 rounding
    of a reordered sum otherwise), stride 2 and padding included."""
    from edgekernelbench.ir.bias_init import BIAS, bias_init_pass

    mod = _conv_module(layout, groups=16)
    rewritten = bias_init_pass()(mod)
    for integers in (True, False):
        args = _args(mod, integers)
        want, _ = _run(mod, args)
        got, fused = _run(rewritten, args)
        if integers:
            assert np.array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    kernels = [gv.name_hint for gv in fused.functions if gv.name_hint != "main"]
    assert kernels == ["fused_conv2d_bias_relu"], kernels
    text = fused["fused_conv2d_bias_relu"].script()
    init = text[text.index("with T.init():") :].splitlines()[1]
    assert f"= {BIAS}[" in init or "= b[" in init, init
    assert "T_add" not in text


@pytest.mark.parametrize(
    "case",
    ["standard convolution", "bias not per channel", "output used twice"],
)
def test_the_pass_leaves_other_convolutions_as_they_are(case):
    """A convolution that is not grouped, a bias that is not one value per output channel, and a
    convolution whose output is read elsewhere too keep conv2d + add."""
    from tvm import relax

    from edgekernelbench.ir.bias_init import bias_init_pass

    mod = {
        "standard convolution": lambda: _conv_module("NHWC", groups=1),
        "bias not per channel": lambda: _conv_module("NHWC", groups=16, bias_shape=(1, 4, 3, 16)),
        "output used twice": lambda: _conv_module("NHWC", groups=16, twice=True),
    }[case]()
    out = bias_init_pass()(mod)
    text = out["main"].script()
    assert "R.nn.conv2d" in text and "R.add" in text and "conv2d_bias" not in text
    assert [gv.name_hint for gv in out.functions] == ["main"]
    assert isinstance(out["main"], relax.Function)


def test_bias_init_is_offered_for_depthwise_convolutions_with_a_bias():
    from edgekernelbench.problems import get_problem
    from edgekernelbench.search.graph import BIAS_INIT, graph_alternatives

    def offered(pid):
        return BIAS_INIT in [p for _, p in graph_alternatives(get_problem(pid), "host-cpu")]

    assert offered("L1/dwconv3x3_kws") and offered("L3/dscnn_kws_int8") and offered(TINY_QDQ_DW)
    assert not offered("L1/tiny_conv3x3")  # a standard convolution


def test_the_bias_init_graph_is_judged_exact_with_the_folded_scale():
    """QDQ depthwise convolution with power-of-two scales: with channels last, QuantizeRint (the output scale
    folded into the weights, the saturating conversion) and BiasInit, the kernel is one reduction starting at
    the (scaled) bias with no add and no division left, and the judge finds it correct against ONNX Runtime."""
    from edgekernelbench.harness.api import TimingConfig, evaluate
    from edgekernelbench.ir.spec import Decisions, KernelSpec
    from edgekernelbench.search.graph import BIAS_INIT, NHWC, QUANTIZE_RINT, graph_key, graph_reference

    passes = NHWC + QUANTIZE_RINT + BIAS_INIT
    funcs = graph_reference(TINY_QDQ_DW, graph_key(passes)).primfuncs()
    (conv,) = [n for n in funcs if "conv2d_bias" in n]
    assert "T_add" not in funcs[conv].script()
    # the graph's output is NCHW: the transpose back comes before the last quantize, in its own kernel
    (out,) = [n for n in funcs if "transpose" in n and "quantize_rint1" in n]
    quantize = next(ln for ln in funcs[out].script().splitlines() if "llvm.lrint" in ln)
    assert " / " not in quantize and "T.uint32(255)" in quantize, quantize
    spec = KernelSpec(problem=TINY_QDQ_DW, decisions=Decisions(graph={"passes": passes}), method="test")
    res = evaluate(TINY_QDQ_DW, spec, trials=2, timing=TimingConfig.quick(), baselines=("tvm-default",))
    assert res.correct, res.detail


def test_a_kernel_without_one_zero_init_is_left_alone():
    """conv_bias_func patches one reduction whose init stores 0: an elementwise kernel (no init) and a kernel
    with two reductions give None, which leaves the convolution to TVM's own lowering."""
    from tvm import te

    from edgekernelbench.ir.bias_init import conv_bias_func

    x = te.placeholder((4, 16), "float32", name="x")
    relu = te.compute((4, 16), lambda i, j: te.max(x[i, j], 0.0), name="relu")
    assert conv_bias_func(te.create_prim_func([x, relu]), (1, 16)) is None
    k = te.reduce_axis((0, 16), name="k")
    s1 = te.compute((4,), lambda i: te.sum(x[i, k], axis=k), name="s1")
    k2 = te.reduce_axis((0, 4), name="k2")
    s2 = te.compute((1,), lambda i: te.sum(s1[k2], axis=k2), name="s2")
    assert conv_bias_func(te.create_prim_func([x, s2]), (1,)) is None


def test_tuned_decisions_move_to_the_bias_init_kernel_as_the_same_point():
    """LEKA judges a dropped graph change again with the tuned decisions carried (agents/leka.py
    `_retry_one`). BiasInit takes the add out of the depthwise kernel, so a trace that inlines it no longer
    replays; the builtin proposer translates it to the same point of the schedule space on the new kernel
    (`translate`), which replays, and the judge finds the candidate correct."""
    from edgekernelbench.agents import leka
    from edgekernelbench.agents.proposers import BuiltinProposer
    from edgekernelbench.harness.api import TimingConfig, evaluate
    from edgekernelbench.ir.spec import Decisions, KernelSpec
    from edgekernelbench.search.cost import Machine
    from edgekernelbench.search.graph import BIAS_INIT, NHWC, QUANTIZE_RINT, graph_key
    from edgekernelbench.search.kernels import kernels
    from edgekernelbench.search.variants import replays

    old_passes = NHWC + QUANTIZE_RINT
    old, new = graph_key(old_passes), graph_key(old_passes + BIAS_INIT)
    (conv,) = [k.name for k in kernels(TINY_QDQ_DW, old) if "conv2d" in k.name]
    (counterpart,) = [k.name for k in kernels(TINY_QDQ_DW, new) if "conv2d_bias" in k.name]

    class Ep:
        problem = type("P", (), {"id": TINY_QDQ_DW})
        cfg = type("Cfg", (), {"threads": 1, "backend": "host-cpu"})
        steps: list = []

        def record(self, **kw):
            self.steps.append(kw)

    prop = BuiltinProposer.__new__(BuiltinProposer)
    prop.ep, prop.machine, prop.tried, prop.spaces, prop.graph = (
        Ep(),
        Machine.for_profile("host-cpu"),
        {},
        {},
        old,
    )
    point = next(prop.space(conv).alternatives("loop", {}, set()))
    layers = dict(point.layers)

    assert replays(TINY_QDQ_DW, old, conv, layers) and not replays(TINY_QDQ_DW, new, counterpart, layers)
    state2 = {counterpart: layers}
    assert leka._translate_unfit(Ep(), prop.translate, old, new, {conv: counterpart}, {conv: layers}, state2)
    moved = state2[counterpart]
    assert moved != layers and replays(TINY_QDQ_DW, new, counterpart, moved)
    assert prop.graph == old  # the proposer stays on its graph
    prop.graph = new
    assert prop.space(counterpart).point_of(moved).label == point.label
    assert Ep.steps[-1] == {"kind": "translate", "kernel": counterpart, "layer": "graph", "ok": True}
    # decisions that are no point of the space (here: none of the kernel's) cannot move: not judged
    foreign = {"loop": [[["GetSBlock", [], ["no_such_block", "main"], ["b0"]]], []]}
    assert not leka._translate_unfit(Ep(), prop.translate, old, new, {conv: counterpart}, {conv: foreign}, {})
    assert Ep.steps[-1]["ok"] is False
    decisions = Decisions(graph={"passes": old_passes + BIAS_INIT})
    for layer, trace in moved.items():
        getattr(decisions, layer)[counterpart] = trace
    spec = KernelSpec(problem=TINY_QDQ_DW, decisions=decisions, method="test")
    res = evaluate(TINY_QDQ_DW, spec, trials=2, timing=TimingConfig.quick(), baselines=("tvm-default",))
    assert res.correct, res.detail
