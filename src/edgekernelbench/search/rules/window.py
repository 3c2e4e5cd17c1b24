"""The rule for pooling whose windows are read with a stride."""

from __future__ import annotations

from .analysis import FuncFacts
from .primitives import UNROLL_REDUCTION_MAX, Skip, _inline_all, _producers_consumers


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
