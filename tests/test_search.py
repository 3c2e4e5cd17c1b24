"""The builtin proposer's search: the analytical cost model and the ranked schedule space of a kernel."""

from __future__ import annotations

import json

import pytest

from edgekernelbench.search.cost import Machine, contraction_cost
from edgekernelbench.search.rules import Access as Acc
from edgekernelbench.search.rules import AxisGroup, BlockFacts, TilePlan

AVX512 = Machine(lanes=16, vector_regs=32)
AVX2 = Machine(lanes=8, vector_regs=16)


def matmul_block(n=128, k=128, m=128, b_stride_j=1) -> BlockFacts:
    """C[i, j] += A[i, k] * B[k, j] with iter vars (i, j, k); B's stride along j is `b_stride_j`."""
    a = Acc("A", [k, 0, 1])
    b = Acc("B", [0, b_stride_j, m])
    c = Acc("C", [m, 1, 0])
    return BlockFacts("matmul", "SSR", [n, m, k], c, [a, b])


def plan(block: BlockFacts, lanes: int, vt: int, ut: int) -> TilePlan:
    gi = AxisGroup([0], [block.extents[0]], block.write.strides[0], [r.strides[0] for r in block.reads])
    gj = AxisGroup([1], [block.extents[1]], block.write.strides[1], [r.strides[1] for r in block.reads])
    gather = any(s is None or abs(s) > 2 for s in gj.reads)
    return TilePlan(block, [gi, gj], gj, gi, vt, ut, lanes, gather)


def test_a_tile_that_spills_costs_more_than_one_that_fits():
    b = matmul_block()
    fits = contraction_cost(plan(b, 16, 32, 8), AVX512)  # 16 accumulators + 2 + 1 registers of 32
    spills = contraction_cost(plan(b, 16, 64, 16), AVX512)  # 64 accumulators: spills every step
    assert fits < spills
    # the same tile on a machine with 16 registers spills
    assert contraction_cost(plan(b, 8, 16, 8), AVX2) < contraction_cost(plan(b, 8, 32, 8), AVX2)


def test_register_reuse_beats_a_one_vector_tile():
    b = matmul_block()
    assert contraction_cost(plan(b, 16, 32, 4), AVX512) < contraction_cost(plan(b, 16, 16, 1), AVX512)


def test_a_broadcast_per_fma_costs_more_than_two_vectors_per_row():
    """Measured on the 96 x 400 DFT matmul of logmel_frontend_yamnet (257 bins, padded): 1 vector x 24 rows
    over 272 columns ran 25-33% slower than 2 vectors x 12 rows over 288, though the latter does 6% more
    FMAs; the model ranks them that way (with a load rate of 2 per cycle it had them equal)."""
    one_vector = contraction_cost(plan(matmul_block(96, 400, 272), 16, 16, 24), AVX512)
    two_vectors = contraction_cost(plan(matmul_block(96, 400, 288), 16, 32, 12), AVX512)
    assert two_vectors * 1.15 < one_vector
    # 8 accumulators are one FMA chain each with no slack for the latency: 16 do better per FMA
    b = matmul_block()
    assert contraction_cost(plan(b, 16, 32, 8), AVX512) < contraction_cost(plan(b, 16, 32, 4), AVX512)


def test_gathers_and_no_accumulator_cache_cost_more():
    contiguous = contraction_cost(plan(matmul_block(), 16, 32, 4), AVX512)
    gathered = contraction_cost(plan(matmul_block(b_stride_j=7), 16, 32, 4), AVX512)
    assert contiguous < gathered
    assert contiguous < contraction_cost(plan(matmul_block(), 16, 32, 4), AVX512, cache=False)


def test_panels_keep_a_weight_panel_in_cache():
    """Tile loops in "panels" order (the vectorized axis's tiles outermost) read a weight that does not fit
    in L2 once per panel instead of once per row tile: cheaper; where everything fits, no dearer."""
    big = plan(matmul_block(n=49, k=640, m=528), 16, 32, 7)  # B: 640 x 528 floats = 1.35 MB
    assert contraction_cost(big, AVX512, order="panels") < contraction_cost(big, AVX512)
    small = plan(matmul_block(), 16, 32, 4)
    assert contraction_cost(small, AVX512, order="panels") <= contraction_cost(small, AVX512)


