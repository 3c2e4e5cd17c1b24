"""Layout transposes through registers (ir/block_transpose.py): the view, the kernel, the graph pass, the
judge's verdict, and the search's acceptance of a graph change that adds kernel calls."""

from __future__ import annotations

import numpy as np
import pytest

from edgekernelbench.agents.episode import ProfileRow
from edgekernelbench.ir.block_transpose import BLOCK, block_transpose_func, tile_width, transpose_view
from edgekernelbench.search.graph import BLOCK_TRANSPOSE, NHWC, graph_alternatives, graph_key, graph_reference


def test_the_view_of_a_permutation():
    assert transpose_view((1, 64, 6, 6), (0, 2, 3, 1)) == (1, 64, 36)  # NCHW -> NHWC
    assert transpose_view((1, 6, 6, 128), (0, 3, 1, 2)) == (1, 36, 128)  # NHWC -> NCHW
    assert transpose_view((2, 3, 20, 17), (0, 1, 3, 2)) == (6, 20, 17)  # batch axes kept in place
    assert transpose_view((40, 50), (1, 0)) == (1, 40, 50)
    assert transpose_view((1, 8, 4, 32), (0, 2, 1, 3)) is None  # the last axis stays: contiguous runs
    assert transpose_view((2, 3, 4), (2, 1, 0)) is None  # not two blocks swapped
    assert transpose_view((2, 3, 4), (0, 1, 2)) is None  # the identity


def test_tile_widths():
    assert tile_width(4, 1536, 32) == 16
    assert tile_width(1, 1536, 32) == 32
    assert tile_width(1, 36, 20) == 16  # a byte side shorter than 32: tiles of 16
    assert tile_width(8, 9, 9) == 8
    assert tile_width(4, 15, 64) is None  # no whole tile: TVM's loop stays
    assert tile_width(3, 64, 64) is None


@pytest.mark.parametrize(
    ("shape", "axes", "dtype"),
    [
        ((1, 64, 6, 6), (0, 2, 3, 1), "float32"),  # 36 pixels: a last tile overlapping the one before
        ((1, 6, 6, 128), (0, 3, 1, 2), "uint8"),  # 32-byte tiles, rows overlapping
        ((2, 3, 20, 17), (0, 1, 3, 2), "int32"),  # six transposes, both sides overlapping
        ((33, 70), (1, 0), "float64"),
        ((1, 18, 40), (0, 2, 1), "float16"),
        ((1, 32, 16), (0, 2, 1), "int8"),  # exactly one tile of 16 one way
    ],
)
def test_the_kernel_is_the_transpose_bit_for_bit(shape, axes, dtype):
    """The kernel alone, on the host, against NumPy's transpose: every element moved, none computed (NaN
    payloads and signed zeros included for the float types)."""
    import tvm

    rng = np.random.default_rng(0)
    if dtype.startswith("float"):
        a = rng.standard_normal(shape).astype(dtype)
        a.reshape(-1)[:3] = [np.nan, -0.0, np.inf]
    else:
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
    view = transpose_view(shape, axes)
    out_shape = tuple(shape[i] for i in axes)
    t = tile_width(np.dtype(dtype).itemsize, view[1], view[2])
    func = block_transpose_func(shape, out_shape, *view, dtype, t).with_attr("global_symbol", "main")
    lib = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    dev = tvm.cpu(0)
    out = tvm.runtime.tensor(np.zeros(out_shape, dtype), dev)
    lib["main"](tvm.runtime.tensor(a, dev), out)
    assert out.numpy().tobytes() == np.ascontiguousarray(a.transpose(axes)).tobytes()


def test_channels_last_transposes_are_blocked_and_judged_correct():
    """On a pointwise convolution in NCHW: offered after channels last on the host; both of channels last's
    transposes (into NHWC and back) become the kernel, opaque to fusion and to the schedule search; the
    judge (an independent oracle) finds the candidate correct."""
    from test_packed_gemm import _rule_spec

    from edgekernelbench.harness.api import evaluate
    from edgekernelbench.harness.timing import TimingConfig
    from edgekernelbench.problems import get_problem
    from edgekernelbench.search.kernels import kernels

    pid = "L1/pwconv_vww_64x128"
    offered = [p for _, p in graph_alternatives(get_problem(pid), "host-cpu")]
    assert BLOCK_TRANSPOSE in offered
    assert BLOCK_TRANSPOSE not in [p for _, p in graph_alternatives(get_problem(pid))]  # no backend
    passes = NHWC + BLOCK_TRANSPOSE
    key = graph_key(passes)
    funcs = graph_reference(pid, key).primfuncs()
    blocked = [k for k in kernels(pid, key) if k.name.startswith(BLOCK)]
    assert len(blocked) == 2 and all(k.op_class == "opaque" for k in blocked)
    assert all(int(funcs[k.name].attrs["op_pattern"]) == 8 for k in blocked)
    spec = _rule_spec(pid, passes)
    assert not any(k.name in spec.decisions.loop for k in blocked)  # nothing to schedule
    res = evaluate(pid, spec, "host-cpu", trials=2, timing=TimingConfig.quick(), baselines=("tvm-default",))
    assert res.correct, res.detail


def test_a_graph_change_that_adds_kernel_calls_must_be_faster_as_a_whole():
    """`improves_whole` keeps a graph change whose kernels' total is lower though the whole model is not
    measurably faster -- but not when the change calls more kernels: their calls cost main time that no
    kernel total holds."""
    from edgekernelbench.agents import leka
    from edgekernelbench.records import Result, kernel_times

    def res(s, us):
        r = Result(problem="L1/x", sample=4, backend="host-cpu", correct=True, speedups={"tvm-default": s})
        r.speedup_ci = {"tvm-default": [s * 0.95, s * 1.05]}
        r.kernels = kernel_times(
            [{"kernel": f"k{i}", "median": u * 1e-6, "share": 0.1} for i, u in enumerate(us)]
        )
        return r

    best_rows = [
        ProfileRow(kernel="a", us=10.0, share=0.5, calls=1),
        ProfileRow(kernel="b", us=10.0, share=0.5, calls=1),
    ]
    assert leka.improves_whole(res(55.7, [8.0, 8.0]), 55.0, best_rows)  # two calls, 20% less kernel time
    assert not leka.improves_whole(res(55.7, [5.0, 5.0, 5.0]), 55.0, best_rows)  # three calls
    assert leka.improves_whole(res(62.0, [5.0, 5.0, 5.0]), 55.0, best_rows)  # faster as a whole


def test_a_graph_change_that_rewrites_nothing_is_not_judged():
    """`same_graph`: BlockTranspose on a model whose transposes hold no whole tile (here, none at all) leaves
    the module as it was -- LEKA's graph layer then skips it without spending a judgment; on channels last's
    transposes of a pointwise convolution it does not."""
    from edgekernelbench.search.graph import same_graph

    assert same_graph("L1/softmax_mobilebert_attn", "", graph_key(BLOCK_TRANSPOSE))
    pid = "L1/pwconv_vww_64x128"
    assert not same_graph(pid, graph_key(NHWC), graph_key(NHWC + BLOCK_TRANSPOSE))
    assert same_graph(pid, graph_key(NHWC), graph_key(NHWC))
