"""Schedule steps shared by the rules of every operator class: the tuning constants, optional primitives
that leave the schedule unchanged when TVM refuses them, inlining, and vectorizing a block's loops."""

from __future__ import annotations

from collections.abc import Callable

from .analysis import BlockFacts, FuncFacts, _as_int, _divisors, _single, analyze_block, axis_groups, vec_tile

# Tuning constants of the rules (float32 vectors of `lanes` elements).
ACC_VECTORS = 8  # vector accumulators in a register tile (of 16/32 vector registers)


MAX_VEC_TILE = 4  # vectors along the vectorized axis of one tile
MAX_VEC_ROWS = 2  # ... of a tile with an unrolled axis too, unless asked for more (the search asks for 4)


UNROLL_REDUCTION_MAX = 4  # reduction loops this short are unrolled


PARALLEL_MIN_WORK = 1 << 18  # iterations below which a parallel loop costs more than it saves


AUTO_UNROLL_STEP = 64


# The storage scope of a register tile's accumulators (cache_write). On a CPU TVM places a "global"
# allocation of under 1 KiB (runtime::kMaxStackAlloca) on the stack, where LLVM keeps it in registers; a
# "local" one becomes a TVMBackendAllocWorkspace / FreeWorkspace pair in every call, its last values
# stored for nothing (MetaSchedule's CPU rules write "global" too). Measured on the best candidates of the
# eleventh run's agent subset (50 kernels, interleaved): no kernel slower beyond noise, 0.6 us kernels 6%
# faster, 0.1 us ones up to 1.9x.
ACC_SCOPE = "global"


class Skip(Exception):
    """A strategy does not fit this PrimFunc."""


def _try(fn: Callable, *args, **kw):
    """Runs one optional primitive; a ScheduleError leaves the schedule unchanged (primitives are
    atomic), so the rule is skipped and the schedule stays consistent."""
    try:
        return fn(*args, **kw)
    except Exception:  # noqa: BLE001  (tvm raises ScheduleError / TVMError subclasses)
        return None


def _inline_all(sch, names: list[str], reverse: bool = False) -> list[str]:
    """compute_inline (or reverse_compute_inline) each named block where legal; returns those done."""
    done = []
    for n in names:
        if _gone(sch, n):
            continue
        blk = sch.get_sblock(n)
        if reverse and any(len(sch.get_consumers(p)) > 1 for p in sch.get_producers(blk)):
            # TVM accepts this but leaves the other consumers reading a buffer no block writes
            # any more ("used before its definition" at build time), e.g. x * relu6(x + 3) / 6
            continue
        ok = _try(sch.reverse_compute_inline if reverse else sch.compute_inline, blk)
        if ok is not None or _gone(sch, n):
            done.append(n)
    return done


def _gone(sch, name: str) -> bool:
    try:
        sch.get_sblock(name)
        return False
    except Exception:  # noqa: BLE001
        return True


SCALAR_MATH = ("T.erf(", "T.exp(")  # LLVM has no vector form here: a vectorized call is scalarized


LEFT_TO_LLVM = ("T.erf(",)  # kernels slower after any rule (measured: GELU); no decisions


