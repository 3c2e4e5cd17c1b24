"""The offline proposer's alternatives for one kernel: complete schedules (loop, memory and target layers)
from the rule-based scheduler's strategies (search/rules/), for several vector widths. Layer by layer,
an alternative for layer L is a variant whose earlier layers equal the accepted ones and whose layer L
differs (`alternatives`); it comes with its own later layers as a completion, so it can be judged as it is.
Each variant replays on a fresh schedule and builds for the host target before it is offered."""

from __future__ import annotations

import functools
import itertools
import json
import logging
from dataclasses import dataclass, field

from ..ir.spec import SCHEDULE_LAYERS
from ..tvm_env import compile as tvm_compile

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Variant:
    label: str  # e.g. "tile+cache/16 lanes"
    layers: dict = field(hash=False, compare=False)  # layer -> trace JSON

    def prefix(self, layer: str) -> dict:
        """Its layers before `layer`."""
        return {
            k: v for k, v in self.layers.items() if SCHEDULE_LAYERS.index(k) < SCHEDULE_LAYERS.index(layer)
        }


def lanes_options(max_lanes: int) -> tuple[int, ...]:
    """Vector widths worth trying: the widest the target has, then halves down to 4 lanes."""
    out, n = [], max_lanes
    while n >= 4:
        out.append(n)
        n //= 2
    return tuple(out)


@functools.lru_cache(maxsize=256)
def rule_variants(
    problem_id: str, name: str, max_lanes: int, threads: int = 1, graph: str = ""
) -> tuple[Variant, ...]:
    """Every rules strategy x vector width that applies to kernel `name` (of graph key `graph`), replays and
    builds, in the rules' order of preference (the first is what the rule-based candidate uses)."""
    from ..ir.replay import LayerRecorder, apply_trace, combine_layers
    from .graph import graph_reference
    from .rules import LOOKUPS, Skip, analyze, build_target, strategies

    func = graph_reference(problem_id, graph).primfuncs()[name]
    try:
        facts = analyze(func, name)
    except Exception as e:  # noqa: BLE001
        log.info("%s %s: no analysis (%s)", problem_id, name, e)
        return ()
    target = build_target(threads)
    out: list[Variant] = []
    seen: set[str] = set()
    for lanes in lanes_options(max_lanes):
        for sname, fn in strategies(facts, lanes, parallel=threads > 1):
            rec = LayerRecorder(func)
            try:
                fn(rec)
                layers = rec.traces()
                if not any(inst[0] not in LOOKUPS for t in layers.values() for inst in t[0]):
                    raise Skip("no decisions")
                trace, where = combine_layers([(k, layers[k]) for k in SCHEDULE_LAYERS if k in layers])
                tvm_compile(apply_trace(func, trace, name, where).mod, target=target)
            except Exception:  # noqa: BLE001 -- a strategy that does not apply is not an alternative
                continue
            key = repr(sorted(layers.items()))
            if key not in seen:
                seen.add(key)
                out.append(Variant(f"{sname}/{lanes} lanes", layers))
    return tuple(out)


def replays(problem_id: str, graph: str, name: str, layers: dict) -> bool:
    """Whether a kernel's layer traces (`layers`) replay on kernel `name` of graph key `graph` (not built)."""
    from ..ir.replay import apply_trace, combine_layers
    from .graph import graph_reference

    func = graph_reference(problem_id, graph).primfuncs().get(name)
    if func is None:
        return False
    trace, where = combine_layers([(k, layers[k]) for k in SCHEDULE_LAYERS if k in layers])
    try:
        apply_trace(func, trace, name, where)
        return True
    except Exception:  # noqa: BLE001 -- a step that does not apply (DecisionError) or a malformed trace
        return False


def alternatives(variants, layer: str, accepted: dict, tried: set[str]) -> list[Variant]:
    """Variants that keep the accepted layers before `layer`, change `layer` (or add it), and were not
    tried yet (`tried`: labels)."""
    rank = SCHEDULE_LAYERS.index(layer)
    earlier = {k: t for k, t in accepted.items() if SCHEDULE_LAYERS.index(k) < rank}
    return [
        v
        for v in variants
        if v.label not in tried
        and v.prefix(layer) == earlier
        and layer in v.layers
        and v.layers[layer] != accepted.get(layer)
    ]


