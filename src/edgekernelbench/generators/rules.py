"""A rule-based scheduler: one schedule rule per operator class, recorded as layered decisions.

For every PrimFunc that the reference's `main` calls, the rules look at its blocks (iteration kinds,
extents, and the stride of each block variable in every buffer access), classify it, and schedule
it on a LayerRecorder in three phases:

- loop:   compute_inline producers (padding), reverse_compute_inline epilogues (bias, activation),
          tiling (split + reorder) with a vectorized innermost spatial loop and an unrolled register
          tile, parallel over the fused outer spatial loops, unrolled small reduction loops;
- memory: a cache_write accumulator placed in the tile loop (reverse_compute_at), with the
          epilogue fused into its write-back, and the reduction's init split off;
- target: auto-unroll annotations on the outermost loop.

Operator classes (`classify`): conv2d, pointwise (1x1 conv), depthwise, dense (GEMV/GEMM), matmul,
pool, reduce, multi-reduction (softmax/layernorm), injective (elementwise, broadcast, layout).

Each PrimFunc is scheduled by a chain of progressively simpler strategies, each on a fresh
LayerRecorder; the first whose primitives all apply, whose recorded trace replays on a fresh
schedule and whose result builds for the host is kept (the last strategy is "no decisions").
TVM's schedule primitives check their own legality, so a kept schedule computes what the
reference computes; the rules also steer clear of the cases where TVM's checks are not enough
(tiles of fused axes that are not rectangles, reverse_compute_inline into a producer with
other consumers) -- see AxisGroup.tiles and _inline_all.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from ..ir.spec import Decisions, KernelSpec

AVX512_CPUS = {
    "skylake-avx512",
    "cascadelake",
    "cooperlake",
    "cannonlake",
    "icelake-client",
    "icelake-server",
    "tigerlake",
    "rocketlake",
    "sapphirerapids",
    "emeraldrapids",
    "graniterapids",
    "graniterapids-d",
    "diamondrapids",
    "knl",
    "knm",
    "znver4",
    "znver5",
    "x86-64-v4",
}

# Tuning constants of the rules (float32 vectors of `lanes` elements).
ACC_VECTORS = 8  # vector accumulators in a register tile (of 16/32 vector registers)
MAX_VEC_TILE = 4  # vectors along the vectorized axis of one tile
UNROLL_REDUCTION_MAX = 4  # reduction loops this short are unrolled
PARALLEL_MIN_WORK = 1 << 18  # iterations below which a parallel loop costs more than it saves
AUTO_UNROLL_STEP = 64


def default_vector_lanes(mcpu: str | None = None) -> int:
    """float32 lanes of the host's widest vector unit: 16 with AVX-512, else 8."""
    if mcpu is None:
        from ..tvm_env import host_cpu_name

        mcpu = host_cpu_name()
    return 16 if mcpu in AVX512_CPUS else 8


# ---------------------------------------------------------------------------------- analysis
@dataclass
class Access:
    buffer: str
    strides: list[int | None]  # per block iter var: flat-index stride (None: not affine/constant)
    dims: list[set[int]] = field(default_factory=list)  # per buffer dim: the block iter vars in its index


@dataclass
class BlockFacts:
    name: str
    kinds: str  # "S"/"R"/"O" per block iter var, e.g. "SSSSRRR"
    extents: list[int]
    write: Access
    reads: list[Access]
    dtype_bits: int = 32
    is_output: bool = False
    loops_match_iters: bool = True  # the block's loops bind its iter vars one to one, in order
    padded_dims: set[int] = field(default_factory=set)  # padding block: output dims with a bounds check

    @property
    def is_reduction(self) -> bool:
        return "R" in self.kinds

    @property
    def spatial(self) -> list[int]:
        return [i for i, k in enumerate(self.kinds) if k == "S"]

    @property
    def reduce(self) -> list[int]:
        return [i for i, k in enumerate(self.kinds) if k == "R"]

    def work(self) -> int:
        return math.prod(self.extents) if self.extents else 1


@dataclass
class FuncFacts:
    name: str
    blocks: list[BlockFacts]
    op_class: str = "opaque"
    main: str | None = None  # the main (largest) reduction block, when there is one

    def block(self, name: str) -> BlockFacts:
        return next(b for b in self.blocks if b.name == name)


