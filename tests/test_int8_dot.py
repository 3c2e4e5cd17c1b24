"""Integer GEMMs as u8 x s8 dot products (ir/int8_dot.py, search/rules/dot.py): the graph rewrite is exact
on every CPU (the judge's oracle, atol 0), packs the weights once, leaves what it cannot rewrite alone, is
offered only where the target has VNNI, and the VNNI rule's kernel (tensorized with vpdpbusd) stays exact."""

import json

import pytest

from edgekernelbench.harness.api import evaluate
from edgekernelbench.harness.timing import TimingConfig
from edgekernelbench.ir.int8_dot import DOT_BLOCK, ROWSUM_BLOCK, target_has_vnni
from edgekernelbench.problems import get_problem
from edgekernelbench.search.graph import INT8_DOT, NHWC, graph_alternatives, graph_key, graph_reference
from edgekernelbench.search.rules.dot import vnni_available

SHIFTED = "L1/tiny_matmulint_i8_u8w"  # int8 activations, uint8 weights, both zero points off zero
SATURATING = "L1/tiny_matmulint_saturating_16"  # u8 x s8 whose 16-bit pair sums would saturate
# quantized (QDQ) depthwise-separable blocks: the pointwise convolution's GEMM, NCHW or channels last
QDQ_S2 = "L2/uint8_ds_block_s2_vww"  # uint8 activations, 64 -> 128 channels at 6 x 6
QDQ_KWS = "L2/int8_ds_block_kws"  # int8 activations (zero point -128), 64 -> 64 at 25 x 5


def _spec(pid: str, state: dict | None = None, passes=INT8_DOT):
    from edgekernelbench.agents.leka import Whole, build_spec
    from edgekernelbench.search.kernels import kernels

    workloads = {k.name: k.workload for k in kernels(pid, graph_key(passes))}
    return build_spec(get_problem(pid), state or {}, "test", None, workloads, Whole(list(passes)))


@pytest.mark.parametrize(
    "pid,packed,rowsums",
    [
        (SHIFTED, (2, 6, 16, 4), True),  # uint8 weights off 128: corrected by the row sums of a
        (SATURATING, (1, 8, 16, 4), False),
        ("L1/convint_vww_pw_32x64", (4, 8, 16, 4), True),  # the weight reshaped and transposed in the graph
        (QDQ_S2, (8, 16, 16, 4), False),  # a QDQ pointwise convolution (symmetric int8 weights)
        ("L3/fc_autoencoder_ad_int8", (8, 160, 16, 4), False),  # QDQ dense layers (640 -> 128 first)
    ],
)
def test_the_dot_product_graph_is_exact_and_packs_the_weights_once(pid, packed, rowsums):
    """The rewrite's kernel unscheduled (plain TIR, any CPU): the judge finds it exact against the oracle
    (a QDQ model's: within its one-step tolerance); main takes the weights packed [N/16, K/4, 16, 4]
    (packed in main_transform_params, once at load); the row sums of a are computed only where the
    weights' zero points (after the shift to int8) are not all 0."""
    ref = graph_reference(pid, graph_key(INT8_DOT))
    assert DOT_BLOCK in ref.primfuncs()
    blocks = ref.primfuncs()[DOT_BLOCK].script()
    assert (ROWSUM_BLOCK in blocks) == rowsums
    assert packed in [tuple(int(d) for d in p.ty.shape) for p in ref.module["main"].params]
    assert "main_transform_params" in {gv.name_hint for gv in ref.module.functions}
    res = evaluate(pid, _spec(pid), "host-cpu", trials=2, timing=TimingConfig.quick(), baselines=())
    assert res.correct, res.detail


def test_a_matmul_it_cannot_pack_is_left_alone():
    """8 output columns (not a whole 16-lane vector): the graph keeps its int32 matmul."""
    ref = graph_reference("L1/tiny_matmulint_saturating", graph_key(INT8_DOT))
    assert DOT_BLOCK not in ref.primfuncs()
    assert any(n.startswith("matmul") for n in ref.primfuncs())


