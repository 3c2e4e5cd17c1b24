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
# a channels-first pointwise convolution with at most this many pixels (one 512-bit vector of them) is
# rewritten too: vectorized over its pixels it fills at most one vector per weight load
FEW_PIXELS = 16
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


def _conv_kind(call) -> str | None:
    """How a float32 pointwise convolution is rewritten: "nhwc" (channels last, the GEMM as it is), "nchw"
    (channels first with at most FEW_PIXELS pixels: the activations transposed to channels last around the
    GEMM), None (not rewritten: a channels-first convolution with more pixels vectorizes over them)."""
    a = call.attrs
    if not _pointwise(call):
        return None
    if a.data_layout == "NHWC" and a.out_layout == "NHWC":
        return "nhwc"
    h, w = [int(x) for x in call.ty.shape][2:]
    if a.data_layout == "NCHW" and a.out_layout == "NCHW" and h * w <= FEW_PIXELS:
        return "nchw"
    return None


def _packed_gemm(rw, call):
    """`call` rewritten onto the packed kernel where it is a float32 pointwise convolution (`_conv_kind`) or a
    matmul by a 2-D weight, the weight is weights-only and N has a panel width; None otherwise."""
    from tvm import relax
    from tvm.relax import op as R

    if str(getattr(call.ty, "dtype", "")) != "float32":
        return None
    kind = None
    if _op(call) == "relax.nn.conv2d":
        kind = _conv_kind(call)
        if kind is None:
            return None
    elif len(call.args[1].ty.shape) != 2:  # not a matmul by a 2-D weight
        return None
    a_arg, w_arg = call.args
    if not weight_only(rw.var2val, rw.weights, w_arg):
        return None
    a, w = rw.visit_expr(a_arg), rw.visit_expr(w_arg)
    if str(a.ty.dtype) != "float32" or str(w.ty.dtype) != "float32":
        return None
    out_shape = [int(x) for x in call.ty.shape]
    w_shape = [int(x) for x in w.ty.shape]
    shape = [int(x) for x in a.ty.shape]
    if kind == "nchw":  # OIHW [N, K, 1, 1] as [K, N]; the pixels' channels last, and back after
        n_, k_ = w_shape[:2]
        shape = [shape[0], *shape[2:], shape[1]]
        gemm_shape = [out_shape[0], *out_shape[2:], n_]
    else:
        k_, n_ = w_shape[-2:]  # HWIO [1, 1, K, N] or a matmul's [K, N]
        gemm_shape = out_shape
    if len(shape) < 2 or shape[-1] != k_ or gemm_shape != [*shape[:-1], n_]:
        return None  # a batch broadcast against the weight's, or another layout: not this GEMM
    panel = panel_width(n_)
    if panel is None:
        return None
    bb = rw.builder_
    if kind == "nchw":
        w2 = R.permute_dims(R.reshape(w, (n_, k_)), [1, 0])
        a = bb.emit(R.permute_dims(a, [0, 2, 3, 1]))
    else:
        w2 = R.reshape(w, (k_, n_)) if kind else w
    packed = bb.emit(R.permute_dims(R.reshape(w2, (k_, n_ // panel, panel)), [1, 0, 2]))
    name = CONV_BLOCK if kind else MATMUL_BLOCK
    gv = bb.add_func(packed_func(tuple(shape[:-1]), k_, n_, panel, kind is not None), name)
    out = relax.call_tir(gv, [a, packed], relax.TensorType(tuple(gemm_shape), "float32"))
    return bb.emit(R.permute_dims(bb.emit(out), [0, 3, 1, 2])) if kind == "nchw" else bb.emit(out)


def packed_gemm_pass():
    """The graph pass (name "PackedWeights"): in every Relax function, the float GEMMs by a weight rewritten
    onto packed panels (`_packed_gemm`)."""
    return weights_pass("PackedWeights", call_rewriter(("relax.nn.conv2d", "relax.matmul"), _packed_gemm))