def _strides(region, shape, iter_vars, analyzer) -> list[int | None]:
    """Per block iter var: the stride of a point access in the row-major flattened buffer."""
    from tvm import sym

    unknown: list[int | None] = [None] * len(iter_vars)
    if any(_as_int(analyzer.simplify(r.extent)) != 1 for r in region):
        return unknown
    flat, mult = None, 1
    for r, ext in zip(reversed(list(region)), reversed(list(shape)), strict=True):
        term = r.min * mult if mult != 1 else r.min
        flat = term if flat is None else flat + term
        mult = mult * ext
    if flat is None:
        return [0] * len(iter_vars)
    coeffs = sym.detect_linear_equation(flat, iter_vars)
    if len(coeffs) != len(iter_vars) + 1:
        return unknown
    return [_as_int(analyzer.simplify(c)) for c in coeffs[:-1]]


def _as_int(x) -> int | None:
    try:
        return int(x)
    except (TypeError, ValueError):
        return None


def analyze_block(sch, brv, alloc_buffers: set) -> BlockFacts:
    from tvm import sym

    block = sch.get(brv)
    iter_vars = [iv.var for iv in block.iter_vars]
    kinds = "".join({0: "S", 2: "R"}.get(int(iv.iter_type), "O") for iv in block.iter_vars)
    extents = [_as_int(iv.dom.extent) or 0 for iv in block.iter_vars]
    ana = sym.Analyzer()
    for iv in block.iter_vars:
        ana.bind(iv.var, iv.dom)

    def access(r) -> Access:
        dims = [_vars_in(d.min, iter_vars) for d in r.region]
        return Access(r.source.name, _strides(r.region, r.source.shape, iter_vars, ana), dims)

    write = Access("?", [None] * len(iter_vars))
    bits = 32
    if len(block.writes) == 1:
        write = access(block.writes[0])
        bits = block.writes[0].source.dtype.bits
    reads = [access(r) for r in block.reads if r.source.name != write.buffer]
    loops = sch.get_loops(brv)
    match = len(loops) == len(iter_vars) and all(
        _as_int(sch.get(lp).extent) == e for lp, e in zip(loops, extents, strict=True)
    )
    is_output = any(w.source.name not in alloc_buffers for w in block.writes)
    facts = BlockFacts(block.name_hint, kinds, extents, write, reads, bits, is_output, match)
    value = getattr(block.body, "value", None)
    op = getattr(value, "op", None)
    if op is not None and str(getattr(op, "name", "")).endswith("if_then_else") and write.dims:
        cond = _vars_in(value.args[0], iter_vars)
        facts.padded_dims = {d for d, vs in enumerate(write.dims) if vs & cond}
    return facts


def _vars_in(expr, iter_vars) -> set[int]:
    from tvm.tirx.analysis import undefined_vars

    used = undefined_vars(expr, [])
    return {i for i, v in enumerate(iter_vars) if any(u.same_as(v) for u in used)}


def _child_blocks(sch):
    root = sch.get_sblock("root")
    return sch.get_child_blocks(root)


def analyze(func, name: str = "main") -> FuncFacts:
    from tvm import s_tir

    from ..ir.replay import _as_main

    sch = s_tir.Schedule(_as_main(func))
    root = sch.get(sch.get_sblock("root"))
    allocs = {b for b in root.alloc_buffers}
    alloc_names = {b.name for b in allocs}
    blocks = [analyze_block(sch, b, alloc_names) for b in _child_blocks(sch)]
    facts = FuncFacts(name, blocks)
    facts.op_class, facts.main = classify(facts)
    return facts


def classify(facts: FuncFacts) -> tuple[str, str | None]:
    blocks = facts.blocks
    if not blocks or any("O" in b.kinds for b in blocks):
        return "opaque", None
    reds = [b for b in blocks if b.is_reduction]
    if not reds:
        return "injective", None
    if len(reds) > 1:
        main = max(reds, key=lambda b: b.work())
        return "multi-reduction", main.name
    main = reds[0]
    n_reads = len({a.buffer for a in main.reads})
    red_ext = math.prod(main.extents[i] for i in main.reduce)
    if n_reads >= 2:
        name = main.name.lower()
        kernel_red = [main.extents[i] for i in main.reduce[1:]]  # window axes after the channel one
        if "conv" in name:
            if "group" in name or "depthwise" in name:
                chan_red = main.extents[main.reduce[0]] if main.reduce else 1
                if chan_red == 1:
                    return "depthwise", main.name
            if kernel_red and all(e == 1 for e in kernel_red):
                return "pointwise", main.name
            return "conv2d", main.name
        out = math.prod(main.extents[i] for i in main.spatial)
        if "matmul" in name or "dense" in name:
            rows = math.prod(main.extents[i] for i in main.spatial[:-1])
            return ("dense" if rows <= 4 or out <= red_ext else "matmul"), main.name
        return "contraction", main.name
    if "pool" in main.name.lower():
        return "pool", main.name
    return "reduce", main.name