def test_machine_from_a_profile():
    from edgekernelbench.backends.registry import get_profile

    m = Machine.for_profile(get_profile("rpi4"))
    assert m.lanes == 4 and m.vector_regs == 32  # NEON: 4 float32 lanes, 32 registers
    assert m.l1_bytes == 32 * 1024 and m.l2_bytes == 1024 * 1024  # from the profile's caches
    assert Machine.for_profile(get_profile("host-cpu"), lanes=8).vector_regs == 16


def test_the_kernel_space_is_ranked_and_offers_distinct_layers():
    from edgekernelbench.search.kernels import kernels
    from edgekernelbench.search.variants import KernelSpace, layer_key

    pid = "L1/tiny_matmul_128"
    (k,) = kernels(pid)
    space = KernelSpace(pid, k.name, Machine(lanes=8, vector_regs=16))
    costs = [c for c, _ in space.ranked]
    assert len(costs) > 10 and costs == sorted(costs)
    # the other rules strategies (rows, ...) come last, in the rules' order, with no estimate to print
    others = [cfg for _, cfg in space.ranked if cfg.acc_vectors is None]
    assert others and all(space.estimate(cfg.label) is None for cfg in others)
    tried: set[str] = set()
    loops = []
    for _ in range(3):
        v = next(space.alternatives("loop", {}, tried))
        tried.add(layer_key(v, "loop"))
        loops.append(v)
    assert len({layer_key(v, "loop") for v in loops}) == 3  # three different loop layers, cheapest first
    assert [space.estimate(v.label) for v in loops] == sorted(space.estimate(v.label) for v in loops)
    accepted = dict(loops[0].layers)
    targets = list(space.alternatives("target", accepted, set()))
    assert targets and all(v.layers["loop"] == accepted["loop"] for v in targets)
    assert all(json.dumps(v.layers["target"]) != json.dumps(accepted["target"]) for v in targets)


def test_later_layers_of_the_rules_starting_point_are_found_without_recording_the_space(monkeypatch):
    """LEKA starts a kernel from the rules' schedule, a loop layer no proposal recorded: its memory and
    target alternatives are found among a bounded number of recorded points (recording all 2,000 points of
    logmel's padded GEMM took 320 s and found no memory alternative)."""
    from types import SimpleNamespace

    from edgekernelbench.agents.proposers import BuiltinProposer
    from edgekernelbench.backends.registry import get_profile
    from edgekernelbench.problems import get_problem
    from edgekernelbench.search import variants
    from edgekernelbench.search.kernels import kernels

    pid = "L1/tiny_matmul_128"
    (k,) = kernels(pid)
    ep = SimpleNamespace(
        problem=get_problem(pid), cfg=SimpleNamespace(backend=get_profile("host-cpu", 1), threads=1)
    )
    proposer = BuiltinProposer(ep)
    start = proposer.start(k.name)
    space = proposer.space(k.name)
    monkeypatch.setattr(variants, "FIND_MAX", 4)
    targets = list(space.alternatives("target", start, set()))
    tile = variants._tile(next(cfg for cfg, v in space._recorded.items() if v is targets[0]))
    assert sum(variants._tile(cfg) != tile for cfg in space._recorded) <= 4  # other tiles: at most FIND_MAX
    assert targets and all(v.layers["loop"] == start["loop"] for v in targets)
    assert not list(space.alternatives("memory", {}, set()))  # no loop layer: no point keeps that
    assert not list(space.alternatives("target", {**start, "loop": [[["unknown"]], "sch"]}, set()))


