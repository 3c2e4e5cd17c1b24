"""An analytical cost model for the builtin proposer: ranks a kernel's schedule alternatives before any
is measured, so the judge's evaluations go to the few that look best.

For a contraction (conv, pointwise, depthwise, dense, matmul, pool) scheduled as a register tile
([outer spatial] x [reduction] x [unroll tile ut] x [vector tile vt], search.rules.contraction_plan),
one step of the reduction inside a tile costs

    max(FMAs / FMA issue rate, loads / load issue rate, FMA latency + 1 when few accumulators) + spills

where FMAs = nvec * ut vector FMAs (nvec = vt / lanes, rounded up: a partial vector costs a whole one),
loads = nvec vector loads per read that moves with the vector axis, one broadcast per unrolled row for a
read that moves with the unrolled axis only, lanes scalar loads per vector of a gathered read, and
spills = two memory operations per accumulator beyond the vector registers (accumulators + one vector
per moving operand + one broadcast). Without the accumulator cache (memory layer off), every step also
reads and writes its accumulators. Per tile: initialising and writing back the accumulators and the loop
overhead (higher without auto-unrolling when the reduction is short). The memory side: each tile streams
its operands' reduction slices from the smallest cache level that holds what the kernel touches before
it uses the slice again -- an operand larger than L2 that every tile reads a part of its own (none
shared, no window: yamnet's 2 MiB of pointwise weights, read once per call whatever the tile) streams
the whole operand, until the next call -- at that level's bandwidth; the estimate is the larger of the
compute and memory times.

A u8 x s8 dot-product kernel on VNNI register tiles (`dot_cost`, search.rules.schedule_dot) is modelled the
same way, a vpdpbusd (16 lanes x 4 multiply-adds) for an FMA: per step of 4 k, ut x nv of them, a load per
weight vector and a broadcast per row; its weights swept whole by every row tile.

A matrix-vector product scheduled by the stream rule (`stream_cost`) is modelled as its weight streamed
once, the accumulators in L1: a load, a store and a load of the weight per vector FMA.

The units are cycles of an idealised core; only the order matters. Other operator classes (rows,
windows, injective) keep the rule-based order of their strategies (their cost is the strategy's rank)."""

from __future__ import annotations

import math
from dataclasses import dataclass

# bytes per cycle from each level to the core (a rough, CPU-independent ladder: the ranking, not the
# figure, is what matters)
LEVEL_BW = (("L1", 128.0), ("L2", 48.0), ("L3", 16.0), ("DRAM", 6.0))
# loop overhead per reduction step by auto-unroll step (0: loops stay loops; the rules' 64 is the
# measured default)
UNROLL_OVERHEAD = {0: 1.0, 16: 0.35, 64: 0.25, 256: 0.3}


@dataclass(frozen=True)
class Machine:
    lanes: int  # float32 lanes of the widest vector
    vector_regs: int  # architectural vector registers
    fma_per_cycle: float = 2.0
    # sustained beside the FMAs, not the ports' peak: on a 2-load-port AVX-512 core, a tile with one
    # broadcast per FMA (1 vector x 16-24 rows) measured 25-33% slower than one with 10 loads per 16 FMAs
    # (2 vectors x 8 rows), which a rate of 2 ranked equal
    loads_per_cycle: float = 1.5
    fma_latency: int = 4  # cycles: a step takes at least this (+1) when each accumulator is one FMA chain
    l1_bytes: int = 32 * 1024
    l2_bytes: int = 1024 * 1024
    l3_bytes: int = 16 * 1024 * 1024

    @classmethod
    def for_profile(cls, profile, lanes: int | None = None) -> Machine:
        """From a backend profile: its vector width and caches (profile.caches: l1d_kib, l2_kib, l3_kib,
        when given). An AVX-512 or Arm (NEON/SVE) target has 32 vector registers, other x86 targets 16."""
        lanes = int(lanes or getattr(profile, "vector_lanes", 0) or 8)
        target = getattr(profile, "target", {}) or {}
        arm = any(a in str(target.get("mtriple", "")) for a in ("aarch64", "arm"))
        regs = 32 if lanes >= 16 or arm else 16
        caches = getattr(profile, "caches", {}) or {}

        def size(level: str, default: int) -> int:
            v = caches.get(f"{level}_kib")
            return int(v) * 1024 if isinstance(v, (int, float)) and v > 0 else default

        return cls(
            lanes=lanes,
            vector_regs=regs,
            l1_bytes=size("l1d", cls.l1_bytes),
            l2_bytes=size("l2", cls.l2_bytes),
            l3_bytes=size("l3", cls.l3_bytes),
        )

    def bandwidth(self, nbytes: int) -> float:
        """Bytes per cycle from the smallest level that holds `nbytes`."""
        for (_, bw), cap in zip(LEVEL_BW, (self.l1_bytes, self.l2_bytes, self.l3_bytes, None), strict=True):
            if cap is None or nbytes <= cap:
                return bw
        return LEVEL_BW[-1][1]