def _lanes(lanes: int, b: BlockFacts) -> int:
    return max(2, lanes * 32 // max(8, b.dtype_bits))


def _producers_consumers(facts: FuncFacts, main: str) -> tuple[list[str], list[str]]:
    names = [b.name for b in facts.blocks]
    k = names.index(main)
    return names[:k], names[k + 1 :]


def _has_if_then_else(sch, name: str) -> bool:
    import tvm

    f = tvm.get_global_func("s_tir.schedule.HasIfThenElse", allow_missing=True)
    return bool(f(sch.get(sch.get_sblock(name)))) if f is not None else True


def _vectorize_block_loops(sch, brv, lanes: int, parallel: bool, max_vectors: int = 8) -> dict:
    """Injective block: vectorize its innermost axes (fused while every access walks them
    contiguously), parallel over the outer loops when asked and the block is big enough.
    Left scalar (LLVM's own vectorizer then decides): gathers (transposes, resize), bounds checks,
    and math without a vector form."""
    loops = sch.get_loops(brv)
    if not loops:
        return {}
    bf = analyze_block(sch, brv, set())
    if bf.is_reduction or not bf.loops_match_iters:
        return {"vector": None}
    text = str(sch.get(brv).body)
    if "if_then_else" in text or any(m in text for m in SCALAR_MATH):
        return {"vector": None}
    g = axis_groups(bf, lanes)[-1] if bf.spatial else None
    if (
        g is not None
        and len(g.members) > 1
        and vec_tile(g.extent, lanes, max_vectors, g.tiles()) <= g.extents[-1]
    ):
        g = _single(bf, g.members[-1])  # the tile fits in the innermost axis: no need to fuse
    if g is None or g.members[-1] != len(bf.kinds) - 1 or g.write != 1 or g.extent < 4:
        return {"vector": None}
    if any(st not in (0, 1) for st in g.reads):
        return _tile_transpose(sch, loops, bf, lanes)
    inner = sch.fuse(*[loops[i] for i in g.members]) if len(g.members) > 1 else loops[g.members[0]]
    outer = list(loops[: g.members[0]])
    vt = vec_tile(g.extent, lanes, max_vectors, g.tiles())
    if vt < 2:
        return {"vector": None}
    if vt < g.extent:
        o, inner = sch.split(inner, [None, vt])
        outer.append(o)
    sch.vectorize(inner)
    info: dict = {"vector": vt}
    if outer and parallel and bf.work() >= PARALLEL_MIN_WORK:
        fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
        sch.parallel(fused)
        info["parallel"] = True
    return info


TRANSPOSE_TILE = 16  # elements of the read's contiguous axis per tile of a transpose


def _tile_transpose(sch, loops, bf: BlockFacts, lanes: int) -> dict:
    """A layout copy whose output's innermost axis `w` gathers in the one read (NHWC -> NCHW at a graph's
    exit): the loop nest walked in output order reads one element per cache line. Tiled instead: the
    read's contiguous axis `a` and `w` cut into tiles, [outer] x [w tiles] x [a tiles] x [a in tile,
    unrolled] x [w in tile, vectorized (a gather)]: a tile's lines of the input stay in L1 while all of
    their elements are used. (Measured on a 48x32x32 NHWC -> NCHW copy: 2.4x faster than the
    untiled loop.) Left scalar unless exactly one read gathers along `w` and walks some other axis
    contiguously."""
    w = len(bf.kinds) - 1
    gathers = [r for r in bf.reads if r.strides[w] not in (0, 1)]
    if len(gathers) != 1 or gathers[0].strides[w] is None:
        return {"vector": None}
    contiguous = [i for i in bf.spatial if i != w and gathers[0].strides[i] == 1 and bf.extents[i] > 1]
    if not contiguous or bf.extents[w] < 4:
        return {"vector": None}
    a = contiguous[0]
    tw = vec_tile(bf.extents[w], lanes, 1)
    ta = max(d for d in _divisors(bf.extents[a]) if d <= TRANSPOSE_TILE)
    if tw < 2:
        return {"vector": None}
    wo, wi = sch.split(loops[w], [None, tw]) if tw < bf.extents[w] else (None, loops[w])
    ao, ai = sch.split(loops[a], [None, ta]) if ta < bf.extents[a] else (None, loops[a])
    outer = [lp for i, lp in enumerate(loops) if i not in (a, w)] + [lp for lp in (wo, ao) if lp is not None]
    sch.reorder(*outer, ai, wi)
    sch.unroll(ai)
    sch.vectorize(wi)
    return {"vector": tw, "transpose_tile": [ta, tw]}


def _vectorize_innermost(sch, brv, lanes: int) -> None:
    """Vectorizes the innermost loop alone (no fusing: a fused index of a strided copy needs a
    division per element); a short one (< 4) stays scalar."""
    loops = sch.get_loops(brv)
    ext = _as_int(sch.get(loops[-1]).extent) or 0 if loops else 0
    if ext < 4:
        return
    vt = vec_tile(ext, lanes, 4)
    inner = loops[-1] if vt == ext else sch.split(loops[-1], [None, vt])[1]
    sch.vectorize(inner)


def _vectorize_tail(sch, brv, lanes: int) -> None:
    """Vectorizes the innermost loop of a block placed in a tile (init, write-back, epilogue);
    unrolls the loops between it and the tile loop."""
    loops = sch.get_loops(brv)
    if not loops:
        return
    inner = loops[-1]
    ext = _as_int(sch.get(inner).extent) or 0
    if ext < 2:
        return
    if ext > 4 * lanes:
        vt = vec_tile(ext, lanes, 4)
        if ext % vt:
            return
        _, inner = sch.split(inner, [None, vt])
    sch.vectorize(inner)