def test_the_graph_layer_relays_the_weights_once():
    """NHWC is offered for a convolution only, fast math for a softmax; the convolution's kernel re-laid
    out to HWIO runs in main_transform_params (once, at load time), and main takes the re-laid-out weight."""
    from edgekernelbench.problems import get_problem
    from edgekernelbench.search.graph import (
        BIAS_INIT,
        CLIP_AS_OPS,
        FAST_LOG,
        FAST_MATH,
        NHWC,
        PACKED_WEIGHTS,
        graph_alternatives,
        graph_key,
        graph_reference,
    )
    from edgekernelbench.search.kernels import kernels
    from edgekernelbench.search.rules import analyze, contraction_plan

    conv = get_problem("L1/tiny_conv3x3")  # conv + ReLU6: the clamps as operators first
    assert [passes for _, passes in graph_alternatives(conv)] == [CLIP_AS_OPS + NHWC]
    # a matmul by a constant weight: only its weight packed into panels (ir/packed_gemm.py)
    assert graph_alternatives(get_problem("L1/tiny_matmul_128")) == [
        ("graph: float GEMMs on packed weight panels (re-laid out once)", PACKED_WEIGHTS)
    ]
    # a 1-D convolution too: NWC makes its output channels (64) the vector axis, where NCW vectorized the
    # 124 time steps 4 at a time (124 = 4 x 31: no divisor fills a vector)
    # a quantized (QDQ) model's convolution weights sit behind DequantizeLinear: still constants; its
    # depthwise convolution has a bias (ir/bias_init.py)
    qdq = get_problem("L2/uint8_ds_block_s2_vww")
    assert [passes for _, passes in graph_alternatives(qdq)] == [NHWC, BIAS_INIT]
    har = get_problem("L2/conv1d_block_har")
    assert [passes for _, passes in graph_alternatives(har)] == [NHWC]
    (c1,) = [k.name for k in kernels(har.id, graph_key(NHWC)) if k.name.startswith("fused_conv1d1")]
    facts = analyze(graph_reference(har.id, graph_key(NHWC)).primfuncs()[c1], c1)
    assert contraction_plan(facts, 16).vt >= 16
    assert [passes for _, passes in graph_alternatives(get_problem("L1/softmax_mobilebert_attn"))] == [
        FAST_MATH
    ]
    # a Log: the polynomial that vectorizes (ir/fast_log.py)
    assert [passes for _, passes in graph_alternatives(get_problem("L1/tiny_log"))] == [FAST_LOG]
    key = graph_key(CLIP_AS_OPS + NHWC)
    ref = graph_reference(conv.id, key)
    main = ref.module["main"]
    signature = main.script().split("def main(")[1].split(")\n")[0]
    assert 'R.Tensor((3, 3, 8, 16), dtype="float32")' in signature  # main takes the HWIO weight
    lifted = ref.module["main_transform_params"].script()
    assert "R.Tensor((3, 3, 8, 16)" in lifted  # the weight's transpose is lifted: run once
    names = [k.name for k in kernels(conv.id, key)]
    assert len(names) == 3 and all(n in ref.kernel_calls() for n in names)  # in, conv, out (activations)
    assert [k.name for k in kernels(conv.id)] != names  # the reference's graph: the conv alone


def test_clamps_become_operators_before_channels_last():
    """ONNX Clip (ReLU6), imported as clamp kernels that ConvertLayout cannot see into, becomes Relax
    maximum / minimum first (ClipAsOps): channels last then leaves no transposes around the clamps, each
    clamp is fused into its convolution, and the judge finds the candidate correct; a kernel that is not
    a clamp with a 0-d bound is left alone."""
    from edgekernelbench.harness.api import evaluate
    from edgekernelbench.harness.timing import TimingConfig
    from edgekernelbench.ir.clip_ops import _clamp_kind
    from edgekernelbench.ir.spec import Decisions, KernelSpec
    from edgekernelbench.problems import get_problem
    from edgekernelbench.reference import relax_from_onnx
    from edgekernelbench.search.graph import BIAS_INIT, CLIP_AS_OPS, NHWC, graph_alternatives, graph_key
    from edgekernelbench.search.kernels import kernels

    pid = "L2/ds_block_vww_8x16"  # depthwise + pointwise, each + ReLU6
    (label, passes), (_, bias_init) = graph_alternatives(get_problem(pid))
    assert passes == CLIP_AS_OPS + NHWC and "clamps as operators" in label
    assert bias_init == BIAS_INIT  # its depthwise convolution has a bias
    before = [k.name for k in kernels(pid, graph_key(NHWC))]
    after = [k.name for k in kernels(pid, graph_key(passes))]
    assert any("transpose" in n and "maximum" in n for n in before)  # NCHW for each clamp, and back
    assert not any("transpose" in n and "maximum" in n for n in after)
    convs = [n for n in after if n.startswith("fused_conv2d")]
    assert len(convs) == 2 and all(n.endswith("maximum_minimum") or "_maximum" in n for n in convs)
    spec = KernelSpec(problem=pid, decisions=Decisions(graph={"passes": passes}), method="test")
    res = evaluate(pid, spec, "host-cpu", trials=2, timing=TimingConfig.quick(), baselines=("tvm-default",))
    assert res.correct, res.detail
    mod = relax_from_onnx(get_problem(pid).model)
    kinds = {gv.name_hint: _clamp_kind(f) for gv, f in mod.functions.items() if gv.name_hint != "main"}
    assert set(kinds.values()) == {"max", "min"}
    conv = relax_from_onnx(get_problem("L2/head_har").model)  # a dense layer's kernels: not clamps
    assert all(_clamp_kind(f) is None for gv, f in conv.functions.items() if gv.name_hint != "main")


