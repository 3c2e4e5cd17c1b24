"""Rule-based schedules (search/rules/) and the model-free candidates (reference_candidates.py)."""

from __future__ import annotations

import json

import pytest

from edgekernelbench.errors import UnknownProblem
from edgekernelbench.generators.reference_candidates import reference_spec, write_reference_candidates
from edgekernelbench.ir.replay import materialize, workload_key
from edgekernelbench.ir.spec import KernelSpec, load_candidate
from edgekernelbench.problems import get_problem
from edgekernelbench.reference import build_reference_uncached
from edgekernelbench.search import rules

# (problem, operator class of its main kernel, kernel that must get loop-layer decisions)
CASES = [
    ("L1/dwconv3x3_kws", "depthwise", "fused_conv2d_add_relu"),
    ("L1/dense_kws_classifier", "dense", "fused_matmul_add"),
    ("L1/softmax_kws_classifier", "multi-reduction", None),
    ("L1/add_residual_resnet8", "injective", None),
]


def _problem(pid):
    try:
        return get_problem(pid)
    except UnknownProblem:
        pytest.skip(f"{pid} is not registered")


@pytest.fixture(scope="module")
def specs():
    out = {}
    for pid, _, _ in CASES:
        try:
            p = get_problem(pid)
        except UnknownProblem:
            continue
        out[pid] = (p, rules.rule_spec(p, vector_lanes=16))
    return out


@pytest.mark.parametrize("pid,op_class,conv_or_dense", CASES)
def test_rule_spec_roundtrips_and_materializes(specs, pid, op_class, conv_or_dense):
    if pid not in specs:
        pytest.skip(f"{pid} is not registered")
    problem, spec = specs[pid]
    assert spec.module is None and spec.method == "rules" and spec.problem == pid
    back = KernelSpec.from_json(spec.to_json())
    assert back.to_dict() == spec.to_dict()

    ref = build_reference_uncached(problem)  # materialize edits the reference it replays on
    keys = {name: workload_key(f) for name, f in ref.primfuncs().items()}
    mod = materialize(back, problem, ref)
    scheduled = back.decisions.scheduled_funcs()
    assert scheduled, "no PrimFunc got a decision"
    assert set(back.decisions.workloads) == set(scheduled)
    for name in scheduled:
        assert back.decisions.workloads[name] == keys[name]
        assert name in {gv.name_hint for gv in mod.functions}
    assert not any(n.startswith("main") for n in scheduled)  # main_transform_params stays as is
    if conv_or_dense:
        assert back.decisions.loop.get(conv_or_dense), f"no loop-layer decisions for {conv_or_dense}"
    classes = {fs.name: fs.op_class for fs in rules.rule_schedules(problem, vector_lanes=16)}
    assert op_class in classes.values()


def test_rule_spec_is_correct_under_evaluate(specs):
    from edgekernelbench.harness.api import evaluate

    pid = "L1/dwconv3x3_kws"
    if pid not in specs:
        pytest.skip(f"{pid} is not registered")
    problem, spec = specs[pid]
    res = evaluate(problem, spec, measure=False, trials=2)
    assert res.correct, (res.reason, res.detail)


def test_layers_are_recorded_in_order(specs):
    problem, spec = specs.get("L1/dwconv3x3_kws") or pytest.skip("L1/dwconv3x3_kws is not registered")
    name = "fused_conv2d_add_relu"
    layers = [layer for layer, _ in spec.decisions.layer_traces(name)]
    assert layers[0] == "loop" and "memory" in layers  # tiling, then the accumulator (cache_write)
    memory_kinds = {inst[0] for inst in spec.decisions.memory[name][0]}
    assert "CacheWrite" in memory_kinds
    loop_kinds = {inst[0] for inst in spec.decisions.loop[name][0]}
    assert {"Split", "Reorder", "Vectorize"} <= loop_kinds


def test_tiles_of_fused_axes_are_rectangles():
    g = rules.AxisGroup(members=[2, 3], extents=[28, 28], write=1, reads=[1])
    tiles = g.tiles()
    assert 14 in tiles and 28 in tiles and 56 in tiles
    assert 16 not in tiles and 32 not in tiles  # would straddle rows of 28
    assert rules.vec_tile(28, 16) == 14  # never 16 + 12
    assert rules.vec_tile(64, 16, 2) == 32
    assert rules.vec_tile(5, 16) == 5
    # a register tile's vectors: a power of two where one divides (48 floats as one LLVM vector: per-lane inserts)
    assert rules.vec_tile(144, 16, 4) == 48 and rules.vec_tile(144, 16, 4, pow2=True) == 16
    assert rules.vec_tile(48, 16, 4, pow2=True) == 16 and rules.vec_tile(24, 8, 4, pow2=True) == 8
    assert rules.vec_tile(64, 16, 4, pow2=True) == 64 and rules.vec_tile(96, 16, 4, pow2=True) == 32
    assert rules.default_vector_lanes("znver4") == 16
    assert rules.default_vector_lanes("cortex-a72") == 8


