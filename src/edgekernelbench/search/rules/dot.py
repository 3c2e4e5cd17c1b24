"""The rule for the u8 x s8 dot-product kernels of the Int8DotProduct graph (ir/int8_dot.py): a register tile
of `rows` rows x `vectors` groups of 16 output columns, accumulated in int32 registers by VNNI's vpdpbusd
(the target layer's tensorize with ir.int8_dot.VNNI_INTRINS), the zero-point correction and bias fused into
the tile's write-back. Offered only where the host target has VNNI (`vnni_available`)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ...ir.int8_dot import DOT_BLOCK, VNNI_INTRINS, register_intrinsics, target_has_vnni
from .analysis import FuncFacts
from .primitives import ACC_SCOPE, Skip, _vectorize_tail

# register tiles (rows x 16-lane vectors) in the rules' order of preference: 16 of the 32 zmm registers
# hold accumulators, the rest the weight vectors and broadcast rows
DOT_TILES = ((4, 4), (8, 2), (2, 8), (6, 4), (4, 2), (1, 4))


@functools.cache
def vnni_available() -> bool:
    """Whether the host target the rules build for (driver.build_target: this CPU) has VNNI."""
    from ...tvm_env import host_target

    return target_has_vnni(host_target())


def is_dot(facts: FuncFacts) -> bool:
    return any(b.name == DOT_BLOCK for b in facts.blocks)


def dot_strategy(rows: int, vectors: int) -> str:
    """The rules' name of the VNNI tile of `rows` rows x `vectors` 16-lane vectors (driver.strategies)."""
    return f"vnni {rows}x{16 * vectors}"


@dataclass(frozen=True)
class DotPlan:
    """The register tile `schedule_dot` makes of a dot kernel for (rows, vectors): `ut` rows x `nv` vectors
    of 16 int32 accumulators, over `tiles` tiles, `ko` steps of 4 k each (search/cost.py `dot_cost`)."""

    ut: int
    nv: int
    tiles: int
    ko: int
    no: int  # 16-column panels of the weights (N / 16)


def dot_plan(facts: FuncFacts, rows: int, vectors: int) -> DotPlan:
    """The tile of `schedule_dot(rows, vectors)` on this kernel, from its dot block's iter vars (rows..., the
    column panels, the 16 lanes, k / 4, 4)."""
    b = facts.block(DOT_BLOCK)
    *row_axes, no_axis, _lanes = b.spatial
    m, no, ko = b.extents[row_axes[-1]], b.extents[no_axis], b.extents[b.reduce[0]]
    ut, nv = _divisor_near(m, rows), _divisor_near(no, vectors)
    total_rows = math.prod(b.extents[i] for i in row_axes)
    return DotPlan(ut, nv, (total_rows // ut) * (no // nv), ko, no)


def _divisor_near(n: int, cap: int) -> int:
    """The largest divisor of `n` at most `cap`; when that is below cap / 2 (125 rows, 4 asked: 1), the
    smallest above it up to 2 cap (5) -- the tile loops have no remainder (tensorize needs whole tiles)."""
    d = max(d for d in range(1, min(n, cap) + 1) if n % d == 0)
    if 2 * d < cap:
        d = next((e for e in range(cap + 1, min(n, 2 * cap) + 1) if n % e == 0), d)
    return d


def schedule_dot(rec, facts: FuncFacts, rows: int = 4, vectors: int = 4, parallel: bool = False) -> dict:
    """loop: the tile (rows x vectors, each the largest divisor of its extent at most that), the reduction
    over k/4 outside it; memory: the accumulators in an `ACC_SCOPE` buffer (registers) written back per tile;
    target: the reduction's init (bias and zero-point correction) split off, the 16 x 4 inner product
    tensorized with vpdpbusd. The row sums (a loop over the input before the tiles) are vectorized."""
    if not is_dot(facts):
        raise Skip("not a dot_u8s8 kernel")
    register_intrinsics()
    sch = rec.sch
    with rec.layer("loop"):
        d = sch.get_sblock(DOT_BLOCK)
        *outer_rows, m, no, ni, ko, ki = sch.get_loops(d)
        # the tile splits the innermost row loop (a convolution's W): a tile across two image rows made
        # TVM's cache_write + tensorize wrong (36 = 6 x 6 rows in tiles of 4)
        plan = dot_plan(facts, rows, vectors)  # what search/cost.py's dot_cost estimates
        ut, nv = plan.ut, plan.nv
        mo, mi = sch.split(m, [None, ut])
        noo, noi = sch.split(no, [None, nv])
        sch.reorder(*outer_rows, mo, noo, ko, mi, noi, ni, ki)
        tile = sch.fuse(*outer_rows, mo, noo)
        if parallel:
            sch.parallel(tile)
        sch.unroll(mi)
        sch.unroll(noi)
    with rec.layer("memory"):
        wb = sch.cache_write(d, 0, ACC_SCOPE)
        sch.reverse_compute_at(wb, tile)
        _vectorize_tail(sch, wb, 16)
    with rec.layer("target"):
        init = sch.decompose_reduction(d, ko)
        _vectorize_tail(sch, init, 16)
        sch.tensorize(sch.get_loops(d)[-2], VNNI_INTRINS[ACC_SCOPE])  # the intrinsic of the tile's scope
    return {"tile": [ut, nv * 16], "intrinsic": VNNI_INTRINS[ACC_SCOPE]}