def test_an_axis_without_whole_vectors_is_padded_first():
    """17 outputs per row (a prime, like 257 DFT bins): no divisor fills a vector, so the unpadded tile is
    one element (scalar code). The rules pad the axis to whole vectors first (pad_einsum: the weight copied
    with zeros), the space ranks padded points first, the judge finds the padded schedule correct; a
    matrix-vector product (the weight used once per call) is not padded."""
    from edgekernelbench.harness.api import evaluate
    from edgekernelbench.harness.timing import TimingConfig
    from edgekernelbench.problems import get_problem
    from edgekernelbench.search.kernels import kernels
    from edgekernelbench.search.rules import analyze, contraction_plan, rule_spec
    from edgekernelbench.search.rules.contraction import pad_multiples
    from edgekernelbench.search.variants import KernelSpace

    pid = "L1/tiny_matmul_odd"
    (k,) = kernels(pid)
    space = KernelSpace(pid, k.name, AVX2)
    assert contraction_plan(space.facts, 8).vt == 1 and pad_multiples(space.facts, 8) == [8, 16, 32]
    assert space.ranked[0][1].pad  # the cheapest point is a padded one
    spec = rule_spec(get_problem(pid), vector_lanes=8)
    assert "matmul/pad+tile+cache" in spec.notes
    res = evaluate(pid, spec, "host-cpu", trials=2, timing=TimingConfig.quick(), baselines=("tvm-default",))
    assert res.correct, res.detail
    # a padded point with its tile loops in panels order: correct too
    from edgekernelbench.agents.leka import build_spec

    cfg = next(c for _, c in space.ranked if c.pad and c.order == "panels")
    panels = build_spec(
        get_problem(pid), {k.name: space._record(cfg).layers}, "test", None, {k.name: k.workload}
    )
    res = evaluate(pid, panels, "host-cpu", trials=2, timing=TimingConfig.quick(), baselines=("tvm-default",))
    assert res.correct, res.detail
    from edgekernelbench.reference import build_reference

    funcs = build_reference(get_problem("L2/head_har")).primfuncs()  # 1 x 3968 @ 3968 x 100
    gemv = next(n for n in funcs if n.startswith("fused_matmul"))
    facts = analyze(funcs[gemv], gemv)
    assert contraction_plan(facts, 16).vt < 16 and pad_multiples(facts, 16) == []


def test_a_matrix_vector_product_streams_its_weight():
    """A dense layer at batch 1 (head_har: 1 x 3968 @ 3968 x 100; 100 outputs fill no whole number of 16-lane
    vectors) is scheduled by the stream rule: the output partitioned into whole chunks and a tail, the
    reduction outermost; the cost model ranks it first, the judge finds it correct at both vector widths. A
    product with more than one row (tiny_matmul_odd) is not a matrix-vector product."""
    from edgekernelbench.harness.api import evaluate
    from edgekernelbench.harness.timing import TimingConfig
    from edgekernelbench.problems import get_problem
    from edgekernelbench.search.graph import graph_reference
    from edgekernelbench.search.kernels import kernel_layers, kernel_script, kernels
    from edgekernelbench.search.rules import Skip, analyze, rule_spec, stream_plan
    from edgekernelbench.search.variants import KernelSpace

    pid = "L2/head_har"
    gemv = next(k for k in kernels(pid) if k.op_class == "dense")
    facts = analyze(graph_reference(pid).primfuncs()[gemv.name], gemv.name)
    p16, p8 = stream_plan(facts, 16), stream_plan(facts, 8)
    assert (p16.chunk, p16.main, p16.tail) == (64, 64, 36) and (p8.chunk, p8.main, p8.tail) == (32, 96, 4)
    assert KernelSpace(pid, gemv.name, AVX512).ranked[0][1].strategy == "stream"
    for lanes in (16, 8):
        spec = rule_spec(get_problem(pid), vector_lanes=lanes)
        assert f"{gemv.name}: dense/stream" in spec.notes
        res = evaluate(
            pid, spec, "host-cpu", trials=2, timing=TimingConfig.quick(), baselines=("tvm-default",)
        )
        assert res.correct, res.detail
    script = kernel_script(pid, kernel_layers(spec.decisions, gemv.name), gemv.name)
    assert script.count("T.vectorized") >= 2  # the chunks and the tail
    odd = next(iter(kernels("L1/tiny_matmul_odd")))
    with pytest.raises(Skip):
        stream_plan(analyze(graph_reference("L1/tiny_matmul_odd").primfuncs()[odd.name], odd.name), 8)


