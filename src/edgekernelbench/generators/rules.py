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
LayerRecorder; the first whose primitives all apply and whose recorded trace replays on a fresh
schedule is kept (the last strategy is "no decisions"). TVM's schedule primitives check their
own legality, so a kept schedule computes what the reference computes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from ..ir.spec import Decisions, KernelSpec

AVX512_CPUS = {
    "skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client", "icelake-server",
    "tigerlake", "rocketlake", "sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d",
    "diamondrapids", "knl", "knm", "znver4", "znver5", "x86-64-v4",
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
    write = Access("?", [None] * len(iter_vars))
    bits = 32
    if len(block.writes) == 1:
        w = block.writes[0]
        write = Access(w.source.name, _strides(w.region, w.source.shape, iter_vars, ana))
        bits = w.source.dtype.bits
    reads = [Access(r.source.name, _strides(r.region, r.source.shape, iter_vars, ana))
             for r in block.reads if r.source.name != write.buffer]
    loops = sch.get_loops(brv)
    match = len(loops) == len(iter_vars) and all(
        _as_int(sch.get(lp).extent) == e for lp, e in zip(loops, extents, strict=True))
    is_output = any(w.source.name not in alloc_buffers for w in block.writes)
    return BlockFacts(block.name_hint, kinds, extents, write, reads, bits, is_output, match)


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


def vec_tile(extent: int, lanes: int, max_vectors: int = 2) -> int:
    """The vectorized tile of an axis: the whole axis when short, else a divisor near a multiple of lanes."""
    if extent <= max_vectors * lanes:
        return extent
    for m in range(max_vectors, 0, -1):
        if extent % (m * lanes) == 0:
            return m * lanes
    good = [d for d in _divisors(extent) if lanes // 2 <= d <= max_vectors * lanes]
    return max(good) if good else lanes


def _largest_divisor_le(n: int, limit: int) -> int:
    return max(d for d in _divisors(n) if d <= max(1, limit))


def choose_vector_axis(b: BlockFacts) -> tuple[int | None, int]:
    """The spatial axis to vectorize and its score: contiguous in the output and, in every read,
    contiguous or broadcast (a gather scores low)."""
    best, best_score = None, -(10**9)
    for i in b.spatial:
        ext = b.extents[i]
        if ext < 2:
            continue
        ws = b.write.strides[i]
        score = 4 if ws == 1 else -2
        for a in b.reads:
            s = a.strides[i]
            score += 1 if s == 0 else 2 if s == 1 else 0 if s is not None and abs(s) <= 2 else -3
        score += 1 if ext >= 8 else -3 if ext < 4 else 0
        if score >= best_score:  # ties: the later (inner) axis
            best, best_score = i, score
    return best, best_score


def choose_unroll_axis(b: BlockFacts, v: int | None) -> int | None:
    """A second spatial axis for the register tile: one along which the reads that move with the
    vector axis stay put, so a loaded vector is reused (output channels in a conv, rows in a GEMM)."""
    best, best_score = None, 0
    for i in b.spatial:
        if i == v or b.extents[i] < 2:
            continue
        reuse = sum(1 for a in b.reads if a.strides[i] == 0)
        moving = [a for a in b.reads if v is not None and a.strides[v] != 0]
        reuse_v = sum(1 for a in moving if a.strides[i] == 0)
        score = 2 * reuse_v + reuse
        if score > best_score or (score == best_score and best is not None and b.extents[i] > b.extents[best]):
            best, best_score = i, score
    return best


class Skip(Exception):
    """A strategy does not fit this PrimFunc."""


@dataclass
class Plan:
    """What a strategy decided, for the report."""

    op_class: str
    strategy: str
    details: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------------- strategies
def _try(fn: Callable, *args, **kw):
    """Runs one optional primitive; a ScheduleError leaves the schedule unchanged (primitives are
    atomic), so the rule is skipped and the schedule stays consistent."""
    try:
        return fn(*args, **kw)
    except Exception:  # noqa: BLE001  (tvm raises ScheduleError / TVMError subclasses)
        return None


def _inline_all(sch, names: list[str], reverse: bool = False) -> list[str]:
    done = []
    for n in names:
        blk = sch.get_sblock(n)
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


def _vectorize_block_loops(sch, brv, lanes: int, parallel_min: int, max_vectors: int = 2) -> dict:
    """Injective block: vectorize the innermost loop (or all loops fused when that one is short),
    parallel over the fused outer loops when the block is big enough."""
    loops = sch.get_loops(brv)
    if not loops:
        return {}
    exts = [_as_int(sch.get(lp).extent) or 0 for lp in loops]
    total = math.prod(exts)
    if exts[-1] >= lanes // 2 or len(loops) == 1:
        inner, outer = loops[-1], list(loops[:-1])
        inner_ext = exts[-1]
    else:  # short innermost axis: fuse everything, vectorize a slice of the fused loop
        inner = sch.fuse(*loops)
        outer, inner_ext = [], total
    vt = vec_tile(inner_ext, lanes, max_vectors)
    if vt < inner_ext:
        if inner_ext % vt:
            vt = _largest_divisor_le(inner_ext, max_vectors * lanes)
        o, inner = sch.split(inner, [None, vt])
        outer.append(o)
    if vt >= 2:
        sch.vectorize(inner)
    info = {"vector": vt}
    if outer:
        fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
        if total >= parallel_min:
            sch.parallel(fused)
            info["parallel"] = True
    return info


def schedule_injective(rec, facts: FuncFacts, lanes: int, parallel_min: int) -> dict:
    sch = rec.sch
    info: dict = {}
    with rec.layer("loop"):
        inner = [b.name for b in facts.blocks if not b.is_output]
        info["inlined"] = _inline_all(sch, inner)
        for b in facts.blocks:
            if _gone(sch, b.name):
                continue
            info[b.name] = _vectorize_block_loops(sch, sch.get_sblock(b.name), _lanes(lanes, b), parallel_min)
    return info


def _lanes(lanes: int, b: BlockFacts) -> int:
    return max(2, lanes * 32 // max(8, b.dtype_bits))


def _producers_consumers(facts: FuncFacts, main: str) -> tuple[list[str], list[str]]:
    names = [b.name for b in facts.blocks]
    k = names.index(main)
    return names[:k], names[k + 1:]


def schedule_contraction(rec, facts: FuncFacts, lanes: int, *, cache: bool = True, inline_pad: bool = True,
                         annotate: bool = True, parallel_min: int = PARALLEL_MIN_WORK,
                         max_vectors: int = MAX_VEC_TILE, acc_vectors: int = ACC_VECTORS) -> dict:
    """Conv / depthwise / pointwise / dense / matmul / windowed pool: one reduction block with
    injective producers (padding) and consumers (bias, activation)."""
    sch = rec.sch
    b = facts.block(facts.main)
    if not b.loops_match_iters:
        raise Skip("loops do not bind the block's iter vars one to one")
    lanes = _lanes(lanes, b)
    v, v_score = choose_vector_axis(b)
    if v is None or v_score <= 0:
        raise Skip("no spatial axis vectorizes without gathers")
    u = choose_unroll_axis(b, v)
    vt = vec_tile(b.extents[v], lanes, max_vectors if u is None else 2)
    if b.extents[v] % vt:
        raise Skip("imperfect vector tile")
    nvec = -(-vt // lanes)
    ut = _largest_divisor_le(b.extents[u], max(1, acc_vectors // nvec)) if u is not None else 1
    info: dict = {"vector_axis": v, "vector_tile": vt, "unroll_axis": u, "unroll_tile": ut}
    producers, consumers = _producers_consumers(facts, b.name)
    with rec.layer("loop"):
        if inline_pad:
            info["inlined"] = _inline_all(sch, list(reversed(producers)))
        info["epilogue_inlined"] = _inline_all(sch, list(reversed(consumers)), reverse=True)
        mb = sch.get_sblock(b.name)
        loops = sch.get_loops(mb)
        outer, inner_u, inner_v = [], [], []
        for i in b.spatial:
            lp = loops[i]
            if i == v and vt < b.extents[i]:
                lo, li = sch.split(lp, [None, vt])
                outer.append(lo)
                inner_v.append(li)
            elif i == v:
                inner_v.append(lp)
            elif i == u and ut < b.extents[i]:
                lo, li = sch.split(lp, [None, ut])
                outer.append(lo)
                inner_u.append(li)
            elif i == u:
                inner_u.append(lp)
            else:
                outer.append(lp)
        red = [loops[i] for i in b.reduce]
        sch.reorder(*outer, *red, *inner_u, *inner_v)
        outer = [lp for lp in outer]
        fused = sch.fuse(*outer) if len(outer) > 1 else (outer[0] if outer else None)
        spatial_work = math.prod(b.extents[i] for i in b.spatial)
        if fused is not None and b.work() >= parallel_min and spatial_work // (vt * ut) > 1:
            sch.parallel(fused)
            info["parallel"] = True
        for i, lp in zip(b.reduce, red, strict=True):
            if 1 < b.extents[i] <= UNROLL_REDUCTION_MAX and i != b.reduce[0]:
                sch.unroll(lp)
        for lp in inner_u:
            sch.unroll(lp)
        sch.vectorize(inner_v[0])
        left = [c for c in consumers if not _gone(sch, c)]
        if not cache and fused is not None:
            for c in left:
                sch.reverse_compute_at(sch.get_sblock(c), fused)
                _vectorize_tail(sch, sch.get_sblock(c), lanes)
            if red:
                init = sch.decompose_reduction(mb, red[0])
                _vectorize_tail(sch, init, lanes)
        elif not cache and left:
            for c in left:
                _vectorize_block_loops(sch, sch.get_sblock(c), lanes, parallel_min)
        if not inline_pad:
            for p in producers:
                if not _gone(sch, p):
                    _vectorize_block_loops(sch, sch.get_sblock(p), lanes, parallel_min)
    if cache:
        if fused is None:
            raise Skip("no tile loop to place the accumulator in")
        with rec.layer("memory"):
            wb = sch.cache_write(mb, 0, "local")
            sch.reverse_compute_at(wb, fused)
            wb_name = sch.get(wb).name_hint
            fused_epi = _inline_all(sch, [c for c in consumers if not _gone(sch, c)], reverse=True)
            info["epilogue_in_writeback"] = fused_epi
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
            sch.annotate(fused, "pragma_auto_unroll_max_step", AUTO_UNROLL_STEP)
            sch.annotate(fused, "pragma_unroll_explicit", 1)
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


def schedule_rows(rec, facts: FuncFacts, lanes: int, *, rfactor: bool = True,
                  parallel_min: int = PARALLEL_MIN_WORK, annotate: bool = True) -> dict:
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
                if any(a.strides[r] != 1 for a in bf.reads):
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
        if facts.block(last.name).work() * len(blocks) >= parallel_min and math.prod(row_ext) > 1:
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
                _vectorize_tail(sch, blk, lanes)
            elif n.endswith("_rf"):  # rf block: spatial lane loop is innermost after the ko loop
                sch.vectorize(bl[-1])
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
                # init of the partial results out of the reduction loop
                init = sch.decompose_reduction(rf, rl[-2])
                _vectorize_tail(sch, init, lanes)
    return info


# ---------------------------------------------------------------------------------- driver
CONTRACTIONS = ("conv2d", "pointwise", "depthwise", "dense", "matmul", "contraction", "pool")


def strategies(facts: FuncFacts, lanes: int) -> list[tuple[str, Callable]]:
    """Progressively simpler strategies for one PrimFunc; the first that applies is kept."""
    c = facts.op_class
    out: list[tuple[str, Callable]] = []
    if c in CONTRACTIONS or c == "reduce":
        out += [
            ("tile+cache", lambda r: schedule_contraction(r, facts, lanes)),
            ("tile", lambda r: schedule_contraction(r, facts, lanes, cache=False)),
            ("tile-noinline", lambda r: schedule_contraction(r, facts, lanes, cache=False, inline_pad=False)),
        ]
    if c in ("multi-reduction", "reduce", "pool") or c in CONTRACTIONS:
        out += [
            ("rows+rfactor", lambda r: schedule_rows(r, facts, lanes)),
            ("rows", lambda r: schedule_rows(r, facts, lanes, rfactor=False)),
        ]
    if c == "injective":
        out.append(("vectorize", lambda r: schedule_injective(r, facts, lanes, PARALLEL_MIN_WORK)))
    return out


@dataclass
class FuncSchedule:
    name: str
    op_class: str
    strategy: str  # "none" when nothing applied
    traces: dict  # layer -> trace JSON
    info: dict = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def fresh_copy(func):
    """A deep copy of a PrimFunc. A Schedule made on a module built from `func.with_attr(...)` (as
    LayerRecorder and apply_trace do) edits the shared body in place, which would change the cached
    reference; scheduling a copy keeps the reference intact."""
    import tvm

    return tvm.ir.load_json(tvm.ir.save_json(func))


def schedule_func(func, name: str, lanes: int) -> FuncSchedule:
    from ..ir.replay import LayerRecorder, apply_trace, combine_layers

    try:
        facts = analyze(fresh_copy(func), name)
    except Exception as e:  # noqa: BLE001
        return FuncSchedule(name, "opaque", "none", {}, failures=[f"analysis: {e}"])
    failures = []
    for sname, fn in strategies(facts, lanes):
        rec = LayerRecorder(fresh_copy(func))
        try:
            info = fn(rec)
            traces = rec.traces()
            if not traces:
                raise Skip("no decisions")
            trace, where = combine_layers([(layer, traces[layer]) for layer in ("loop", "memory", "target")
                                           if layer in traces])
            apply_trace(fresh_copy(func), trace, name, where)  # the recorded decisions must replay
        except Exception as e:  # noqa: BLE001
            failures.append(f"{sname}: {type(e).__name__}: {_short(e)}")
            continue
        return FuncSchedule(name, facts.op_class, sname, traces, info, failures)
    return FuncSchedule(name, facts.op_class, "none", {}, failures=failures)


def _short(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[:200]


def rule_schedules(problem, vector_lanes: int | None = None) -> list[FuncSchedule]:
    from ..reference import build_reference

    lanes = vector_lanes or default_vector_lanes()
    ref = build_reference(problem)
    funcs = ref.primfuncs()
    out = []
    for name in dict.fromkeys(ref.kernel_calls()):
        if name.startswith("main") or name not in funcs:
            continue
        out.append(schedule_func(funcs[name], name, lanes))
    return out


def rule_spec(problem, vector_lanes: int | None = None) -> KernelSpec:
    """A decisions-only spec: the rule-based schedule of every kernel the reference's main calls."""
    from ..ir.replay import workload_key
    from ..reference import build_reference

    funcs = build_reference(problem).primfuncs()
    dec = Decisions()
    notes = []
    for fs in rule_schedules(problem, vector_lanes):
        notes.append(f"{fs.name}: {fs.op_class}/{fs.strategy}")
        if not fs.traces:
            continue
        for layer, trace in fs.traces.items():
            getattr(dec, layer)[fs.name] = trace
        dec.workloads[fs.name] = workload_key(funcs[fs.name])
    return KernelSpec(problem=problem.id, module=None, decisions=dec, method="rules", notes="; ".join(notes))
