"""Layout transposes through registers: the graph pass "BlockTranspose" (`Decisions.graph["passes"]`).

Channels last (ConvertLayout to NHWC) transposes the activations where the graph enters and leaves that
layout: NCHW -> NHWC moves the channel axis from outside the pixels to inside them. TVM lowers such a
`permute_dims` to a loop over the output whose vectorized innermost axis reads the input with a stride:
LLVM assembles every output vector from 16 scalar loads and inserts (vinsertps, one shuffle micro-op per
element). conv2d_yamnet_stem's output transpose (48 x 32 pixels x 32 channels, float32) took 13.2 us,
twice its convolution (6.7 us); uint8_ds_block_s2_vww's two transposes (with its dequantize and
requantize fused in) were 65% of the block's time.

This pass replaces each `permute_dims` of an activation that is a transpose of two blocks of axes (the
axes before them, if any, kept in place: [*batch, rows..., cols...] -> [*batch, cols..., rows...]) by a
kernel that transposes t x t tiles in registers: t vector loads along the input's rows, log2(t) rounds of
two-source shuffles (in round b, rows i and i + b exchange the b-element blocks where the row's bit b and
the column's differ: the recursive block transpose), t vector stores along the output's rows. LLVM
lowers each shuffle to one or two permutes (vpermt2ps with AVX-512): about 5 shuffle micro-ops per 16
elements instead of 16. Where a side is not a multiple of t, its last tile starts t elements before its
end and overlaps the one before (36 pixels: tiles at 0, 16 and 20), so every element moves in vectors.
The values are moved, never computed: the output is the transpose bit for bit.

The kernel is built as TIR, not TVMScript (TVMScript cannot bind a vector to a name without allocating
it: a workspace per name; the tile is one expression DAG, which LLVM's CSE keeps at t loads), its loops in
the root block alone, with no block of their own: opaque to FuseOps (op_pattern 8), so a dequantize or
requantize that TVM fused with the transpose becomes its own elementwise kernel, and to the schedule search
(no block to schedule). Tile width: 16 elements of 2 to 4 bytes (one
AVX-512 register of float32), 32 of 1 byte where both sides are that long (uint8 rows of 1536 x 32: 2.6
us with 32, 4.4 with 16), 8 of 8 bytes. Measured standalone on the AVX-512 Xeon of the docs' runs: 1536 x
32 float32 6.3 us (TVM's loop: 13.2), 64 x 144 float32 0.9 us."""

from __future__ import annotations

import math

from .int8_dot import call_rewriter, weight_only, weights_pass

BLOCK = "block_transpose"
OPAQUE = 8  # relax's OpPatternKind kOpaque: FuseOps fuses nothing with the kernel


def transpose_view(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, int, int] | None:
    """(batch, rows, cols) when permuting `shape` by `axes` swaps two blocks of consecutive axes at the end
    and keeps the axes before them: the input is then [batch, rows, cols] and the output [batch, cols, rows]
    in memory. None for any other permutation (the identity, a move that keeps the last axis in place: its
    innermost run is contiguous in both and TVM's loop copies it in vectors)."""
    n = len(axes)
    k = next((i for i in range(n) if axes[i] != i), n)
    if k == n:
        return None
    j = axes[k]  # the input axis the output's block begins with: rows = shape[k:j], cols = shape[j:]
    if list(axes[k:]) != [*range(j, n), *range(k, j)] or j == n:
        return None
    return math.prod(shape[:k]), math.prod(shape[k:j]), math.prod(shape[j:])


def tile_width(itemsize: int | None, rows: int, cols: int) -> int | None:
    """The tile's side for elements of `itemsize` bytes (see the module docstring); None where a [rows,
    cols] transpose holds no whole tile, or for a type the pass leaves alone (`itemsize` None)."""
    t = {1: 32, 2: 16, 4: 16, 8: 8}.get(itemsize)
    if t == 32 and min(rows, cols) < 32:
        t = 16
    return t if t is not None and rows >= t and cols >= t else None


def _stage(b: int, t: int) -> tuple[list[int], list[int]]:
    """The shuffle indices of one round (block size `b`) on the concatenation of rows i and i + b (bit b of
    i clear): new row i keeps its own elements whose column has bit b clear and takes row i + b's others
    shifted by b; new row i + b the other way round."""
    lo = [j if not j & b else t + j - b for j in range(t)]
    hi = [j + b if not j & b else t + j for j in range(t)]
    return lo, hi


_SKELETON = """
@T.prim_func(private=True)
def {name}(A: T.Buffer(({in_shape}), "{dtype}"), B: T.Buffer(({out_shape}), "{dtype}")):
    T.func_attr({{"tirx.noalias": True, "op_pattern": {opaque}}})
    Af = T.decl_buffer(({n},), "{dtype}", data=A.data)
    Bf = T.decl_buffer(({n},), "{dtype}", data=B.data)
"""


