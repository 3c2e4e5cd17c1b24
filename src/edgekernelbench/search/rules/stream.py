"""The rule for matrix-vector products (a dense layer, or a contraction whose only wide spatial axis is the
output's contiguous one, at batch 1): the reduction outermost, each step streaming one contiguous row of
the weight into the whole output, which stays in L1 as the accumulator. The output axis is cut into chunks
of `vectors` whole vectors; when its extent is not a multiple of the chunk (521 classes, 1000 classes at 16
lanes) it is first partitioned (loop_partition) into the whole chunks and a tail, each scheduled on its own,
so neither has a bounds check per element.

Why a rule of its own: a register tile (contraction.py) keeps the accumulators in registers and sweeps the
reduction inside each tile, reading the weight column panel by column panel with a stride of a whole row;
for an extent with no divisor that fills whole vectors its tile is a partial or scalar vector. On yamnet's
classifier (1 x 1024 @ 1024 x 521 + sigmoid), measured here standalone on an AVX-512 core: scalar tile 590
us, a tile with a bounds check per vector 45-760 us (LLVM's masked code varied with the chunk), this rule
29-32 us for chunks of 1 to 32 vectors."""

from __future__ import annotations

from dataclasses import dataclass

from .analysis import BlockFacts, FuncFacts
from .primitives import Skip, _inline_all, _lanes, _producers_consumers, _vectorize_block_loops

STREAM_VECTORS = 4  # vectors per chunk of the output axis


@dataclass(frozen=True)
class StreamPlan:
    block: BlockFacts
    axis: int  # the block iter var of the output axis (vectorized)
    chunk: int  # elements per chunk (whole vectors)
    main: int  # the extent covered by whole chunks; the rest is the tail
    lanes: int

    @property
    def extent(self) -> int:
        return self.block.extents[self.axis]

    @property
    def tail(self) -> int:
        return self.extent - self.main


def stream_plan(facts: FuncFacts, lanes: int, vectors: int = STREAM_VECTORS) -> StreamPlan:
    """The plan of `schedule_stream`, or Skip when the kernel is not a matrix-vector product: one reduction
    block whose spatial axes other than one are of extent 1, that axis contiguous in the output and in every
    read that moves with it, and a read (the weight) that moves with both it and the reduction."""
    if facts.main is None:
        raise Skip("no reduction block")
    b = facts.block(facts.main)
    if not b.reduce or not b.loops_match_iters:
        raise Skip("not a reduction whose loops bind its iter vars one to one")
    wide = [i for i in b.spatial if b.extents[i] > 1]
    if len(wide) != 1:
        raise Skip("not a matrix-vector product (more or fewer than one wide spatial axis)")
    n = wide[0]
    if b.write.strides[n] != 1 or any(a.strides[n] not in (0, 1) for a in b.reads):
        raise Skip("the output axis is not contiguous in the output and every read that moves with it")
    if not any(a.strides[n] == 1 and any(a.strides[r] != 0 for r in b.reduce) for a in b.reads):
        raise Skip("no operand streams along the reduction")
    lanes = _lanes(lanes, b)
    ext = b.extents[n]
    if ext < 2 * lanes:
        raise Skip("fewer than two vectors along the output axis")
    chunk = min(vectors * lanes, ext // lanes * lanes)
    return StreamPlan(b, n, chunk, ext // chunk * chunk, lanes)


def schedule_stream(rec, facts: FuncFacts, lanes: int, vectors: int = STREAM_VECTORS) -> dict:
    """loop: producers (casts) inlined, the epilogue folded into its first block (vectorized over the output
    after the reduction); the output axis partitioned into whole chunks and a tail; in each part the
    reduction outermost, the chunks inside it, each chunk one vectorized loop; the initialisation of the
    accumulator (the output) split off before the reduction."""
    plan = stream_plan(facts, lanes, vectors)
    sch = rec.sch
    b, n = plan.block, plan.axis
    producers, consumers = _producers_consumers(facts, b.name)
    info: dict = {"stream_axis": n, "chunk": plan.chunk, "tail": plan.tail}
    with rec.layer("loop"):
        info["inlined"] = _inline_all(sch, list(reversed(producers)))
        info["epilogue_inlined"] = _inline_all(sch, consumers[1:], reverse=True)
        blk = sch.get_sblock(b.name)
        loops = sch.get_loops(blk)
        parts = [loops[n]] if plan.tail == 0 else sch.loop_partition(loops[n], [plan.main, None])
        for part, extent in zip(parts, (plan.main, plan.tail), strict=False):
            (pb,) = sch.get_child_blocks(part)  # the part's copy of the reduction block
            red = sch.get_loops(pb)[-len(b.reduce) :]
            inner = sch.split(part, [None, plan.chunk]) if extent > plan.chunk else [part]
            sch.reorder(*red, *inner)
            sch.vectorize(inner[-1])
            sch.decompose_reduction(pb, red[0])
        for c in consumers[:1]:
            info["epilogue"] = _vectorize_block_loops(sch, sch.get_sblock(c), plan.lanes, False)
    return info