# ---------------------------------------------------------------------------------- helpers
def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def vec_tile(extent: int, lanes: int, max_vectors: int = 2, valid: list[int] | None = None) -> int:
    """The vectorized tile of an axis: whole vectors when the extent allows, else at most one
    (partial) vector. A tile of several vectors with a partial one (e.g. 28 = 16 + 12) makes LLVM
    spill its accumulators, so it is never chosen. `valid`: the tiles allowed (default: divisors)."""
    valid = valid or _divisors(extent)
    whole = [t for t in valid if t % lanes == 0 and t <= max_vectors * lanes]
    return max(whole) if whole else max(t for t in valid if t <= lanes)


def _largest_divisor_le(n: int, limit: int) -> int:
    return max(d for d in _divisors(n) if d <= max(1, limit))


@dataclass
class AxisGroup:
    """Adjacent spatial axes that every access walks contiguously (e.g. H and W of a 1x1 conv):
    they are fused into one loop and tiled as one axis."""

    members: list[int]
    extents: list[int]
    write: int | None  # stride of the innermost member in the output
    reads: list[int | None]  # ... in each read

    @property
    def extent(self) -> int:
        return math.prod(self.extents)

    def tiles(self) -> list[int]:
        """Tile sizes that cut the fused axes into rectangles (a divisor of one member times the
        full extent of the members inside it). A tile that is not a rectangle must not be used:
        reverse_compute_at then covers it with a bounding box that reads values of neighbouring
        tiles, which buffer compaction has dropped (wrong results)."""
        out, inner = set(), 1
        for e in reversed(self.extents):
            out |= {d * inner for d in _divisors(e)}
            inner *= e
        return sorted(out)


def _mergeable(b: BlockFacts, a: int, c: int) -> bool:
    for acc in [b.write, *b.reads]:
        sa, sc = acc.strides[a], acc.strides[c]
        if sa is None or sc is None or sa != sc * b.extents[c]:
            return False
    return True


def _single(b: BlockFacts, i: int) -> AxisGroup:
    return AxisGroup([i], [b.extents[i]], b.write.strides[i], [a.strides[i] for a in b.reads])


def axis_groups(b: BlockFacts, lanes: int) -> list[AxisGroup]:
    """Groups of adjacent, mergeable spatial axes; a group is kept merged only when it has a
    rectangular tile of whole vectors (otherwise merging gains nothing)."""
    raw: list[list[int]] = []
    for i in b.spatial:
        if raw and raw[-1][-1] == i - 1 and _mergeable(b, i - 1, i):
            raw[-1].append(i)
        else:
            raw.append([i])

    def group(g: list[int]) -> AxisGroup:
        inner = g[-1]
        reads = [a.strides[inner] for a in b.reads]
        return AxisGroup(g, [b.extents[i] for i in g], b.write.strides[inner], reads)

    out = []
    for g in raw:
        grp = group(g)
        if len(g) > 1 and not any(t % lanes == 0 and t != grp.extents[-1] for t in grp.tiles()):
            out += [group([i]) for i in g]
        else:
            out.append(grp)
    return out


def choose_vector_group(groups: list[AxisGroup]) -> tuple[AxisGroup | None, int]:
    """The axis to vectorize and its score: contiguous in the output and, in every read,
    contiguous or broadcast (a gather scores low); ties go to the inner axis."""
    best, best_score = None, -(10**9)
    for g in groups:
        if g.extent < 2:
            continue
        score = 4 if g.write == 1 else -2
        for s in g.reads:
            score += 1 if s == 0 else 2 if s == 1 else 0 if s is not None and abs(s) <= 2 else -3
        score += 1 if g.extent >= 8 else -3 if g.extent < 4 else 0
        if score >= best_score:
            best, best_score = g, score
    return best, best_score