def pointwise_nhwc(h: int, w: int, c: int, o: int):
    """A 1x1 convolution in NHWC with HWIO weights, as the channels-last graph writes it."""
    from tvm import te

    x = te.placeholder((1, h, w, c), name="x")
    wt = te.placeholder((1, 1, c, o), name="w")
    rc = te.reduce_axis((0, c), "rc")
    y = te.compute(
        (1, h, w, o), lambda n, i, j, f: te.sum(x[n, i, j, rc] * wt[0, 0, rc, f], axis=rc), name="conv2d_nhwc"
    )
    return te.create_prim_func([x, wt, y])


def test_the_rows_of_a_small_image_are_one_unrolled_axis():
    """H x W of a pointwise convolution on a 3 x 2 image (yamnet's last layers) is one unrolled axis of the
    register tile: 6 rows of 4 vectors when the search asks for 24 accumulators (H alone gave 3 rows of 2
    vectors: 46 GFLOP/s where 6 x 4 ran at 103); the rules' own tile keeps 2 vectors per row."""
    from edgekernelbench.search.rules import analyze, contraction_plan

    facts = analyze(pointwise_nhwc(3, 2, 64, 128), "pw")
    p = contraction_plan(facts, 16, 4, 24)
    assert {1, 2} <= set(p.gu.members) and p.gu.extent == p.ut == 6 and p.vt == 64
    assert contraction_plan(facts, 16).nvec == 2  # the default tile with an unrolled axis: 2 vectors
    assert contraction_plan(facts, 16, 4, 8).ut == 2  # 8 accumulators: 2 rows of the merged axis
    # a 3x3 convolution's H and W do not merge (the input moves with both, by different strides)
    p3 = contraction_plan(analyze(conv3x3_nhwc(3, 2, 64, 128), "c3"), 16, 4, 24)
    assert p3.gu.extent < 6


def conv3x3_nhwc(h: int, w: int, c: int, o: int):
    """A 3 x 3 convolution, channels last, unpadded (output h x w)."""
    from tvm import te

    x = te.placeholder((1, h + 2, w + 2, c), name="x")
    wt = te.placeholder((3, 3, c, o), name="w")
    rc, ry, rx = te.reduce_axis((0, c), "rc"), te.reduce_axis((0, 3), "ry"), te.reduce_axis((0, 3), "rx")
    y = te.compute(
        (1, h, w, o),
        lambda n, i, j, f: te.sum(x[n, i + ry, j + rx, rc] * wt[ry, rx, rc, f], axis=[ry, rx, rc]),
        name="conv2d_nhwc",
    )
    return te.create_prim_func([x, wt, y])


def test_equal_estimates_rank_the_larger_register_tile_first(monkeypatch):
    """yamnet's 1024 x 1024 pointwise convolution on 3 x 2: the 6-row x 4-vector tile and a 2 x 4 tile in
    panels have the same estimate (their weight traffic); the larger tile, whose register reuse the model's
    memory side does not see, is ranked first (120 us measured, the 2 x 4 tile 222 us)."""
    from edgekernelbench.search import graph
    from edgekernelbench.search.variants import KernelSpace

    func = pointwise_nhwc(3, 2, 1024, 1024)
    monkeypatch.setattr(
        graph, "graph_reference", lambda *a, **k: type("R", (), {"primfuncs": lambda s: {"pw": func}})()
    )
    space = KernelSpace("L3/none", "pw", AVX512)
    (c0, top), (c1, _) = space.ranked[0], space.ranked[1]
    assert (top.acc_vectors, top.max_vectors) == (24, 4) and c0 <= c1


