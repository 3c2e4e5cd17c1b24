"""The rule for row-wise kernels: softmax, layernorm, reductions over the innermost axes."""

from __future__ import annotations

import math

from .analysis import FuncFacts, _as_int
from .primitives import PARALLEL_MIN_WORK, SCALAR_MATH, Skip, _lanes, _vectorize_tail


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