def choose_unroll_group(groups: list[AxisGroup], v: AxisGroup | None) -> AxisGroup | None:
    """A second axis for the register tile: one along which the reads that move with the vector
    axis stay put, so a loaded vector is reused (output channels of a conv, rows of a GEMM)."""
    best, best_score = None, 0
    for g in groups:
        if g is v or g.extent < 2:
            continue
        reuse = sum(1 for s in g.reads if s == 0)
        moving = v.reads if v is not None else g.reads
        reuse_v = sum(1 for s, sv in zip(g.reads, moving, strict=True) if sv != 0 and s == 0)
        score = 2 * reuse_v + reuse
        if score > best_score or (score == best_score and best is not None and g.extent > best.extent):
            best, best_score = g, score
    return best


class Skip(Exception):
    """A strategy does not fit this PrimFunc."""


# ---------------------------------------------------------------------------------- strategies
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
    if (
        g is None
        or g.members[-1] != len(bf.kinds) - 1
        or g.write != 1
        or g.extent < 4
        or any(st not in (0, 1) for st in g.reads)
    ):
        return {"vector": None}
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


def _inline_cheap(facts: FuncFacts, prod: BlockFacts) -> bool:
    """Inlining a producer repeats its index math in each consumer: not for padding (a bounds check
    per element) nor for a producer read through a reshape (a division per element)."""
    if prod.padded_dims:
        return False
    for b in facts.blocks:
        for a in b.reads:
            if a.buffer == prod.write.buffer and any(st is None for st in a.strides):
                return False
    return True


def schedule_injective(rec, facts: FuncFacts, lanes: int, parallel: bool = False) -> dict:
    """Elementwise / broadcast / layout kernels: inline every block into the output block(s), then
    vectorize the output's contiguous innermost axes."""
    sch = rec.sch
    info: dict = {}
    bodies = [str(sch.get(sch.get_sblock(b.name)).body) for b in facts.blocks]
    if any(m in body for body in bodies for m in LEFT_TO_LLVM):
        raise Skip("math without a vector form dominates: left to LLVM")
    with rec.layer("loop"):
        inner = [b.name for b in facts.blocks if not b.is_output and _inline_cheap(facts, b)]
        info["inlined"] = _inline_all(sch, inner)
        for b in facts.blocks:
            if _gone(sch, b.name):
                continue
            info[b.name] = _vectorize_block_loops(sch, sch.get_sblock(b.name), _lanes(lanes, b), parallel)
    return info