def _step(fmas: int, loads: float, live: int, machine: Machine, spills: float = 0.0) -> float:
    """Cycles of one reduction step of a register tile: `fmas` vector FMAs (or vpdpbusd), `loads` loads,
    `live` vector registers wanted (two memory operations per one beyond the machine's), `spills` memory
    operations besides; at least the FMA latency + 1 when too few accumulators hide it."""
    spills += 2.0 * max(0, live - machine.vector_regs)
    step = max(fmas / machine.fma_per_cycle, (loads + spills) / machine.loads_per_cycle)
    if fmas < machine.fma_latency * machine.fma_per_cycle * 2:
        # too few accumulators to hide the FMA latency with room to spare: each step waits on its chains
        step = max(step, machine.fma_latency + 1.0)
    return step


def contraction_cost(
    plan, machine: Machine, *, cache: bool = True, unroll_step: int = 64, order: str = "rows"
) -> float:
    """Estimated cycles of a contraction scheduled with `plan` (search.rules.TilePlan) and its tile loops in
    `order` (search.rules.schedule_contraction)."""
    b = plan.block
    lanes = plan.lanes
    nvec, ut, vt = plan.nvec, plan.ut, plan.vt
    red = math.prod(b.extents[i] for i in b.reduce) if b.reduce else 1
    spatial = math.prod(b.extents[i] for i in b.spatial) if b.spatial else 1
    tiles = math.ceil(spatial / max(1, vt * ut))
    v_axes = set(plan.gv.members)
    u_axes = set(plan.gu.members) if plan.gu is not None else set()
    elem = max(1, b.dtype_bits // 8)

    loads, moving = 0.0, 0
    memory = 0.0  # cycles to bring each tile's operand slices in, from where they live between tiles
    fastest = _fastest_tiles(plan, order)
    tiled = plan.tiled()
    for acc in b.reads:
        along_v = any((acc.strides[i] or 0) != 0 for i in v_axes)
        along_u = any((acc.strides[i] or 0) != 0 for i in u_axes)
        gathered = any(acc.strides[i] is None or abs(acc.strides[i]) > 2 for i in v_axes)
        if along_v:
            loads += nvec * (ut if along_u else 1) * (lanes if gathered else 1)
            moving += 1
        elif along_u:
            loads += ut
        else:
            loads += 1 / max(1, nvec * ut)  # invariant in the tile: hoisted by the compiler
        sliced = (vt if along_v else 1) * (ut if along_u else 1) * red * elem
        # the next tile moves along the fastest tile axes: a slice that does not depend on them is the
        # one just used (in L1); one that does cycles through all of them before it comes back; one that
        # depends on every tiled axis is never used by another tile of the call: it comes back with the
        # next call, from beyond L2 where the whole operand does not fit there. Not a window's input:
        # neighbouring tiles share its halo, and its bytes by iter var count each input once per tap
        moves = [i for i in (fastest.members if fastest else []) if _touches(acc, i)]
        ws = (
            sliced * max(1, math.prod(b.extents[i] for i in moves) // plan.tile(fastest)) if moves else sliced
        )
        whole = _operand_bytes(b, acc, elem)
        unshared = (
            tiled and not _windowed(b, acc) and all(any(_touches(acc, i) for i in g.members) for g in tiled)
        )
        if unshared and whole > machine.l2_bytes:
            ws = whole
        memory += sliced / machine.bandwidth(min(ws, whole))
    fmas = nvec * ut
    extra = 0.0
    if not cache:
        loads += fmas
        extra = fmas
    step = _step(fmas, loads, fmas + moving * nvec + 1, machine, extra)
    # per tile: accumulators initialised and written back; loop overhead per reduction step, larger
    # when the short inner loops are not unrolled
    per_step_overhead = UNROLL_OVERHEAD.get(unroll_step, 0.5)
    if unroll_step >= 256 and red * fmas > 1024:
        per_step_overhead += 0.25  # a large unrolled body: instruction-cache pressure
    compute = tiles * (red * (step + per_step_overhead) + 2 * fmas + 4)
    return max(compute, tiles * memory)


def _touches(acc, i: int) -> bool:
    s = acc.strides[i]
    return s is None or s != 0


def _windowed(b, acc) -> bool:
    """Whether operand access `acc` of block `b` reads through a window: one of its dimensions indexed by a
    spatial and a reduction iter var together (a convolution's input: oy * stride + ky)."""
    red = set(b.reduce)
    return any(d & red and d - red for d in acc.dims)


def _operand_bytes(b, acc, elem: int) -> int:
    return math.prod(b.extents[i] for i in range(len(b.extents)) if _touches(acc, i)) * elem


def _fastest_tiles(plan, order: str):
    """The axis group of the innermost tile loop (None: one tile): the last group with tiles of its own
    ("panels" moves the vectorized axis's tiles outermost)."""
    tiled = plan.tiled()
    if order == "panels" and plan.gv in tiled and len(tiled) > 1:
        tiled.remove(plan.gv)
    return tiled[-1] if tiled else None


def dot_cost(plan, machine: Machine) -> float:
    """Estimated cycles of a u8 x s8 dot-product kernel scheduled by search.rules.schedule_dot (`plan`: its
    DotPlan): per step of 4 k inside a tile, ut x nv vpdpbusd (on the FMA ports, with an FMA's latency),
    nv weight vectors and ut row broadcasts loaded, spills as for a contraction; per tile, the accumulators
    initialised and written back. The memory side: the panel loop is the innermost tile loop, so every row
    tile reads all the weights (N x K bytes) from the level that holds them, its rows from L1."""
    ut, nv, ko = plan.ut, plan.nv, plan.ko
    fmas = ut * nv
    step = _step(fmas, nv + ut, fmas + nv + 1, machine)
    compute = plan.tiles * (ko * (step + UNROLL_OVERHEAD[64]) + 2 * fmas + 4)
    weights = plan.no * 64 * ko  # bytes: 16 columns x 4 k per vector
    rows = ut * 4 * ko
    memory = plan.tiles * (nv * 64 * ko / machine.bandwidth(weights) + rows / machine.bandwidth(rows))
    return max(compute, memory)


def stream_cost(plan, machine: Machine) -> float:
    """Estimated cycles of a matrix-vector product scheduled by search.rules.schedule_stream (`plan`: its
    StreamPlan): per reduction step, each vector of the output (whole chunks, then the tail's partial
    vectors) costs one FMA, one load of the weight and a load and a store of the accumulator, which lives in
    memory (L1); the memory side streams every operand that moves with the reduction once, from the level
    that holds it."""
    b = plan.block
    lanes = plan.lanes
    red = math.prod(b.extents[i] for i in b.reduce)
    nvec = plan.main // lanes + math.ceil(plan.tail / lanes)
    step = max(nvec / machine.fma_per_cycle, 3 * nvec / machine.loads_per_cycle) + UNROLL_OVERHEAD[0]
    elem = max(1, b.dtype_bits // 8)
    memory = 0.0
    for acc in b.reads:
        if any((acc.strides[i] or 0) != 0 for i in b.reduce):
            nbytes = _operand_bytes(b, acc, elem)
            memory += nbytes / machine.bandwidth(nbytes)
    return max(red * step, memory)
