"""Float GEMMs on packed weight panels: the graph pass "PackedWeights" (`Decisions.graph["passes"]`).

A channels-last pointwise convolution (HWIO weight [1, 1, K, N]) and a matmul by a 2-D weight [K, N] read
the weight row by row: for a register tile of `vt` output columns, one reduction step loads vt floats, and
the next step's vt floats are N floats further on. With N = 1024 that is a 256-byte run every 4 KB: each
step touches another page, the hardware prefetchers (which stay within a page) do not follow, and in the
model, where the weight comes from L3 or DRAM, the kernel waits on the memory: yamnet's 1024 x 1024
pointwise convolution on 3 x 2 pixels took 112 us alone and 382 us in the model's call order
(benchmarks/in_order.py). ONNX Runtime's MLAS packs such weights once into column panels.

The pass rewrites each such operator, when the weight depends on weights and constants only, into

    D[*rows, no * P + ni] = sum_k A[*rows, k] * Bp[no, k, ni]        Bp = the weight as [N / P, K, P]

with panels of P float32 columns (the widest of PANELS that divides N and leaves more than one panel):
each panel is one contiguous stream, P floats per reduction step. Bp depends on weights only:
LiftTransformParams moves its re-layout into main_transform_params, computed once at load. The kernel
(`packed_func`, block `conv2d_nhwc_packed` or `matmul_packed`) is plain TIR, fusable with its elementwise
epilogue (bias, activation) like the operator it replaces; the same sums in the same order (the reduction
over k), so the values are the float GEMM's.
"""

from __future__ import annotations

from .int8_dot import _op, _pointwise, call_rewriter, weight_only, weights_pass

PANELS = (64, 32, 16)  # panel widths in float32 columns, the widest that divides N first
CONV_BLOCK, MATMUL_BLOCK = "conv2d_nhwc_packed", "matmul_packed"


def panel_width(n: int) -> int | None:
    """The panel width for N output columns: the widest of PANELS that divides N into more than one panel
    (one panel is the weight as it is); None when none does."""
    return next((p for p in PANELS if n % p == 0 and n > p), None)


def packed_func(rows: tuple[int, ...], k_: int, n_: int, panel: int, conv: bool):
    """The kernel: A [*rows, K] float32, Bp [N / panel, K, panel] float32 -> D [*rows, N] float32 (`rows`: a
    matmul's rows, a convolution's N, H, W, kept as they are so the graph around needs no reshape)."""
    from tvm.script import from_source
    from tvm.script import tirx as T

    block = CONV_BLOCK if conv else MATMUL_BLOCK
    lv = ", ".join(f"r{i}" for i in range(len(rows)))
    vv = ", ".join(f"v{i}" for i in range(len(rows)))
    i64 = lambda x: f"T.int64({x})"  # noqa: E731 -- Relax's shapes: FuseTIR maps buffers of equal type only
    shape = ", ".join(i64(x) for x in rows)
    kk, nn, no, p = i64(k_), i64(n_), i64(n_ // panel), i64(panel)
    d = f"D[{vv}, vno * {p} + vni]"
    src = f"""
@T.prim_func(private=True, s_tir=True)
def {block}(
    A: T.Buffer(({shape}, {kk}), "float32"),
    Bp: T.Buffer(({no}, {kk}, {p}), "float32"),
    D: T.Buffer(({shape}, {nn}), "float32"),
):
    T.func_attr({{"tirx.noalias": True, "op_pattern": 4}})
    for {lv}, no, ni, k in T.grid({shape}, {no}, {p}, {kk}):
        with T.sblock("{block}"):
            {vv}, vno, vni, vk = T.axis.remap("{"S" * len(rows)}SSR", [{lv}, no, ni, k])
            T.reads(A[{vv}, vk], Bp[vno, vk, vni])
            T.writes({d})
            with T.init():
                {d} = T.float32(0)
            {d} = {d} + A[{vv}, vk] * Bp[vno, vk, vni]
"""
    return from_source(src, extra_vars={"T": T})


def _packed_gemm(rw, call):
    """`call` rewritten onto the packed kernel where it is a float32 channels-last pointwise convolution or a
    matmul by a 2-D weight, the weight is weights-only and N has a panel width; None otherwise."""
    from tvm import relax
    from tvm.relax import op as R

    if str(getattr(call.ty, "dtype", "")) != "float32":
        return None
    if _op(call) == "relax.nn.conv2d":
        a = call.attrs
        if not (_pointwise(call) and a.data_layout == "NHWC" and a.out_layout == "NHWC"):
            return None
        conv = True
    elif len(call.args[1].ty.shape) == 2:  # a matmul by a 2-D weight
        conv = False
    else:
        return None
    a_arg, w_arg = call.args
    if not weight_only(rw.var2val, rw.weights, w_arg):
        return None
    a, w = rw.visit_expr(a_arg), rw.visit_expr(w_arg)
    shape = [int(x) for x in a.ty.shape]
    w_shape = [int(x) for x in w.ty.shape]
    k_, n_ = w_shape[-2:]
    out_shape = [int(x) for x in call.ty.shape]
    if len(shape) < 2 or shape[-1] != k_ or out_shape != [*shape[:-1], n_]:
        return None  # a batch broadcast against the weight's, or another layout: not this GEMM
    panel = panel_width(n_)
    if panel is None or str(a.ty.dtype) != "float32" or str(w.ty.dtype) != "float32":
        return None
    bb = rw.builder_
    w2 = R.reshape(w, (k_, n_)) if conv else w
    packed = bb.emit(R.permute_dims(R.reshape(w2, (k_, n_ // panel, panel)), [1, 0, 2]))
    name = CONV_BLOCK if conv else MATMUL_BLOCK
    gv = bb.add_func(packed_func(tuple(shape[:-1]), k_, n_, panel, conv), name)
    return bb.emit(relax.call_tir(gv, [a, packed], relax.TensorType(tuple(out_shape), "float32")))


def packed_gemm_pass():
    """The graph pass (name "PackedWeights"): in every Relax function, the float GEMMs by a weight rewritten
    onto packed panels (`_packed_gemm`)."""
    return weights_pass("PackedWeights", call_rewriter(("relax.nn.conv2d", "relax.matmul"), _packed_gemm))