def _lanes(lanes: int, b: BlockFacts) -> int:
    return max(2, lanes * 32 // max(8, b.dtype_bits))


def _producers_consumers(facts: FuncFacts, main: str) -> tuple[list[str], list[str]]:
    names = [b.name for b in facts.blocks]
    k = names.index(main)
    return names[:k], names[k + 1 :]


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


def _has_if_then_else(sch, name: str) -> bool:
    import tvm

    f = tvm.get_global_func("s_tir.schedule.HasIfThenElse", allow_missing=True)
    return bool(f(sch.get(sch.get_sblock(name)))) if f is not None else True


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


def contraction_plan(
    facts: FuncFacts, lanes: int, max_vectors: int = MAX_VEC_TILE, acc_vectors: int = ACC_VECTORS
) -> TilePlan:
    """The tile `schedule_contraction` uses for these parameters (raises Skip when none fits)."""
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
        gu = choose_unroll_group(groups, gv)
        vt = vec_tile(gv.extent, lanes, max_vectors if gu is None else min(2, max_vectors), gv.tiles())
        if len(gv.members) == 1 or vt > gv.extents[-1]:
            break
        # the tile fits in the innermost axis: merging would only add index divisions
        k = groups.index(gv)
        groups[k : k + 1] = [_single(b, i) for i in gv.members]
    nvec = -(-vt // lanes)
    ut = max(t for t in gu.tiles() if t <= max(1, acc_vectors // nvec)) if gu is not None else 1
    return TilePlan(b, groups, gv, gu, vt, ut, lanes, gather)


def schedule_contraction(
    rec,
    facts: FuncFacts,
    lanes: int,
    *,
    cache: bool = True,
    inline_pad: bool = False,
    parallel: bool = False,
    annotate: bool = True,
    max_vectors: int = MAX_VEC_TILE,
    acc_vectors: int = ACC_VECTORS,
    unroll_step: int = AUTO_UNROLL_STEP,
) -> dict:
    """Conv / depthwise / pointwise / dense / matmul / windowed pool: one reduction block with
    injective producers (padding, casts) and consumers (bias, activation, requantize).

    Tile: [outer spatial (fused)] x [reduction] x [unrolled axis] x [vectorized axis]; the unrolled
    and vectorized tiles hold `acc_vectors` vector accumulators (cache_write "local"). `unroll_step`:
    the auto-unroll annotation of the target layer (0: none)."""
    sch = rec.sch
    plan = contraction_plan(facts, lanes, max_vectors, acc_vectors)
    b, groups, gv, gu, vt, ut, lanes = plan.block, plan.groups, plan.gv, plan.gu, plan.vt, plan.ut, plan.lanes
    annotate = annotate and not plan.gather and unroll_step > 0
    info: dict = {
        "vector_axis": gv.members,
        "vector_tile": vt,
        "unroll_axis": gu.members if gu else None,
        "unroll_tile": ut,
    }
    producers, consumers = _producers_consumers(facts, b.name)
    fused = None
    with rec.layer("loop"):
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
                outer.append(lo)
            (inner_v if g is gv else inner_u).append(lp)
        red = [loops[i] for i in b.reduce]
        sch.reorder(*outer, *red, *inner_u, *inner_v)
        fused = sch.fuse(*outer) if len(outer) > 1 else (outer[0] if outer else None)
        tiles = math.prod(g.extent for g in groups) // (vt * ut)
        if parallel and fused is not None and tiles > 1 and b.work() >= PARALLEL_MIN_WORK:
            sch.parallel(fused)
            info["parallel"] = True
        for i, lp in zip(b.reduce, red, strict=True):
            if 1 < b.extents[i] <= UNROLL_REDUCTION_MAX and i != b.reduce[0]:
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
    if cache:
        if fused is None:
            raise Skip("no tile loop to place the accumulator in")
        with rec.layer("memory"):
            wb = sch.cache_write(mb, 0, "local")
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


def schedule_window(rec, facts: FuncFacts, lanes: int, parallel: bool = False) -> dict:
    """Pooling whose windows are read with a stride: TVM's vectorizer turns a strided read into a
    gather, LLVM's into wide loads and shuffles. So: inline the producers (padding) and epilogues,
    unroll the small window loops, and leave the innermost output loop to LLVM."""
    sch = rec.sch
    b = facts.block(facts.main)
    if not b.loops_match_iters:
        raise Skip("loops do not bind the block's iter vars one to one")
    producers, consumers = _producers_consumers(facts, b.name)
    info: dict = {}
    with rec.layer("loop"):
        info["inlined"] = _inline_all(sch, list(reversed(producers)))
        info["epilogue_inlined"] = _inline_all(sch, list(reversed(consumers)), reverse=True)
        loops = sch.get_loops(sch.get_sblock(b.name))
        small = [i for i in b.reduce if 1 < b.extents[i] <= UNROLL_REDUCTION_MAX]
        if not small:
            raise Skip("no small window loop to unroll")
        for i in small:
            sch.unroll(loops[i])
        info["unrolled"] = small
    return info


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


def schedule_rows(
    rec,
    facts: FuncFacts,
    lanes: int,
    *,
    rfactor: bool = True,
    parallel: bool = False,
    annotate: bool = True,
    scalar_math: bool = False,
) -> dict:
    """Softmax / layernorm / reductions over the innermost axes: fuse the leading spatial (row) axes
    of the output block, parallel over rows, compute every other block at the row loop, vectorize
    the injective blocks' inner loops and the reductions (rfactor into `lanes` partial results)."""
    sch = rec.sch
    blocks = facts.blocks
    last = blocks[-1]
    if last.is_reduction and len(blocks) > 1:
        raise Skip("the last block is a reduction")
    if any(not b.loops_match_iters for b in blocks):
        raise Skip("loops do not bind iter vars one to one")
    lead = min(len(b.kinds) - len(b.kinds.lstrip("S")) for b in blocks)
    if last.is_reduction:  # a lone reduction (e.g. global pool without epilogue): rows = spatial axes
        lead = len(last.kinds) - len(last.kinds.lstrip("S"))
    if lead == 0:
        raise Skip("no leading spatial axes")
    row_ext = [last.extents[i] for i in range(lead)]
    if any([b.extents[i] for i in range(lead)] != row_ext for b in blocks):
        raise Skip("blocks do not share the row axes")
    info: dict = {"rows": math.prod(row_ext)}
    with rec.layer("loop"):
        # inline pure elementwise producers that feed only injective consumers (e.g. x - mean)
        names = [b.name for b in blocks]
        red_names = [b.name for b in blocks if b.is_reduction]
        if rfactor:
            info["rfactor"] = []
            for n in red_names:
                bf = facts.block(n)
                r = bf.reduce[-1]
                ext = bf.extents[r]
                if r != len(bf.kinds) - 1 or ext < 2 * _lanes(lanes, bf) or ext % _lanes(lanes, bf):
                    continue
                if any(a.strides[r] not in (0, 1) for a in bf.reads):
                    continue
                blk = sch.get_sblock(n)
                loops = sch.get_loops(blk)
                _, ki = sch.split(loops[-1], [None, _lanes(lanes, bf)])
                rf = sch.rfactor(ki, len(loops) - 1)  # partial results: one per lane
                info["rfactor"].append(n)
                names.insert(names.index(n), sch.get(rf).name_hint)
        last_blk = sch.get_sblock(last.name)
        loops = sch.get_loops(last_blk)
        row = sch.fuse(*loops[:lead]) if lead > 1 else loops[0]
        if parallel and last.work() * len(blocks) >= PARALLEL_MIN_WORK and math.prod(row_ext) > 1:
            sch.parallel(row)
            info["parallel"] = True
        for n in reversed(names[:-1]):
            sch.compute_at(sch.get_sblock(n), row, preserve_unit_loops=True)
        for n in names:
            blk = sch.get_sblock(n)
            st = sch.get(blk)
            kinds = [int(iv.iter_type) for iv in st.iter_vars]
            bl = sch.get_loops(blk)[1:]
            if not bl:
                continue
            if all(k == 0 for k in kinds):
                if scalar_math or not any(m in str(st.body) for m in SCALAR_MATH):
                    _vectorize_tail(sch, blk, lanes)
            elif n.endswith("_rf"):  # rf block loops: [lanes, (unit row loops), ko] -> lanes innermost
                sch.reorder(bl[-1], bl[0])
                sch.vectorize(bl[0])
            else:
                ext = _as_int(sch.get(bl[-1]).extent) or 0
                if ext > lanes and ext % lanes == 0 and annotate:
                    _, ki = sch.split(bl[-1], [None, lanes])
                    sch.unroll(ki)
    if rfactor and info.get("rfactor"):
        with rec.layer("memory"):
            for n in info["rfactor"]:
                rf = sch.get_sblock(n + "_rf")
                rl = sch.get_loops(rf)
                # init of the partial results out of the reduction loop (rl: [row, ko, ..., lanes])
                init = sch.decompose_reduction(rf, rl[1])
                _vectorize_tail(sch, init, lanes)
    return info


# ---------------------------------------------------------------------------------- driver
CONTRACTIONS = ("conv2d", "pointwise", "depthwise", "dense", "matmul", "contraction", "pool")


def strategies(facts: FuncFacts, lanes: int, parallel: bool = False) -> list[tuple[str, Callable]]:
    """Progressively simpler strategies for one PrimFunc; the first that applies is kept."""
    c = facts.op_class
    kw = {"parallel": parallel}
    out: list[tuple[str, Callable]] = []
    if c in CONTRACTIONS or c == "reduce":
        out += [
            ("tile+cache", lambda r: schedule_contraction(r, facts, lanes, **kw)),
            ("tile", lambda r: schedule_contraction(r, facts, lanes, cache=False, **kw)),
        ]
    if c == "pool":
        out.append(("window", lambda r: schedule_window(r, facts, lanes, **kw)))
    if c in ("multi-reduction", "reduce") or c in CONTRACTIONS:
        out += [
            ("rows+rfactor", lambda r: schedule_rows(r, facts, lanes, **kw)),
            ("rows", lambda r: schedule_rows(r, facts, lanes, rfactor=False, **kw)),
        ]
    if c == "injective":
        out.append(("vectorize", lambda r: schedule_injective(r, facts, lanes, **kw)))
    return out


LOOKUPS = {"GetSBlock", "GetLoops", "GetChildBlocks", "GetProducers", "GetConsumers", "GetOutputBlocks"}


@dataclass
class FuncSchedule:
    name: str
    op_class: str
    strategy: str  # "none" when nothing applied
    traces: dict  # layer -> trace JSON
    info: dict = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def build_target(threads: int = 1):
    """The host target the harness builds for (see backends/host.py)."""
    import tvm

    from ..tvm_env import host_cpu_name

    return tvm.target.Target({"kind": "llvm", "mcpu": host_cpu_name(), "num-cores": threads})


def schedule_func(func, name: str, lanes: int, parallel: bool = False, target=None) -> FuncSchedule:
    """Tries the strategies for one PrimFunc in order, each on a fresh recorder; keeps the first
    whose decisions replay on a fresh schedule and (when `target` is given) build."""
    from ..ir.replay import LayerRecorder, apply_trace, combine_layers

    try:
        facts = analyze(func, name)
    except Exception as e:  # noqa: BLE001
        return FuncSchedule(name, "opaque", "none", {}, failures=[f"analysis: {e}"])
    failures = []
    for sname, fn in strategies(facts, lanes, parallel):
        rec = LayerRecorder(func)
        try:
            info = fn(rec)
            traces = rec.traces()
            if not any(inst[0] not in LOOKUPS for t in traces.values() for inst in t[0]):
                raise Skip("no decisions")
            trace, where = combine_layers(
                [(layer, traces[layer]) for layer in ("loop", "memory", "target") if layer in traces]
            )
            replayed = apply_trace(func, trace, name, where)  # the decisions must replay
            if target is not None:  # and build: a schedule TVM accepts may still not lower
                import tvm

                tvm.compile(replayed.mod, target=target)
        except Exception as e:  # noqa: BLE001
            failures.append(f"{sname}: {type(e).__name__}: {_short(e)}")
            continue
        return FuncSchedule(name, facts.op_class, sname, traces, info, failures)
    return FuncSchedule(name, facts.op_class, "none", {}, failures=failures)


def _short(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[:200]


def rule_schedules(
    problem, vector_lanes: int | None = None, threads: int = 1, reference=None, verify_build: bool = True
) -> list[FuncSchedule]:
    """The rule-based schedule of every PrimFunc the reference's main calls (weight transforms in
    main_transform_params excluded), in call order. With `verify_build`, each kept schedule has
    been built for the host target."""
    from ..reference import build_reference

    lanes = vector_lanes or default_vector_lanes()
    ref = reference or build_reference(problem)
    target = build_target(threads) if verify_build else None
    funcs = ref.primfuncs()
    out = []
    for name in dict.fromkeys(ref.kernel_calls()):
        if name.startswith("main") or name not in funcs:
            continue
        out.append(schedule_func(funcs[name], name, lanes, parallel=threads > 1, target=target))
    return out


def rule_spec(
    problem, vector_lanes: int | None = None, threads: int = 1, verify_build: bool = True
) -> KernelSpec:
    """A decisions-only spec: the rule-based schedule of every kernel the reference's main calls.

    `vector_lanes`: float32 lanes of the target's vectors (default: 16 on an AVX-512 host, else 8).
    `threads`: the backend's thread count; the outer loops are made parallel only when it is > 1
    (with one thread, TVM's parallel launch made these kernels 5-35% slower).
    `verify_build`: keep a schedule only if the scheduled PrimFunc builds (about 0.1 s per kernel).
    Decisions are keyed by PrimFunc name; `decisions.workloads` holds each one's workload key."""
    from ..ir.replay import workload_key
    from ..reference import build_reference

    ref = build_reference(problem)
    funcs = ref.primfuncs()
    keys = {name: workload_key(f) for name, f in funcs.items()}  # before anything is scheduled
    dec = Decisions()
    notes = []
    for fs in rule_schedules(problem, vector_lanes, threads, reference=ref, verify_build=verify_build):
        notes.append(f"{fs.name}: {fs.op_class}/{fs.strategy}")
        if not fs.traces:
            continue
        for layer, trace in fs.traces.items():
            getattr(dec, layer)[fs.name] = trace
        dec.workloads[fs.name] = keys[fs.name]
    spec = KernelSpec(problem=problem.id, module=None, decisions=dec, method="rules", notes="; ".join(notes))
    if dec.is_empty():  # no rule applied anywhere: the candidate is the reference itself
        spec.module = ref.script()
        spec.notes += "; no rule applied: module is the reference"
    return spec
