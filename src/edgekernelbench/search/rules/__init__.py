"""The rule-based scheduler: one schedule rule per operator class, recorded as layered decisions. It is
the builtin proposer's generator of alternatives (search/variants.py, LEKA) and the `rules` candidate.

For every PrimFunc that the reference's `main` calls, the rules look at its blocks (iteration kinds,
extents, and the stride of each block variable in every buffer access), classify it, and schedule
it on a LayerRecorder in three phases:

- loop:   pad_einsum of an axis with no divisor that fills whole vectors (257 DFT bins),
          compute_inline producers (padding), reverse_compute_inline epilogues (bias, activation),
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

Matrix-vector products (one wide spatial axis, e.g. a dense layer at batch 1) are scheduled first by
stream.py: the reduction outermost, the weight streamed row by row into the output (loop_partition splits
off an output tail that fills no whole vector).

One file per job: analysis.py (what the rules read), primitives.py (shared steps and constants),
contraction.py / stream.py / injective.py / window.py / rows.py (one rule per operator class), driver.py
(strategies, schedule_func, rule_spec).
"""

from .analysis import (
    Access,
    AxisGroup,
    BlockFacts,
    FuncFacts,
    analyze,
    axis_groups,
    choose_unroll_group,
    choose_vector_group,
    classify,
    default_vector_lanes,
    vec_tile,
)
from .contraction import TilePlan, contraction_plan, schedule_contraction
from .driver import (
    CONTRACTIONS,
    LOOKUPS,
    FuncSchedule,
    build_target,
    rule_schedules,
    rule_spec,
    schedule_func,
    strategies,
)
from .injective import schedule_injective
from .primitives import ACC_VECTORS, AUTO_UNROLL_STEP, MAX_VEC_TILE, Skip
from .rows import schedule_rows
from .stream import StreamPlan, schedule_stream, stream_plan
from .window import schedule_window

__all__ = [
    "ACC_VECTORS",
    "AUTO_UNROLL_STEP",
    "CONTRACTIONS",
    "LOOKUPS",
    "MAX_VEC_TILE",
    "Access",
    "AxisGroup",
    "BlockFacts",
    "FuncFacts",
    "FuncSchedule",
    "Skip",
    "StreamPlan",
    "TilePlan",
    "analyze",
    "axis_groups",
    "build_target",
    "choose_unroll_group",
    "choose_vector_group",
    "classify",
    "contraction_plan",
    "default_vector_lanes",
    "rule_schedules",
    "rule_spec",
    "schedule_contraction",
    "schedule_func",
    "schedule_injective",
    "schedule_rows",
    "schedule_stream",
    "schedule_window",
    "strategies",
    "stream_plan",
    "vec_tile",
]