# ------------------------------------------------------------------ the parametric space, ranked by cost
ACC_VECTORS = (2, 4, 6, 8, 12, 16, 24)  # vector accumulators of the register tile
MAX_VECTORS = (1, 2, 4)  # vectors along the vectorized axis
UNROLL_STEPS = (0, 16, 64, 256)  # the target layer's auto-unroll step
TILE_STRATEGIES = ("tile+cache", "tile")
FIND_MAX = 48  # points recorded at most to find the tile of a loop layer no proposal recorded
ORDERS = ("rows", "panels")  # the tile loops' order


def _reorders(plan) -> bool:
    """Whether "panels" is another loop nest than "rows": the vectorized axis has tiles of its own and
    another axis group with tiles comes before it in "rows"."""
    tiled = plan.tiled()
    return plan.gv in tiled and tiled.index(plan.gv) > 0


@dataclass(frozen=True)
class Config:
    """One point of a kernel's schedule space: a rules strategy and its parameters."""

    strategy: str
    lanes: int
    acc_vectors: int | None = None
    max_vectors: int | None = None
    unroll_step: int | None = None
    pad: int = 0  # the vectorized axis padded to a multiple of this many elements first (0: not padded)
    order: str = "rows"  # the tile loops' order (search.rules.schedule_contraction)

    @property
    def label(self) -> str:
        if self.acc_vectors is None:
            return f"{self.strategy}/{self.lanes} lanes"
        return (
            f"{self.strategy}/{self.lanes} lanes/acc {self.acc_vectors}/vec {self.max_vectors}"
            f"/unroll {self.unroll_step}"
            + (f"/pad {self.pad}" if self.pad else "")
            + (f"/{self.order}" if self.order != "rows" else "")
        )


