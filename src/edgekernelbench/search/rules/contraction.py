"""The rule for contractions (conv2d, pointwise, depthwise, dense, matmul, windowed pool, reductions with
one reduction block): a register tile of vector accumulators (`TilePlan`, `contraction_plan`), then the
loop, memory and target layers (`schedule_contraction`). `contraction_plan` is what the cost model
(search/cost.py) reads without scheduling."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .analysis import (
    AxisGroup,
    BlockFacts,
    FuncFacts,
    _mergeable,
    _single,
    axis_groups,
    choose_unroll_group,
    choose_vector_group,
    reuse_score,
    slides,
    vec_tile,
)
from .primitives import (
    ACC_SCOPE,
    ACC_VECTORS,
    AUTO_UNROLL_STEP,
    MAX_VEC_ROWS,
    MAX_VEC_TILE,
    PARALLEL_MIN_WORK,
    UNROLL_REDUCTION_MAX,
    Skip,
    _gone,
    _has_if_then_else,
    _inline_all,
    _lanes,
    _producers_consumers,
    _try,
    _vectorize_block_loops,
    _vectorize_innermost,
    _vectorize_tail,
)


def _inline_ok(main: BlockFacts, prod: BlockFacts, gv: AxisGroup) -> bool:
    """A producer may be inlined into the main block unless it is padding with a bounds check on a
    buffer dim that the vectorized axis walks."""
    if not prod.padded_dims:
        return True
    walked = set(gv.members)
    return not any(
        a.buffer == prod.write.buffer
        and a.dims
        and any(walked & a.dims[d] for d in prod.padded_dims if d < len(a.dims))
        for a in main.reads
    )


@dataclass
class TilePlan:
    """The register tile of a contraction: [outer spatial] x [reduction] x [unroll tile] x [vector tile]."""

    block: BlockFacts
    groups: list[AxisGroup]
    gv: AxisGroup  # the vectorized axis (group)
    gu: AxisGroup | None  # the unrolled axis, if any
    vt: int  # vector tile (elements)
    ut: int  # unroll tile
    lanes: int
    gather: bool  # the vectorized axis gathers in some read: one vector per tile, no auto-unroll

    @property
    def nvec(self) -> int:
        return -(-self.vt // self.lanes)

    def tile(self, g: AxisGroup) -> int:
        """The elements of axis group `g` inside one tile (the vector tile, the unroll tile, else 1)."""
        return self.vt if g is self.gv else self.ut if g is self.gu else 1

    def tiled(self) -> list[AxisGroup]:
        """The axis groups with more than one tile, in the "rows" order of the tile loops."""
        return [g for g in self.groups if self.tile(g) < g.extent]


def contraction_plan(
    facts: FuncFacts, lanes: int, max_vectors: int | None = None, acc_vectors: int = ACC_VECTORS
) -> TilePlan:
    """The tile `schedule_contraction` uses for these parameters (raises Skip when none fits). `max_vectors`:
    the vector tile's vectors at most (default MAX_VEC_TILE, MAX_VEC_ROWS when the tile has an unrolled axis
    too)."""
    b = facts.block(facts.main)
    if not b.loops_match_iters:
        raise Skip("loops do not bind the block's iter vars one to one")
    lanes = _lanes(lanes, b)
    groups = axis_groups(b, lanes)
    gather = False
    for _ in range(2):
        gv, v_score = choose_vector_group(groups)
        if gv is None or v_score <= 0:
            raise Skip("no spatial axis vectorizes without gathers")
        if (
            facts.op_class == "pool"
            and any(st not in (0, 1) for st in gv.reads)
            and all(b.extents[i] <= UNROLL_REDUCTION_MAX for i in b.reduce)
        ):
            raise Skip("small windows read with a stride: a vectorized loop would gather")
        if any(st is None or abs(st) > 2 for st in gv.reads):
            # a gathered read: one vector per tile, no auto-unroll (LLVM's compile time explodes
            # on unrolled wide gathers: minutes for a 64x64 global pool)
            max_vectors, gather = 1, True
        groups = unroll_merges(b, groups, gv)
        gu = choose_unroll_group(groups, gv)
        nv = max_vectors or (MAX_VEC_TILE if gu is None else MAX_VEC_ROWS)
        vt = vec_tile(gv.extent, lanes, nv, gv.tiles(), pow2=True)
        if len(gv.members) == 1 or vt > gv.extents[-1]:
            break
        # the tile fits in the innermost axis: merging would only add index divisions
        k = groups.index(gv)
        groups[k : k + 1] = [_single(b, i) for i in gv.members]
    nvec = -(-vt // lanes)
    ut = _unroll_tile(gu, nvec, acc_vectors)
    gu, ut = _sliding_tile(b, groups, gv, gu, ut, nvec, acc_vectors, lanes)
    gu, ut = _whole_tile(b, groups, gv, gu, ut, nvec, acc_vectors)
    return TilePlan(b, groups, gv, gu, vt, ut, lanes, gather)


def _sliding_tile(b: BlockFacts, groups, gv, gu, ut: int, nvec: int, acc_vectors: int, lanes: int):
    """(unrolled axis, tile): `gu`'s, or, when an axis that reuses as much slides with the window (a
    depthwise convolution's W with its unrolled kernel column: `window_axes`), that axis's where it loads
    fewer vectors per FMA and its live inputs fit in the registers beside the accumulators. Per step of
    the window's outer loop (kw taps), a tile of u along the sliding axis loads u + kw - 1 inputs and kw
    weights for u * kw FMAs; along another axis, u * kw inputs and kw weights. ds_block_kws's 25 x 5 x 64
    depthwise (12 accumulators, 2 vectors): 5 rows (1.2 loads per FMA) 1.29-1.44 us, 5 columns (0.67)
    0.93-1.03 us, standalone on an AVX-512 Xeon core; a 24-column tile of 8 channels (ds_block_vww_8x16)
    would keep 26 inputs beside 24 accumulators: 1.75x slower than 24 rows, spilled."""
    axes = window_axes(b)
    if gu is None or not axes:
        return gu, ut
    gs = choose_unroll_group(groups, gv, window_strides(b))
    if gs is gu:
        return gu, ut
    us, kw = _unroll_tile(gs, nvec, acc_vectors), max(b.extents[i] for i in axes)
    fits = nvec * (us + us + kw - 1) <= (32 if lanes >= 16 else 16)
    if fits and (us + kw - 1 + kw) / (us * kw) < (ut + 1) / ut:
        return gs, us
    return gu, ut


def _whole_tile(b: BlockFacts, groups, gv, gu, ut: int, nvec: int, acc_vectors: int):
    """(unrolled axis, tile): `gu`'s, or another axis that reuses as much and that the tile covers whole,
    where `gu`'s tile covers only part of `gu` and is not longer. A whole axis unrolled leaves no loop
    variable along it in the tile: an inlined padding's bounds checks along it (one per unrolled element and
    window tap) become constants. dscnn_kws's stem (10 x 4 window, stride 2, 25 x 5 x 64 outputs, padding
    inlined): 5 rows x 4 vectors 4.92 us, 5 columns (all of W) x 4 vectors 3.11 us, standalone on an
    AVX-512 Xeon core. An axis that slides with the window is `_sliding_tile`'s to take or leave (its
    inputs stay live across the taps)."""
    if gu is None or ut >= gu.extent:
        return gu, ut
    window = window_strides(b)
    for g in groups:
        if g is gu or g is gv or g.extent < 2 or reuse_score(g, gv) != reuse_score(gu, gv):
            continue
        if slides(g, window):
            continue
        if _unroll_tile(g, nvec, acc_vectors) == g.extent >= ut:
            return g, g.extent
    return gu, ut


def _unroll_tile(gu: AxisGroup | None, nvec: int, acc_vectors: int) -> int:
    """The unrolled axis's tile: its largest rectangular tile that keeps the accumulators within
    `acc_vectors` vectors."""
    return max(t for t in gu.tiles() if t <= max(1, acc_vectors // nvec)) if gu is not None else 1


def unrolled_reductions(b: BlockFacts) -> list[int]:
    """The reduction axes the tile unrolls: the short ones inside the outermost (a kernel window's
    columns, a 3-tap filter), the outermost kept a loop around them."""
    return [i for i in b.reduce[1:] if 1 < b.extents[i] <= UNROLL_REDUCTION_MAX]


def window_axes(b: BlockFacts) -> list[int]:
    """The unrolled reduction axes with no loop inside them (every reduction axis after each is unrolled
    too, or of extent 1): a read that moves along a spatial axis as it moves along one of these reads,
    in the unrolled body, the same elements for neighbouring outputs (a depthwise window's columns). A
    standard convolution's kernel column has its input channels' loop inside: nothing is shared there."""
    unrolled = unrolled_reductions(b)
    return [i for i in unrolled if all(j in unrolled or b.extents[j] == 1 for j in b.reduce if j > i)]


def window_strides(b: BlockFacts) -> list[set[int]]:
    """Per read of the main block, its strides along the window axes (`window_axes`)."""
    axes = window_axes(b)
    return [{a.strides[i] for i in axes} for a in b.reads]


def unroll_merges(b: BlockFacts, groups: list[AxisGroup], gv: AxisGroup) -> list[AxisGroup]:
    """`groups` with each run of adjacent mergeable spatial axes that `axis_groups` left apart (no
    rectangular tile of whole vectors) merged again when the vectorized group is not among them: as the
    unrolled axis, H x W of a pointwise convolution on a small image (3 x 2) gives a tile of 6 rows where
    H alone gives 3, so each loaded weight vector serves twice the FMAs (yamnet's last 1024 x 1024
    pointwise convolution: 46 -> 103 GFLOP/s with 4 vectors, measured standalone)."""
    out = list(groups)
    k = 0
    while k < len(out):
        g = out[k]
        run = [g]
        while (
            k + len(run) < len(out)
            and len(run[-1].members) == 1
            and len(out[k + len(run)].members) == 1
            and out[k + len(run)].members[0] == run[-1].members[0] + 1
            and _mergeable(b, run[-1].members[0], out[k + len(run)].members[0])
        ):
            run.append(out[k + len(run)])
        if len(run) > 1 and len(g.members) == 1 and not any(r is gv for r in run):
            inner = run[-1].members[0]
            out[k : k + len(run)] = [
                AxisGroup(
                    [r.members[0] for r in run],
                    [r.extents[0] for r in run],
                    b.write.strides[inner],
                    [a.strides[inner] for a in b.reads],
                )
            ]
        k += 1
    return out


PAD_GAIN = 0.1  # padding is offered when it raises the vector lanes' useful share by this much
PAD_MIN_REUSE = 8  # ... and each padded operand's element is used by at least this many outputs


def pad_multiples(facts: FuncFacts, lanes: int) -> list[int]:
    """The multiples worth padding the vectorized axis of the main block to (pad_einsum: the iteration
    domain grows, the padded operand is copied with zeros, the extra outputs are dropped), when its extent
    has no divisor that fills whole vectors (257 DFT bins: a tile of 1 element, i.e. scalar code): one to
    four vectors, each only when the padded extent keeps more lanes busy than the unpadded tile does, and
    only when every operand that would be padded is reused across outputs (the padded copy is made on
    every call: for a matrix-vector product it would double the traffic of a memory-bound kernel)."""
    try:
        plan = contraction_plan(facts, lanes)
    except Skip:
        return []
    if len(plan.gv.members) != 1 or plan.gather:
        return []
    b, axis = plan.block, plan.gv.members[0]
    for a in b.reads:
        if a.strides[axis] != 0:  # padded along with the axis
            reuse = math.prod(b.extents[i] for i in b.spatial if a.strides[i] == 0)
            if reuse < PAD_MIN_REUSE:
                return []
    ext, vt, lanes = plan.gv.extent, plan.vt, plan.lanes
    busy = vt / (plan.nvec * lanes)
    out = []
    for m in (lanes, 2 * lanes, 4 * lanes):
        padded = -(-ext // m) * m
        if padded != ext and ext / padded > busy + PAD_GAIN:
            out.append(m)
    return out


def pad_main(sch, facts: FuncFacts, lanes: int, multiple: int) -> FuncFacts:
    """pad_einsum on the main block's vectorized axis to a multiple of `multiple` (the other axes as they
    are); returns the facts of the padded function (the padded operand's copy is a producer block, the
    copy back into the unpadded output a consumer). Raises Skip where TVM refuses (not an einsum)."""
    from .analysis import analyze

    plan = contraction_plan(facts, lanes)
    if len(plan.gv.members) != 1:
        raise Skip("the vectorized axis is a fused group")
    padding = [1] * len(plan.block.extents)
    padding[plan.gv.members[0]] = multiple
    try:
        sch.pad_einsum(sch.get_sblock(plan.block.name), padding)
    except Exception as e:  # noqa: BLE001 -- tvm's ScheduleError: not an einsum
        raise Skip(f"pad_einsum: {str(e).splitlines()[-1][:120]}") from None
    return analyze(sch.mod["main"], facts.name)


def schedule_contraction(
    rec,
    facts: FuncFacts,
    lanes: int,
    *,
    cache: bool = True,
    inline_pad: bool = False,
    parallel: bool = False,
    annotate: bool = True,
    max_vectors: int | None = None,
    acc_vectors: int = ACC_VECTORS,
    unroll_step: int = AUTO_UNROLL_STEP,
    pad: int = 0,
    order: str = "rows",
) -> dict:
    """Conv / depthwise / pointwise / dense / matmul / windowed pool: one reduction block with
    injective producers (padding, casts) and consumers (bias, activation, requantize).

    Tile: [outer spatial (fused)] x [reduction] x [unrolled axis] x [vectorized axis]; the unrolled
    and vectorized tiles hold `acc_vectors` vector accumulators (cache_write to `ACC_SCOPE`). `unroll_step`:
    the auto-unroll annotation of the target layer (0: none). `pad`: first pad the vectorized axis to a
    multiple of this many elements (pad_main). `order`: of the tile loops, "rows" (the axes' order: the
    vectorized axis's tiles innermost, so an operand that moves with it -- a GEMM's weight -- is swept whole
    for every row tile) or "panels" (the vectorized axis's tiles outermost: one panel of that operand serves
    every row tile while it is in cache)."""
    sch = rec.sch
    fused = None
    with rec.layer("loop"):
        if pad:
            facts = pad_main(sch, facts, lanes, pad)
        plan = contraction_plan(facts, lanes, max_vectors, acc_vectors)
        b, groups, gv, gu, vt, ut = plan.block, plan.groups, plan.gv, plan.gu, plan.vt, plan.ut
        lanes = plan.lanes
        annotate = annotate and not plan.gather and unroll_step > 0
        info: dict = {
            "vector_axis": gv.members,
            "vector_tile": vt,
            "unroll_axis": gu.members if gu else None,
            "unroll_tile": ut,
        }
        if pad:
            info["padded_to"] = pad
        producers, consumers = _producers_consumers(facts, b.name)
        # padding whose bounds checks run along the vectorized axis stays a separate copy (inlined,
        # the checks block vectorization); other producers (casts, row-only padding) are inlined
        inl = [p for p in reversed(producers) if inline_pad or _inline_ok(b, facts.block(p), gv)]
        info["inlined"] = _inline_all(sch, inl)
        info["epilogue_inlined"] = _inline_all(sch, list(reversed(consumers)), reverse=True)
        mb = sch.get_sblock(b.name)
        loops = sch.get_loops(mb)
        outer, inner_u, inner_v = [], [], []
        for g in groups:
            lp = sch.fuse(*[loops[i] for i in g.members]) if len(g.members) > 1 else loops[g.members[0]]
            tile = vt if g is gv else ut if g is gu else None
            if tile is None:
                outer.append(lp)
                continue
            if tile < g.extent:
                lo, lp = sch.split(lp, [None, tile])
                if g is gv and order == "panels":
                    outer.insert(0, lo)
                else:
                    outer.append(lo)
            (inner_v if g is gv else inner_u).append(lp)
        if order == "panels":
            info["order"] = "panels"
        red = [loops[i] for i in b.reduce]
        sch.reorder(*outer, *red, *inner_u, *inner_v)
        fused = sch.fuse(*outer) if len(outer) > 1 else (outer[0] if outer else None)
        tiles = math.prod(g.extent for g in groups) // (vt * ut)
        if parallel and fused is not None and tiles > 1 and b.work() >= PARALLEL_MIN_WORK:
            sch.parallel(fused)
            info["parallel"] = True
        unrolled = unrolled_reductions(b)
        for i, lp in zip(b.reduce, red, strict=True):
            if i in unrolled:
                sch.unroll(lp)
        for lp in inner_u:
            sch.unroll(lp)
        sch.vectorize(inner_v[0])
        if not cache:
            for c in consumers:
                if _gone(sch, c):
                    continue
                if fused is not None:
                    sch.reverse_compute_at(sch.get_sblock(c), fused)
                    _vectorize_tail(sch, sch.get_sblock(c), lanes)
                else:
                    _vectorize_block_loops(sch, sch.get_sblock(c), lanes, parallel)
            if red and fused is not None:
                init = sch.decompose_reduction(mb, red[0])
                _vectorize_tail(sch, init, lanes)
        for p in producers:
            if not _gone(sch, p):
                info.setdefault("producers", {})[p] = _schedule_producer(sch, p, lanes, parallel)
    if cache and fused is None:
        raise Skip("no tile loop to place the accumulator in")
    with rec.layer("memory"):
        if DEINTERLEAVE and 2 in gv.reads:  # a stride-2 read along the vectors
            kept = [p for p in producers if not _gone(sch, p)]
            info["deinterleaved"] = _deinterleave(sch, facts, b, gv, kept)
        if cache:
            wb = sch.cache_write(mb, 0, ACC_SCOPE)
            sch.reverse_compute_at(wb, fused)
            wb_name = sch.get(wb).name_hint
            info["epilogue_in_writeback"] = _inline_all(
                sch, [c for c in consumers if not _gone(sch, c)], reverse=True
            )
            for c in consumers:  # what could not be fused into the write-back runs per tile after it
                if not _gone(sch, c):
                    sch.reverse_compute_at(sch.get_sblock(c), fused)
                    _vectorize_tail(sch, sch.get_sblock(c), lanes)
            if red:
                init = sch.decompose_reduction(mb, red[0])
                _vectorize_tail(sch, init, lanes)
            _vectorize_tail(sch, sch.get_sblock(wb_name), lanes)
    if annotate and fused is not None:
        with rec.layer("target"):
            sch.annotate(fused, "pragma_auto_unroll_max_step", unroll_step)
            sch.annotate(fused, "pragma_unroll_explicit", 1)
    return info


DEINTERLEAVE = True  # benchmarks/sliding_tile.py --rule deinterleave: the rules with and without it
# ... where each element of the buffer serves at least this many multiply-adds: a standard convolution's input
# (resnet8_ic's 3 x 3 stride-2 16 -> 32: 68; 84 -> 41 us standalone, host-avx2 on an AVX-512 Xeon), not a
# depthwise window's (2.25: 1.3x to 1.7x slower with the halves on yamnet's and the MobileNets')
DEINTERLEAVE_MIN_REUSE = 8


def _deinterleave(sch, facts: FuncFacts, b: BlockFacts, gv: AxisGroup, producers: list[str]) -> list[str]:
    """The buffers that the main block reads with stride 2 along its vectorized axis (a stride-2
    convolution's padded input, kept a separate copy: `_inline_ok`), each laid out as its even and odd
    elements along that dimension ([..., W] -> [..., 2, ceil(W / 2)]: transform_layout, which the
    producer's copy then writes that way), so each vector of the tile loads contiguous elements instead of
    every other one. Only a buffer a producer of the kernel writes (its own allocation), whose elements
    each serve DEINTERLEAVE_MIN_REUSE multiply-adds or more; an odd W leaves one slot that nothing writes or
    reads. Returns the buffers' names."""
    from tvm.tirx import IndexMap

    axis = gv.members[-1]
    allocated = {buf.name: buf for buf in sch.mod["main"].body.block.alloc_buffers}
    done: list[str] = []
    for a, stride in zip(b.reads, gv.reads, strict=True):
        writer = next((p for p in producers if facts.block(p).write.buffer == a.buffer), None)
        dims = [d for d, axes in enumerate(a.dims) if axis in axes]
        if stride != 2 or writer is None or a.buffer not in allocated or a.buffer in done or len(dims) != 1:
            continue
        if b.work() < DEINTERLEAVE_MIN_REUSE * math.prod(int(x) for x in allocated[a.buffer].shape):
            continue  # a depthwise window: the strided copy costs more than the gathers it saves
        halves = IndexMap.from_func(_halves(dims[0]), ndim=len(allocated[a.buffer].shape))
        # injective, not onto where W is odd: the slot past the last odd element is never accessed
        sch.transform_layout(sch.get_sblock(writer), ("write", 0), halves, assume_injective_transform=True)
        done.append(a.buffer)
    return done


def _halves(d: int):
    """The index map of `_deinterleave`: dimension `d` split into its even and odd elements."""
    return lambda *idx: (*idx[:d], idx[d] % 2, idx[d] // 2, *idx[d + 1 :])


def _schedule_producer(sch, name: str, lanes: int, parallel: bool) -> str:
    """A producer left at the root (padding, layout copies). Padding is split into a constant fill
    and an in-bounds copy (decompose_padding), so neither has a bounds check per element."""
    blk = sch.get_sblock(name)
    if _has_if_then_else(sch, name):
        fill = _try(sch.decompose_padding, blk, sch.get_loops(blk)[0])
        if fill is not None:
            _vectorize_block_loops(sch, fill, lanes, parallel)
            _vectorize_innermost(sch, sch.get_sblock(name), lanes)
            return "decompose_padding"
        _vectorize_innermost(sch, blk, lanes)
        return "innermost"
    _vectorize_block_loops(sch, blk, lanes, parallel)
    return "vectorized"
