"""What the rules read from a PrimFunc: per block, its iteration kinds and extents and the stride of each
block variable in every buffer access (`analyze`); the operator class (`classify`); the axes that fuse,
vectorize and unroll (`axis_groups`, `choose_vector_group`, `choose_unroll_group`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


def default_vector_lanes(mcpu: str | None = None) -> int:
    """float32 lanes of the widest vector unit, from LLVM's features: 16 with AVX-512, else 8. `mcpu`: an
    LLVM CPU name; None: this host (its detected features: a hypervisor may hide AVX-512 from a CPU
    whose name has it, tvm_env.host_cpu_features)."""
    if mcpu is None:
        from ...tvm_env import host_target

        target = host_target()
    else:
        target = {"kind": "llvm", "mcpu": mcpu}
    from ...ir.int8_dot import llvm_target_has

    return 16 if llvm_target_has(target, "avx512f") else 8


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
    dtype: str = "float32"  # of the buffer it writes (a reduction's accumulator)

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
    if len(block.writes) == 1:
        facts.dtype = str(block.writes[0].source.dtype)
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

    from ...ir.replay import _as_main

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


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def vec_tile(
    extent: int, lanes: int, max_vectors: int = 2, valid: list[int] | None = None, pow2: bool = False
) -> int:
    """The vectorized tile of an axis: whole vectors when the extent allows, else at most one
    (partial) vector. A tile of several vectors with a partial one (e.g. 28 = 16 + 12) makes LLVM
    spill its accumulators, so it is never chosen. `valid`: the tiles allowed (default: divisors).
    `pow2`: a power-of-two number of vectors where one divides (a register tile's vectorized loop
    becomes one LLVM vector of the tile's width, and this LLVM lowers one of 3 x 16 floats with a
    per-lane insert per element: 10-35x slower tiles, see docs/leka_vs_metaschedule.md)."""
    valid = valid or _divisors(extent)
    whole = [t for t in valid if t % lanes == 0 and t <= max_vectors * lanes]
    if pow2:
        whole = [t for t in whole if (t // lanes) & (t // lanes - 1) == 0] or whole
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


def reuse_score(g: AxisGroup, v: AxisGroup | None) -> int:
    """How much a register tile along `g` reuses loaded vectors: reads that stay put along it, twice
    those of them that move with the vector axis `v`."""
    reuse = sum(1 for s in g.reads if s == 0)
    moving = v.reads if v is not None else g.reads
    return 2 * sum(1 for s, sv in zip(g.reads, moving, strict=True) if sv != 0 and s == 0) + reuse


def slides(g: AxisGroup, window: list[set[int]] | None) -> bool:
    """Whether a read moves along `g` by the stride it moves by along one of the window's unrolled
    reduction axes (`window`: per read, those strides), so neighbouring outputs along `g` share inputs."""
    return bool(window) and any(s and s in w for s, w in zip(g.reads, window, strict=True))


def choose_unroll_group(
    groups: list[AxisGroup], v: AxisGroup | None, window: list[set[int]] | None = None
) -> AxisGroup | None:
    """A second axis for the register tile: one along which the reads that move with the vector
    axis stay put, so a loaded vector is reused (output channels of a conv, rows of a GEMM); between two
    that reuse as much, the longer. With `window` (per read, the strides of the window's unrolled
    reduction axes: rules.contraction.window_axes), one along which a read slides with the window comes
    before the longer (a depthwise convolution's W: rules.contraction._sliding_tile)."""
    best, best_key = None, (0, False, 0)
    for g in groups:
        if g is v or g.extent < 2:
            continue
        key = (reuse_score(g, v), slides(g, window), g.extent)
        if key[0] > 0 and key > best_key:
            best, best_key = g, key
    return best