def test_weights_no_tile_shares_stream_from_where_the_whole_operand_lives(monkeypatch):
    """yamnet's 512 -> 1024 pointwise convolution on 3 x 2 positions: a 6 x 32 tile reads half of each
    weight row, a 6 x 64 tile the whole row; no weight is read twice in a call, so both stream all 2 MiB
    from beyond L2 (the model had credited the 32-wide tile's slices with a 128 KiB reuse distance and
    ranked it first: it measured 1.21-1.35x slower side by side, 47% against 62% of the peak). Bound by the
    same bytes, the larger register tile ranks first. An L2 that holds the weights keeps the estimate by
    reuse distance; a depthwise convolution's input (a window: its bytes by iter var count each input once
    per tap, and tiles share the halo) keeps it too."""
    from tvm import te

    from edgekernelbench.search import cost, graph
    from edgekernelbench.search.rules import analyze, contraction_plan
    from edgekernelbench.search.variants import KernelSpace

    # as the PackedWeights graph writes it: weight panels of 64 columns, D[r, no, ni] += X[r, k] W[no, k, ni]
    x = te.placeholder((6, 512), name="x")
    wt = te.placeholder((16, 512, 64), name="w")
    k = te.reduce_axis((0, 512), "k")
    d = te.compute((6, 16, 64), lambda r, no, ni: te.sum(x[r, k] * wt[no, k, ni], axis=k), name="packed")
    func = te.create_prim_func([x, wt, d])
    monkeypatch.setattr(
        graph, "graph_reference", lambda *a, **k: type("R", (), {"primfuncs": lambda s: {"pw": func}})()
    )
    (_, top), *_ = KernelSpace("L3/none", "pw", AVX512).ranked
    assert (top.acc_vectors, top.max_vectors) == (24, 4)

    facts = analyze(func, "pw")
    half, whole = (contraction_plan(facts, 16, vectors, 6 * vectors) for vectors in (2, 4))
    assert (half.ut, half.vt, whole.ut, whole.vt) == (6, 32, 6, 64)
    assert contraction_cost(whole, AVX512) <= contraction_cost(half, AVX512)
    roomy = Machine(lanes=16, vector_regs=32, l2_bytes=4 * 1024 * 1024)
    assert contraction_cost(half, roomy) < contraction_cost(half, AVX512)

    dw_facts = analyze(depthwise_nhwc(56, 56, 144), "dw")
    dw = dw_facts.block(dw_facts.main)
    image, weight = dw.reads
    assert cost._windowed(dw, image) and not cost._windowed(dw, weight)
    assert cost._operand_bytes(dw, image, 4) > AVX512.l2_bytes  # 9 taps x 56 x 56 x 144 floats
    assert not any(cost._windowed(facts.block(facts.main), r) for r in facts.block(facts.main).reads)


def depthwise_nhwc(h: int, w: int, c: int, k: int = 3):
    """A padded k x k depthwise convolution, channels last, as TOPI's group conv writes it (a padding block
    and a reduction over the window rows, the window columns and one input channel)."""
    from tvm import te

    x = te.placeholder((1, h, w, c), name="x")
    wt = te.placeholder((k, k, 1, c), name="w")
    p = k // 2
    pad = te.compute(
        (1, h + 2 * p, w + 2 * p, c),
        lambda n, i, j, f: te.if_then_else(
            te.all(i >= p, i < h + p, j >= p, j < w + p), x[n, i - p, j - p, f], 0.0
        ),
        name="pad_temp",
    )
    ry, rx, rc = te.reduce_axis((0, k), "ry"), te.reduce_axis((0, k), "rx"), te.reduce_axis((0, 1), "rc")
    y = te.compute(
        (1, h, w, c),
        lambda n, i, j, f: te.sum(pad[n, i + ry, j + rx, f + rc] * wt[ry, rx, rc, f], axis=[ry, rx, rc]),
        name="group_conv2d_nhwc",
    )
    return te.create_prim_func([x, wt, y])