def test_reference_spec_is_the_reference_script():
    problem = _problem("L1/add_residual_resnet8")
    spec = reference_spec(problem)
    assert spec.method == "reference" and spec.decisions.is_empty()
    assert spec.module == build_reference_uncached(problem).script()


def test_write_reference_candidates(tmp_path):
    problems = [_problem("L1/add_residual_resnet8"), _problem("L1/dense_kws_classifier")]
    paths = write_reference_candidates(problems, tmp_path, vector_lanes=16)
    expected = []
    for p in problems:
        d = tmp_path / "candidates" / p.id
        expected += [d / "sample0.py", d / "sample1.json"]
    assert paths == expected
    assert all(path.is_file() for path in expected)
    for p in problems:
        d = tmp_path / "candidates" / p.id
        ref = load_candidate(d / "sample0.py", p.id)
        assert ref.module.strip() == build_reference_uncached(p).script().strip()
        spec = load_candidate(d / "sample1.json", p.id)
        assert spec.method == "rules" and spec.module is None
        assert json.loads((d / "sample1.json").read_text())["problem"] == p.id


def test_epilogue_with_two_consumers_still_builds():
    """x * relu6(x + 3) / 6 after a conv: reverse_compute_inline of `x + 3` into the bias add is
    accepted by TVM but leaves the multiply reading a buffer nobody writes; the rules skip it."""
    problem = _problem("L2/se_bottleneck_mbv3s_40ch")
    name = "fused_conv2d_add_add1_tir_clip_divide_multiply"
    funcs = build_reference_uncached(problem).primfuncs()
    if name not in funcs:
        pytest.skip(f"{problem.id} no longer has {name}")
    fs = rules.schedule_func(funcs[name], name, 16, target=rules.build_target())
    assert fs.strategy == "tile+cache", fs.failures
    assert "T_add1" not in fs.info["epilogue_inlined"]


def test_a_layout_copy_that_gathers_is_tiled_and_stays_exact():
    """The NHWC -> NCHW copy at a channels-last graph's exit (here fused with ReLU6): its output's
    innermost axis reads one element per input row (stride C). The rules tile it (the input's contiguous
    axis x the output's, the latter a vector) instead of leaving it to LLVM as a scalar loop; it stays
    exact."""
    import numpy as np
    import tvm

    from edgekernelbench.ir.replay import LayerRecorder
    from edgekernelbench.search.graph import NHWC, graph_key, graph_reference

    name = "fused_transpose1_maximum_minimum"
    func = graph_reference("L1/tiny_conv3x3", graph_key(NHWC)).primfuncs()[name]
    fs = rules.schedule_func(func, name, 16, target=rules.build_target())
    assert fs.strategy == "vectorize", fs.failures
    assert [v.get("transpose_tile") for v in fs.info.values() if isinstance(v, dict)] == [[16, 10]], fs.info
    rec = LayerRecorder(func)
    rules.schedule_injective(rec, rules.analyze(func, name), 16)
    lib = tvm.compile(tvm.IRModule({"main": rec.sch.mod["main"].with_attr("global_symbol", "main")}))
    x = np.random.default_rng(0).uniform(-2, 8, (1, 10, 10, 16)).astype("float32")
    lo, hi = (tvm.runtime.tensor(np.array(v, "float32")) for v in (0.0, 6.0))
    out = tvm.runtime.tensor(np.zeros((1, 16, 10, 10), "float32"))
    lib["main"](tvm.runtime.tensor(x), lo, hi, out)
    assert np.array_equal(out.numpy(), np.clip(x.transpose(0, 3, 1, 2), 0.0, 6.0))


@pytest.mark.parametrize("lanes", [8, 16])
def test_the_register_tile_is_a_stack_array_not_a_workspace(lanes):
    """A tiled contraction's accumulators (cache_write) are a small "global" buffer, which TVM puts on the
    stack on a CPU and LLVM keeps in registers; a "local" one became a TVMBackendAllocWorkspace /
    FreeWorkspace pair in every call (6% of a 0.6 us depthwise convolution, half of a 0.1 us dense)."""
    import tvm

    from edgekernelbench.ir.replay import apply_trace, combine_layers
    from edgekernelbench.search.graph import NHWC, graph_key, graph_reference

    # channels last: the padding is inlined (its checks are per row), the accumulators the only buffer
    name = "fused_conv2d_add"
    funcs = graph_reference("L1/tiny_conv3x3", graph_key(NHWC)).primfuncs()
    fs = rules.schedule_func(funcs[name], name, lanes, target=rules.build_target())
    assert fs.strategy == "tile+cache", fs.failures
    trace, where = combine_layers([(k, fs.traces[k]) for k in ("loop", "memory", "target") if k in fs.traces])
    func = apply_trace(funcs[name], trace, name, where).mod["main"].with_attr("global_symbol", "k")
    ll = tvm.compile(tvm.IRModule({"k": func}), rules.build_target()).mod.inspect_source("ll")
    uses = [ln for ln in ll.splitlines() if "@__TVMBackendAllocWorkspace" in ln and not ln.startswith("@")]
    assert "define" in ll and not uses, uses  # the pointer's declaration is always there, never loaded