def block_transpose_func(in_shape, out_shape, batch: int, rows: int, cols: int, dtype: str, t: int):
    """The kernel: A (`in_shape`, viewed as [batch, rows, cols]) -> B (`out_shape`, [batch, cols, rows]) in
    t x t tiles through registers (see the module docstring); rows, cols >= t."""
    from tvm import s_tir, tirx
    from tvm.script import from_source
    from tvm.script import tirx as T

    shape = lambda s: ", ".join(f"T.int64({x})" for x in s) + ("," if len(s) == 1 else "")  # noqa: E731
    src = _SKELETON.format(
        name=BLOCK,
        in_shape=shape(in_shape),
        out_shape=shape(out_shape),
        dtype=dtype,
        opaque=OPAQUE,
        n=batch * rows * cols,
    )
    func = from_source(src, extra_vars={"T": T})
    decl_a, decl_b = func.body.seq
    af, bf = decl_a.buffer, decl_b.buffer
    i32 = lambda x: tirx.const(x, "int32")  # noqa: E731
    b = tirx.Var("b", "int32")
    base = b * i32(rows * cols)

    def tile(r0, c0):  # the tile at [b, r0:r0 + t, c0:c0 + t] of A, to [b, c0:c0 + t, r0:r0 + t] of B
        def ramp(row, col, stride):
            return [tirx.Ramp(base + row * i32(stride) + col, i32(1), t)]

        vec = [tirx.BufferLoad(af, ramp(r0 + i32(k), c0, cols)) for k in range(t)]
        step = t // 2
        while step:
            lo, hi = (list(map(i32, idx)) for idx in _stage(step, t))
            new = list(vec)
            for i in range(t):
                if not i & step:
                    pair = [vec[i], vec[i + step]]
                    new[i], new[i + step] = tirx.Shuffle(pair, lo), tirx.Shuffle(pair, hi)
            vec, step = new, step // 2
        return tirx.SeqStmt([tirx.BufferStore(bf, vec[k], ramp(c0 + i32(k), r0, rows)) for k in range(t)])

    def loop(var, extent, body):
        return tirx.For(var, i32(0), i32(extent), tirx.ForKind.SERIAL, body)

    # the whole tiles, then (where a side is not a multiple of t) a last tile that ends with it and overlaps
    # the one before: its overlap is transposed twice, to the same place. Each region its own loop nest,
    # its offsets i * t or a constant
    rt, ct = rows // t, cols // t
    row_starts = [(rt, lambda ri: ri * i32(t))] + ([(1, lambda _: i32(rows - t))] if rows % t else [])
    col_starts = [(ct, lambda ci: ci * i32(t))] + ([(1, lambda _: i32(cols - t))] if cols % t else [])
    nests = []
    for n_r, r_at in row_starts:
        for n_c, c_at in col_starts:
            ri, ci = tirx.Var("ri", "int32"), tirx.Var("ci", "int32")
            nests.append(loop(ri, n_r, loop(ci, n_c, tile(r_at(ri), c_at(ci)))))
    body = loop(b, batch, tirx.SeqStmt(nests) if len(nests) > 1 else nests[0])
    # inside a root block, as TVMScript writes one: Relax's passes (RewriteDataflowReshape) look for it
    root = s_tir.SBlock([], [], [], "root", tirx.SeqStmt([decl_a, decl_b, body]))
    return func.with_body(s_tir.SBlockRealize([], True, root))


def _blocked(rw, call):
    """`call` (a `permute_dims`) as a call of the kernel, where it transposes an activation (not weights only:
    those run once, at load) with static shapes that `transpose_view` reads as a transpose holding a whole
    tile; None otherwise."""
    import numpy as np
    from tvm import relax

    (data,) = call.args
    if weight_only(rw.var2val, rw.weights, data):
        return None
    try:
        shape = tuple(int(x) for x in data.ty.shape)
        out_shape = tuple(int(x) for x in call.ty.shape)
    except (TypeError, ValueError, AttributeError):  # a symbolic or unknown shape
        return None
    axes = tuple(int(a) for a in call.attrs.axes) if call.attrs.axes is not None else None
    view = transpose_view(shape, axes if axes is not None else tuple(reversed(range(len(shape)))))
    dtype = str(data.ty.dtype)
    try:  # numeric types NumPy knows (not bool: TVM packs it in other ways than its vectors of bytes)
        itemsize = np.dtype(dtype).itemsize if dtype != "bool" else None
    except TypeError:  # bfloat16, float8 ...: left to TVM's loop
        itemsize = None
    t = tile_width(itemsize, view[1], view[2]) if view is not None else None
    if t is None:
        return None
    gv = rw.builder_.add_func(block_transpose_func(shape, out_shape, *view, dtype, t), BLOCK)
    return rw.builder_.emit(relax.call_tir(gv, [rw.visit_expr(data)], relax.TensorType(out_shape, dtype)))


def block_transpose_pass():
    """The graph pass (name "BlockTranspose"): in every Relax function, the activations' transposes as
    tiles through registers (`_blocked`)."""
    return weights_pass("BlockTranspose", call_rewriter(("relax.permute_dims",), _blocked))
