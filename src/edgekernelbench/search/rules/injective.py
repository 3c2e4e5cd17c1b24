"""The rule for elementwise, broadcast and layout kernels."""

from __future__ import annotations

from .analysis import BlockFacts, FuncFacts
from .primitives import LEFT_TO_LLVM, Skip, _gone, _inline_all, _lanes, _vectorize_block_loops


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