def test_a_depthwise_tile_slides_along_its_window_where_that_loads_less():
    """A depthwise convolution's register tile along W, the axis its unrolled window column slides along,
    where that loads fewer vectors per FMA than a tile along H (5 columns: 7 inputs and 3 weights per 15
    FMAs, against 5 x 3 inputs) and its inputs fit in the registers beside the accumulators; else along H
    as before: a tile of 1 column, 8 lanes (16 registers), 24 accumulators of one vector each, a standard
    convolution (its channels' loop inside the window). The sliding tile stays exact (against NumPy)."""
    import numpy as np
    import tvm

    from edgekernelbench.ir.replay import LayerRecorder
    from edgekernelbench.search.rules import analyze, contraction_plan, schedule_contraction

    facts = analyze(depthwise_nhwc(25, 5, 64), "dw")
    p = contraction_plan(facts, 16, 2, 12)
    assert p.gu.members == [2] and (p.ut, p.vt) == (5, 32)  # 5 columns x 2 vectors
    assert contraction_plan(facts, 16).gu.members == [1]  # the default tile: 1 column would load more
    assert contraction_plan(facts, 8, 2, 12).gu.members == [1]  # 2 x (5 + 7) vectors > 16 registers
    wide = analyze(depthwise_nhwc(48, 48, 16), "dw")
    assert contraction_plan(wide, 16, 1, 24).gu.members == [1]  # 24 + 26 vectors > 32 registers
    assert contraction_plan(wide, 16, 1, 12).gu.members == [2]
    assert contraction_plan(analyze(conv3x3_nhwc(8, 8, 16, 64), "c3"), 16, 2, 12).gu.members == [1]

    rec = LayerRecorder(depthwise_nhwc(25, 5, 64))
    info = schedule_contraction(rec, facts, 16, max_vectors=2, acc_vectors=12)
    assert info["unroll_axis"] == [2] and info["unroll_tile"] == 5
    lib = tvm.compile(tvm.IRModule({"main": rec.sch.mod["main"].with_attr("global_symbol", "main")}))
    rng = np.random.default_rng(0)
    xv, wv = rng.standard_normal((1, 25, 5, 64), "float32"), rng.standard_normal((3, 3, 1, 64), "float32")
    out = tvm.runtime.tensor(np.zeros((1, 25, 5, 64), "float32"))
    lib["main"](tvm.runtime.tensor(xv), tvm.runtime.tensor(wv), out)
    xp = np.pad(xv.astype("float64"), ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = sum(xp[:, i : i + 25, j : j + 5, :] * wv[i, j, 0] for i in range(3) for j in range(3))
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)


def test_a_register_tile_is_never_three_vectors_wide():
    """144 channels, 4 vectors at most: 48 lanes divide the axis, but TVM vectorizes the tile as one LLVM
    vector of 48 floats, which this LLVM builds with a per-lane insert per element (inverted_residual_s2's
    depthwise: 455 -> 43 us with 16 lanes); the tile takes one vector (32 does not divide 144). 96 channels
    take 2."""
    from edgekernelbench.search.rules import analyze, contraction_plan

    assert contraction_plan(analyze(depthwise_nhwc(14, 14, 144), "dw"), 16, 4, 12).vt == 16
    assert contraction_plan(analyze(depthwise_nhwc(14, 14, 96), "dw"), 16, 4, 12).vt == 32
    assert contraction_plan(analyze(depthwise_nhwc(14, 14, 64), "dw"), 16, 4, 12).vt == 64