class KernelSpace:
    """The builtin proposer's schedule space for one kernel: the tiled strategies over register-tile
    sizes, vector widths, accumulator caching and auto-unroll steps, ranked by the analytical cost model
    (search/cost.py); the other rules strategies after them, in the rules' order. A u8 x s8 dot kernel on a
    VNNI target: its VNNI tiles only, ranked by the model too (`_rank_dot`). Points are recorded
    (scheduled on a LayerRecorder) when first needed and built for the host only when offered."""

    def __init__(self, problem_id: str, name: str, machine, threads: int = 1, graph: str = ""):
        from .graph import graph_reference
        from .rules import analyze

        self.problem_id, self.name, self.machine, self.threads = problem_id, name, machine, threads
        self.func = graph_reference(problem_id, graph).primfuncs()[name]
        self._recorded: dict[Config, Variant | None] = {}
        self._loops: dict[str, tuple] = {}  # a recorded loop layer -> the tile parameters that made it
        self._built: dict[Config, bool] = {}
        self._modelled: set[str] = set()  # labels of the points outside the tiled strategies with a cost
        try:
            self.facts = analyze(self.func, name)
        except Exception as e:  # noqa: BLE001 -- an opaque kernel has no space
            log.info("%s %s: no analysis (%s)", problem_id, name, e)
            self.facts, self.ranked = None, []
            return
        self.ranked = self._rank()

    def _padded_facts(self, lanes: int) -> dict:
        """pad multiple -> the facts of the kernel padded to it (search.rules.pad_main), for the cost model;
        {0: the kernel's own facts}."""
        from tvm import s_tir

        from ..ir.replay import _as_main
        from .rules import Skip
        from .rules.contraction import pad_main, pad_multiples

        out = {0: self.facts}
        for m in pad_multiples(self.facts, lanes):
            try:
                out[m] = pad_main(s_tir.Schedule(_as_main(self.func)), self.facts, lanes, m)
            except Skip:
                continue
        return out

    def _rank(self) -> list[tuple[float, Config]]:
        from .cost import contraction_cost, stream_cost
        from .rules import Skip, contraction_plan, strategies
        from .rules.stream import stream_plan

        scored: dict[tuple, tuple[float, Config]] = {}
        fmas: dict[tuple, int] = {}  # vector FMAs per reduction step of a tiled point
        others: list[Config] = []
        for lanes in lanes_options(self.machine.lanes):
            snames = [n for n, _ in strategies(self.facts, lanes, parallel=self.threads > 1)]
            if self._rank_dot(snames, lanes, scored, fmas):
                break  # a dot kernel's VNNI tiles take no vector width: ranked once, and nothing else
            padded = self._padded_facts(lanes) if any(n in TILE_STRATEGIES for n in snames) else {}
            for sname in snames:
                if sname == "pad+tile+cache":  # the padded points below
                    continue
                if sname == "stream":  # a matrix-vector product: modelled as such
                    cfg = Config(sname, lanes)
                    scored[(sname, lanes)] = (stream_cost(stream_plan(self.facts, lanes), self.machine), cfg)
                    self._modelled.add(cfg.label)
                    continue
                if sname not in TILE_STRATEGIES:
                    others.append(Config(sname, lanes))
                    continue
                for (pad, facts), acc, maxv in itertools.product(padded.items(), ACC_VECTORS, MAX_VECTORS):
                    try:
                        plan = contraction_plan(facts, lanes, maxv, acc)
                    except Skip:
                        continue
                    for step, order in itertools.product(UNROLL_STEPS, ORDERS):
                        if order != "rows" and not _reorders(plan):
                            continue
                        cache = sname == "tile+cache"
                        cost = contraction_cost(
                            plan, self.machine, cache=cache, unroll_step=step, order=order
                        )
                        # points with the same tile are the same schedule: keep the first
                        key = (sname, pad, plan.lanes, plan.vt, plan.ut, tuple(plan.gv.members), step, order)
                        if key not in scored:
                            scored[key] = (cost, Config(sname, lanes, acc, maxv, step, pad, order))
                            fmas[key] = plan.nvec * plan.ut
        # equal estimates: the larger register tile first (its reuse in registers is what the memory side
        # of the model does not see: yamnet's 6-row x 4-vector tile of a 3 x 2 pointwise convolution ran
        # in 120 us, the 2 x 4 tile with the same estimate in 222 us)
        ranked = [scored[k] for k in sorted(scored, key=lambda k: (scored[k][0], -fmas.get(k, 0)))]
        tail = max((c for c, _ in ranked), default=0.0)
        return ranked + [(tail + 1 + i, c) for i, c in enumerate(others)]

    def _rank_dot(self, snames: list[str], lanes: int, scored: dict, fmas: dict) -> bool:
        """A u8 x s8 dot kernel where the target has VNNI (the rules offer its VNNI tiles): those tiles, each
        tile that `schedule_dot` makes once, estimated by cost.dot_cost, into `scored` and `fmas`; True when
        it was one. Its float tiles and the rules' other strategies are left out of the space: they leave
        vpdpbusd unused (in the nineteenth run's searches they took 54 judgments on 7 int8 problems and none
        was kept, while there the VNNI tiles, ranked after every one of them, were never offered:
        dscnn_kws_int8's 5 x 32 tile is 1.13x faster than the rules' 5 x 64 start, standalone)."""
        from .cost import dot_cost
        from .rules.dot import DOT_TILES, dot_plan, dot_strategy

        tiles = {dot_strategy(r, v): (r, v) for r, v in DOT_TILES}
        if not any(n in tiles for n in snames):
            return False
        for name in (n for n in snames if n in tiles):
            plan = dot_plan(self.facts, *tiles[name])
            key = ("vnni", plan.ut, plan.nv)
            if key not in scored:
                cfg = Config(name, lanes)
                scored[key] = (dot_cost(plan, self.machine), cfg)
                fmas[key] = plan.ut * plan.nv
                self._modelled.add(cfg.label)
        return True

    def _record(self, cfg: Config) -> Variant | None:
        if cfg in self._recorded:
            return self._recorded[cfg]
        from ..ir.replay import LayerRecorder
        from .rules import LOOKUPS, Skip, schedule_contraction, strategies

        rec = LayerRecorder(self.func)
        out = None
        try:
            if cfg.acc_vectors is not None:
                schedule_contraction(
                    rec,
                    self.facts,
                    cfg.lanes,
                    cache=cfg.strategy == "tile+cache",
                    parallel=self.threads > 1,
                    max_vectors=cfg.max_vectors,
                    acc_vectors=cfg.acc_vectors,
                    unroll_step=cfg.unroll_step,
                    pad=cfg.pad,
                    order=cfg.order,
                )
            else:
                fn = dict(strategies(self.facts, cfg.lanes, parallel=self.threads > 1))[cfg.strategy]
                fn(rec)
            layers = rec.traces()
            if not any(inst[0] not in LOOKUPS for t in layers.values() for inst in t[0]):
                raise Skip("no decisions")
            out = Variant(cfg.label, layers)
        except Exception:  # noqa: BLE001 -- a point where a primitive does not apply is not in the space
            out = None
        self._recorded[cfg] = out
        if out is not None and "loop" in out.layers:
            self._loops.setdefault(json.dumps(out.layers["loop"], sort_keys=True), _tile(cfg))
        return out

    def _builds(self, cfg: Config, v: Variant) -> bool:
        if cfg not in self._built:
            from ..ir.replay import apply_trace, combine_layers
            from .rules import build_target

            try:
                trace, where = combine_layers([(k, v.layers[k]) for k in SCHEDULE_LAYERS if k in v.layers])
                tvm_compile(
                    apply_trace(self.func, trace, self.name, where).mod, target=build_target(self.threads)
                )
                self._built[cfg] = True
            except Exception:  # noqa: BLE001
                self._built[cfg] = False
        return self._built[cfg]

    def _likely_points(self):
        """The space's points, those most like the rules' defaults first (auto-unroll 64, tile loops in rows,
        accumulators cached), each recorded as it is yielded (with its variant, None where it does not
        apply); at most FIND_MAX not recorded before: recording all of them took 320 s on
        logmel_frontend_yamnet's padded GEMM (2,000 points)."""
        from .rules.primitives import AUTO_UNROLL_STEP

        def like_default(item):
            cost, cfg = item
            return (
                cfg.unroll_step != AUTO_UNROLL_STEP,
                cfg.order != "rows",
                cfg.strategy != "tile+cache",
                cost,
            )

        left = FIND_MAX
        for _, cfg in sorted(self.ranked, key=like_default):
            if left <= 0:
                return
            if cfg not in self._recorded:
                left -= 1
            yield cfg, self._record(cfg)

    def _find_tile(self, loop) -> tuple | None:
        """The tile of the point whose loop layer is `loop` (e.g. the rules' starting point, recorded by no
        proposal so far), looked for among `_likely_points`."""
        for _ in self._likely_points():
            tile = self._tile_of(loop)
            if tile is not None:
                return tile
        return None

    def point_of(self, layers: dict) -> Config | None:
        """The point whose layers are exactly `layers` (a kernel's accepted decisions): among the points
        recorded so far, else among `_likely_points`; None when neither has it (decisions from elsewhere)."""
        for cfg, v in list(self._recorded.items()):
            if v is not None and v.layers == layers:
                return cfg
        return next((cfg for cfg, v in self._likely_points() if v is not None and v.layers == layers), None)

    def layers_at(self, cfg: Config) -> dict | None:
        """The layers of point `cfg` in this kernel's space, where it applies and builds; else None."""
        v = self._record(cfg) if self.facts is not None else None
        return dict(v.layers) if v is not None and self._builds(cfg, v) else None

    def _tile_of(self, loop) -> tuple | None:
        """The tile parameters (`_tile`) of the point that recorded this loop layer; None when no recorded
        point did (a loop layer from elsewhere: every point is looked at)."""
        return self._loops.get(json.dumps(loop, sort_keys=True)) if loop is not None else None

    def estimate(self, label: str) -> float | None:
        """The cost model's estimate of a point (by label); None for a point it does not model (the other
        rules strategies: ranked after the modelled ones, in the rules' order, with no estimate)."""
        return next(
            (
                c
                for c, cfg in self.ranked
                if cfg.label == label and (cfg.acc_vectors is not None or label in self._modelled)
            ),
            None,
        )

    def alternatives(self, layer: str, accepted: dict, tried: set[str]):
        """Points, cheapest first, that keep the accepted layers before `layer` and change `layer`, that
        build, and whose `layer` decisions are not in `tried` (keys from `layer_key`); each comes with its
        own later layers as a completion. Points that differ only in later layers are offered once."""
        tile = None
        if layer != "loop":
            if accepted.get("loop") is None:
                return  # every point of the space has a loop layer: none keeps "no loop layer"
            tile = self._tile_of(accepted["loop"]) or self._find_tile(accepted["loop"])
            if tile is None:
                return  # a loop layer from elsewhere that no point recorded so far shares
        for _, cfg in self.ranked:
            if tile is not None and _tile(cfg) != tile:
                continue  # another tile: another loop layer than the accepted one (not recorded to see it)
            v = self._record(cfg)
            if v is None or layer not in v.layers or layer_key(v, layer) in tried:
                continue
            if not alternatives([v], layer, accepted, set()):
                continue
            if self._builds(cfg, v):
                yield v


def _tile(cfg: Config) -> tuple:
    """What decides a point's loop layer besides its strategy: points that differ only in these share no
    loop layer (the strategy decides whether the accumulators are cached, the unroll step only the target
    layer)."""
    return (cfg.lanes, cfg.acc_vectors, cfg.max_vectors, cfg.pad, cfg.order)


def layer_key(v: Variant, layer: str) -> str:
    """What identifies a variant's decisions for `layer` (two points with the same tile but another unroll
    step have the same loop layer)."""
    return json.dumps(v.layers.get(layer), sort_keys=True)