def test_vnni_is_offered_only_where_the_target_has_it():
    assert target_has_vnni({"kind": "llvm", "mcpu": "icelake-server"})
    assert target_has_vnni({"kind": "llvm", "mcpu": "znver4"})
    assert not target_has_vnni({"kind": "llvm", "mcpu": "haswell"})
    assert not target_has_vnni({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"})
    problem = get_problem(SHIFTED)
    assert INT8_DOT not in [p for _, p in graph_alternatives(problem)]  # no backend: nothing target-specific
    assert INT8_DOT not in [p for _, p in graph_alternatives(problem, "rpi4")]
    from edgekernelbench.backends.host import resolve_target
    from edgekernelbench.backends.registry import as_profile

    host = target_has_vnni(resolve_target(as_profile("host-cpu")))
    assert (INT8_DOT in [p for _, p in graph_alternatives(problem, "host-cpu")]) == host
    assert INT8_DOT not in [p for _, p in graph_alternatives(get_problem("L1/tiny_matmul_128"), "host-cpu")]


@pytest.mark.skipif(
    not vnni_available(), reason="this CPU has no AVX-512 VNNI: the tensorized kernel cannot run"
)
def test_the_vnni_kernel_is_tensorized_and_exact():
    """The rules' first strategy for the dot kernel is a VNNI register tile; its decisions replay (the
    target layer tensorizes with the project's intrinsic), the kernel calls vpdpbusd, and the judge finds
    the candidate exact -- 16-bit pair sums that pmaddubsw would saturate included -- or, for a QDQ model's
    pointwise convolution (NCHW at 6 x 6, channels last at 25 x 5), within its one-step tolerance."""
    from edgekernelbench.ir.replay import apply_trace, combine_layers
    from edgekernelbench.search.rules import build_target, schedule_func

    cases = [(SHIFTED, INT8_DOT), (SATURATING, INT8_DOT), (QDQ_S2, INT8_DOT), (QDQ_KWS, NHWC + INT8_DOT)]
    for pid, passes in cases:
        func = graph_reference(pid, graph_key(passes)).primfuncs()[DOT_BLOCK]
        fs = schedule_func(func, DOT_BLOCK, 16, target=build_target(1))
        assert fs.strategy.startswith("vnni"), fs.failures
        assert "Tensorize" in json.dumps(fs.traces["target"])
        trace, where = combine_layers([(k, fs.traces[k]) for k in ("loop", "memory", "target")])
        assert "vpdpbusd" in apply_trace(func, trace, DOT_BLOCK, where).mod.script()
        spec = _spec(pid, {DOT_BLOCK: fs.traces}, passes)
        res = evaluate(pid, spec, "host-cpu", trials=2, timing=TimingConfig.quick(), baselines=())
        assert res.correct, (pid, res.detail)


def test_the_vnni_tile_accumulates_in_a_global_buffer_and_old_local_decisions_replay():
    """The VNNI rule's accumulators are a "global" buffer (a stack array on a CPU, not a workspace
    allocated per call) tensorized with VNNI_INTRIN; decisions stored before, a "local" buffer and
    VNNI_INTRIN_LOCAL, still replay to the same vpdpbusd kernel. Scheduling only: any CPU."""
    from edgekernelbench.ir.int8_dot import VNNI_INTRIN, VNNI_INTRIN_LOCAL
    from edgekernelbench.ir.replay import LayerRecorder, apply_trace, combine_layers
    from edgekernelbench.search.rules import analyze
    from edgekernelbench.search.rules.dot import schedule_dot

    func = graph_reference(QDQ_S2, graph_key(INT8_DOT)).primfuncs()[DOT_BLOCK]
    rec = LayerRecorder(func)
    schedule_dot(rec, analyze(func, DOT_BLOCK), 2, 2)
    layers = rec.traces()
    text = json.dumps(layers)
    assert '[0, "global"]' in text and VNNI_INTRIN in text and "local" not in text
    old = json.loads(text.replace('[0, "global"]', '[0, "local"]').replace(VNNI_INTRIN, VNNI_INTRIN_LOCAL))
    for traces in (layers, old):
        trace, where = combine_layers([(k, traces[k]) for k in ("loop", "memory", "target")])
        script = apply_trace(func, trace, DOT_BLOCK, where).mod.script()
        assert "vpdpbusd" in script


def test_an_integer_problem_is_held_to_the_int8_roof_where_the_backend_has_one():
    """The roofline of an integer problem uses the int8 dot-product peak when the peak record has one, the
    float peak otherwise; a float problem always the float peak."""
    from edgekernelbench.backends.peak import measure_int8_ops
    from edgekernelbench.metrics import result_roofline
    from edgekernelbench.records import Result, Timing

    res = Result(problem=SHIFTED, sample=0, backend="host-cpu", compiled=True, correct=True)
    res.flops, res.bytes = 4e6, 1e3
    res.runtime = Timing(median=1e-4, iqr=0.0, min=1e-4, max=1e-4, count=1, number=1)
    peak = {"flops": 1e11, "bandwidth": 1e12, "int8_ops": 4e11}
    assert result_roofline(res, peak, integer=True).attainable_flops == 4e11
    assert result_roofline(res, peak).attainable_flops == 1e11
    assert result_roofline(res, {"flops": 1e11, "bandwidth": 1e12}, integer=True).attainable_flops == 1e11
    assert measure_int8_ops({"kind": "llvm", "mcpu": "haswell"}) is None  # no VNNI: no int8 roof
    if vnni_available():
        from edgekernelbench.search.rules import build_target

        assert measure_int8_ops(build_target(1), iters=1000) > 0


def test_channels_last_transposes_around_quantize_dequantize_cancel():
    """ConvertLayout leaves a QDQ block's activations transposed back to NCHW around each quantize ->
    dequantize and forth again; the dot-product pass drops those pairs: with it only the graph's entry
    and exit transpose, and the candidate (rewrite unscheduled) is still within the problem's tolerance."""
    from edgekernelbench.search.kernels import kernels

    def transposes(passes):
        return sorted(k.name for k in kernels(QDQ_S2, graph_key(passes)) if "transpose" in k.name)

    assert len(transposes(NHWC)) == 3  # entry, between the two convolutions, exit
    assert len(transposes(NHWC + INT8_DOT)) == 2
    spec = _spec(QDQ_S2, passes=NHWC + INT8_DOT)
    res = evaluate(QDQ_S2, spec, "host-cpu", trials=2, timing=TimingConfig.quick(), baselines=())
    assert res.correct, res.detail


def test_int8_activations_from_a_quantize_are_quantized_to_uint8_directly():
    """The dot product takes unsigned activations: int8 ones shifted by 128. When they come out of a
    quantize (a QDQ model's depthwise output), the pass quantizes to uint8 with the zero point shifted
    instead of casting and adding 128 after it: the fused kernel's epilogue has no int8 cast left, and the
    values are the same (the candidate within the problem's tolerance, as the test above judges it)."""
    from edgekernelbench.search.kernels import kernels

    ref = graph_reference(QDQ_KWS, graph_key(NHWC + INT8_DOT))
    (dw,) = [
        k.name for k in kernels(QDQ_KWS, graph_key(NHWC + INT8_DOT)) if k.name.startswith("fused_conv2d")
    ]
    text = ref.primfuncs()[dw].script()
    assert dw.endswith("_quantize") and 'T.Cast("uint8"' in text and 'T.Cast("int8"' not in text
    assert "T.float32(-128.0)" not in text  # the zero point -128 + 128: a constant 0, folded
    ref_nchw = graph_reference(QDQ_KWS, graph_key(INT8_DOT))  # NCHW: the shift before the transpose
    assert not any(
        'T.Cast("int8"' in f.script() for n, f in ref_nchw.primfuncs().items() if n.startswith("fused_conv2d")
    )


def test_folding_the_zero_point_arithmetic_computes_what_fold_constant_computes():
    """fold_constants (the pass's own folding of its zero-point and scale arithmetic, in NumPy) gives the
    values Relax's LegalizeOps + FoldConstant compute for the same expression: integer wrap-around in the
    operands' dtype, a truncating cast between integers, a rounding cast into float32, broadcast_to."""
    import numpy as np
    from tvm import relax
    from tvm.ir.expr import Constant
    from tvm.relax import op as R

    from edgekernelbench.ir.int8_dot import fold_constants

    i8 = relax.const(np.array([127, -128, 5], "int8"))
    i32 = relax.const(np.array([2_000_000_000, -7, 300], "int32"))
    f32 = relax.const(np.array([0.1, 3.0e38, -2.5], "float32"))
    exprs = [
        R.add(i8, relax.const(np.array([1, -1, 7], "int8"))),  # wraps to -128, 127
        R.multiply(R.subtract(i32, relax.const(np.int32(3))), relax.const(np.int32(5))),  # int32 overflow
        R.astype(i32, "int8"),  # truncation: 2e9 -> 0, 300 -> 44
        R.astype(i32, "float32"),  # 2e9 rounds to the nearest float
        R.multiply(f32, relax.const(np.float32(10.0))),  # one IEEE product each (3e39 -> inf)
        R.broadcast_to(R.add(i8, i8), (2, 3)),
    ]
    for expr in exprs:
        folded = fold_constants({}, expr)
        assert isinstance(folded, Constant), expr
        bb = relax.BlockBuilder()
        with bb.function("main", []):
            bb.emit_func_output(bb.emit(expr))
        mod = relax.transform.FoldConstant()(relax.transform.LegalizeOps()(bb.get()))
        want = mod["main"].body.body.value.numpy()
        got = folded.value.numpy()
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    x = relax.Var("x", relax.TensorType((3,), "int8"))  # not a constant: left as it is
    assert not isinstance(fold_constants({}, R.add(x, i8)), Constant)


@pytest.mark.parametrize("pid", [SHIFTED, QDQ_KWS])
def test_folding_keeps_the_kernels_the_workloads_they_were(pid, monkeypatch):
    """The pass folds its constants itself (a build without FoldConstant's kernels for them); the graph's
    kernels are the same, by name and workload key, as with the folding left to FoldConstant, so stored
    decisions keyed by workload still apply."""
    from edgekernelbench.ir import int8_dot
    from edgekernelbench.search.kernels import kernels

    def uncached():
        kernels.cache_clear()
        graph_reference.cache_clear()
        return [(k.name, k.workload) for k in kernels(pid, graph_key(INT8_DOT))]

    folded = uncached()
    monkeypatch.setattr(int8_dot, "fold_constants", lambda var2val, expr, consts=None: expr)
    assert uncached() == folded
    kernels.cache_clear()
    graph_reference.cache_clear()