def test_a_short_axis_is_tiled_whole_where_the_other_would_be_cut(monkeypatch):
    """KWS's stem (10 x 4 window, stride 2, one input channel, 25 x 5 x 64 outputs, padding inlined): the
    register tile takes all 5 columns rather than 5 of the 25 rows (the same reuse, the same 20
    accumulators), so each unrolled column's bounds check is a constant; the judge finds the cost model's
    first point of that kernel correct."""
    from edgekernelbench.agents.leka import Whole, build_spec
    from edgekernelbench.harness.api import evaluate
    from edgekernelbench.harness.timing import TimingConfig
    from edgekernelbench.problems import get_problem
    from edgekernelbench.search.graph import NHWC, graph_key, graph_reference
    from edgekernelbench.search.kernels import kernels
    from edgekernelbench.search.rules import analyze, contraction, contraction_plan
    from edgekernelbench.search.variants import KernelSpace

    pid, key = "L1/conv2d_kws_stem", graph_key(NHWC)
    name = next(n for n in graph_reference(pid, key).primfuncs() if n.startswith("fused_conv2d"))
    facts = analyze(graph_reference(pid, key).primfuncs()[name], name)
    p = contraction_plan(facts, 16, 4, 24)
    assert p.gu.members == [2] and p.ut == p.gu.extent == 5 and p.vt == 64
    with monkeypatch.context() as m:
        m.setattr(contraction, "_whole_tile", lambda b, groups, gv, gu, ut, nvec, acc: (gu, ut))
        assert contraction_plan(facts, 16, 4, 24).gu.members == [1]  # 5 of the 25 rows before
    space = KernelSpace(pid, name, AVX512, 1, key)
    top = next(v for _, cfg in space.ranked if (v := space._record(cfg)) is not None)
    workloads = {k.name: k.workload for k in kernels(pid, key)}
    spec = build_spec(get_problem(pid), {name: dict(top.layers)}, "test", None, workloads, Whole(list(NHWC)))
    res = evaluate(pid, spec, "host-cpu", trials=2, timing=TimingConfig.quick(), baselines=())
    assert res.correct, res.detail


def test_a_dot_kernel_is_ranked_over_its_vnni_tiles_only(monkeypatch):
    """A u8 x s8 dot kernel (ir/int8_dot.py) where the target has VNNI: its space is the VNNI tiles, each
    tile that schedule_dot makes once (rows x vectors cut to the kernel's divisors), every one estimated by
    cost.dot_cost, cheapest first; no float tile (they leave vpdpbusd unused: none of the 54 judged in the
    nineteenth run's searches was kept). Without VNNI the float tiles are its space. Ranking only: nothing
    is built, so this holds on a CPU without VNNI too."""
    from edgekernelbench.search.graph import INT8_DOT, graph_key
    from edgekernelbench.search.rules import driver
    from edgekernelbench.search.rules.analysis import analyze
    from edgekernelbench.search.rules.dot import DOT_TILES, dot_plan, dot_strategy
    from edgekernelbench.search.variants import KernelSpace

    pid, key = "L1/tiny_matmulint_i8_u8w", graph_key(INT8_DOT)  # rows 2 x 8, K 24, N 32
    monkeypatch.setattr(driver, "vnni_available", lambda: True)
    space = KernelSpace(pid, "dot_u8s8", AVX512, 1, key)
    labels = [cfg.label for _, cfg in space.ranked]
    assert labels and all(label.startswith("vnni ") for label in labels)
    facts = analyze(space.func, "dot_u8s8")
    tiles = {(p.ut, p.nv) for p in (dot_plan(facts, r, v) for r, v in DOT_TILES)}
    assert len(labels) == len(tiles) < len(DOT_TILES)  # 8 rows and 2 panels: several tiles are the same
    costs = [space.estimate(label) for label in labels]
    assert None not in costs and costs == sorted(costs)
    assert dot_strategy(4, 4) + "/16 lanes" in labels  # the rules' start is in its space
    monkeypatch.setattr(driver, "vnni_available", lambda: False)
    plain = KernelSpace(pid, "dot_u8s8", AVX512, 1, key)
    assert plain.ranked and not any(cfg.strategy.startswith("vnni") for _, cfg in plain.ranked)


def test_a_dot_tile_that_hides_the_latency_and_fits_costs_least():
    """cost.dot_cost: 4 accumulators (one row of 4 vectors) wait on vpdpbusd's latency every step; 10 do not;
    40 spill (40 + 4 weight vectors + a broadcast of 32 registers)."""
    from edgekernelbench.search.cost import dot_cost
    from edgekernelbench.search.rules.dot import DotPlan

    rows, no, ko = 40, 8, 16  # 40 rows, 128 columns, K = 64

    def cost(ut, nv):
        return dot_cost(DotPlan(ut, nv, (rows // ut) * (no // nv), ko, no), AVX512)

    assert cost(5, 2) < cost(1, 4)
    assert cost(5, 2) < cost(10, 4)
