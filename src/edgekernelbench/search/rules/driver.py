"""The rule-based scheduler's driver: the strategies per operator class, tried in order on a fresh
LayerRecorder per PrimFunc (`schedule_func`), and the decisions-only spec of a problem (`rule_spec`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ...ir.spec import Decisions, KernelSpec
from ...tvm_env import compile as tvm_compile
from .analysis import FuncFacts, analyze, default_vector_lanes
from .contraction import pad_multiples, schedule_contraction
from .dot import DOT_TILES, dot_strategy, is_dot, schedule_dot, vnni_available
from .injective import schedule_injective
from .primitives import Skip
from .rows import schedule_rows
from .stream import schedule_stream, stream_plan
from .window import schedule_window

CONTRACTIONS = ("conv2d", "pointwise", "depthwise", "dense", "matmul", "contraction", "pool")


def strategies(facts: FuncFacts, lanes: int, parallel: bool = False) -> list[tuple[str, Callable]]:
    """Progressively simpler strategies for one PrimFunc; the first that applies is kept."""
    c = facts.op_class
    kw = {"parallel": parallel}
    out: list[tuple[str, Callable]] = []
    if is_dot(facts) and vnni_available():  # u8 x s8 dot products (ir/int8_dot.py): VNNI register tiles
        for r, v in DOT_TILES:
            out.append((dot_strategy(r, v), lambda rec, r=r, v=v: schedule_dot(rec, facts, r, v, **kw)))
    if c in CONTRACTIONS and not parallel and _streams(facts, lanes):
        # a matrix-vector product: the weight streamed row by row into the output (measured on every
        # such kernel of the suite: as fast as the register tile, 1.6-2.2x faster where the output's
        # extent has no divisor of whole vectors)
        out.append(("stream", lambda r: schedule_stream(r, facts, lanes)))
    if c in CONTRACTIONS or c == "reduce":
        for m in pad_multiples(facts, lanes)[:1]:  # no whole vectors along the axis: pad it first
            out.append(("pad+tile+cache", lambda r, m=m: schedule_contraction(r, facts, lanes, pad=m, **kw)))
        out += [
            ("tile+cache", lambda r: schedule_contraction(r, facts, lanes, **kw)),
            ("tile", lambda r: schedule_contraction(r, facts, lanes, cache=False, **kw)),
        ]
    if c == "pool":
        out.append(("window", lambda r: schedule_window(r, facts, lanes, **kw)))
    if c in ("multi-reduction", "reduce") or c in CONTRACTIONS:
        out += [
            ("rows+rfactor", lambda r: schedule_rows(r, facts, lanes, **kw)),
            ("rows", lambda r: schedule_rows(r, facts, lanes, rfactor=False, **kw)),
        ]
    if c == "injective":
        out.append(("vectorize", lambda r: schedule_injective(r, facts, lanes, **kw)))
    return out


def _streams(facts: FuncFacts, lanes: int) -> bool:
    try:
        stream_plan(facts, lanes)
    except Skip:
        return False
    return True


LOOKUPS = {"GetSBlock", "GetLoops", "GetChildBlocks", "GetProducers", "GetConsumers", "GetOutputBlocks"}


@dataclass
class FuncSchedule:
    name: str
    op_class: str
    strategy: str  # "none" when nothing applied
    traces: dict  # layer -> trace JSON
    info: dict = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def build_target(threads: int = 1):
    """The host target the harness builds for (see backends/host.py)."""
    import tvm

    from ...tvm_env import host_target

    return tvm.target.Target({**host_target(), "num-cores": threads})


def schedule_func(func, name: str, lanes: int, parallel: bool = False, target=None) -> FuncSchedule:
    """Tries the strategies for one PrimFunc in order, each on a fresh recorder; keeps the first
    whose decisions replay on a fresh schedule and (when `target` is given) build."""
    from ...ir.replay import LayerRecorder, apply_trace, combine_layers

    try:
        facts = analyze(func, name)
    except Exception as e:  # noqa: BLE001
        return FuncSchedule(name, "opaque", "none", {}, failures=[f"analysis: {e}"])
    failures = []
    for sname, fn in strategies(facts, lanes, parallel):
        rec = LayerRecorder(func)
        try:
            info = fn(rec)
            traces = rec.traces()
            if not any(inst[0] not in LOOKUPS for t in traces.values() for inst in t[0]):
                raise Skip("no decisions")
            trace, where = combine_layers(
                [(layer, traces[layer]) for layer in ("loop", "memory", "target") if layer in traces]
            )
            replayed = apply_trace(func, trace, name, where)  # the decisions must replay
            if target is not None:  # and build: a schedule TVM accepts may still not lower
                tvm_compile(replayed.mod, target=target)
        except Exception as e:  # noqa: BLE001
            failures.append(f"{sname}: {type(e).__name__}: {_short(e)}")
            continue
        return FuncSchedule(name, facts.op_class, sname, traces, info, failures)
    return FuncSchedule(name, facts.op_class, "none", {}, failures=failures)


def _short(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[:200]


def rule_schedules(
    problem, vector_lanes: int | None = None, threads: int = 1, reference=None, verify_build: bool = True
) -> list[FuncSchedule]:
    """The rule-based schedule of every PrimFunc the reference's main calls (weight transforms in
    main_transform_params excluded), in call order. With `verify_build`, each kept schedule has
    been built for the host target."""
    from ...reference import build_reference

    lanes = vector_lanes or default_vector_lanes()
    ref = reference or build_reference(problem)
    target = build_target(threads) if verify_build else None
    funcs = ref.primfuncs()
    out = []
    for name in dict.fromkeys(ref.kernel_calls()):
        if name.startswith("main") or name not in funcs:
            continue
        out.append(schedule_func(funcs[name], name, lanes, parallel=threads > 1, target=target))
    return out


def rule_spec(
    problem, vector_lanes: int | None = None, threads: int = 1, verify_build: bool = True
) -> KernelSpec:
    """A decisions-only spec: the rule-based schedule of every kernel the reference's main calls.

    `vector_lanes`: float32 lanes of the target's vectors (default: 16 on an AVX-512 host, else 8).
    `threads`: the backend's thread count; the outer loops are made parallel only when it is > 1
    (with one thread, TVM's parallel launch made these kernels 5-35% slower).
    `verify_build`: keep a schedule only if the scheduled PrimFunc builds (about 0.1 s per kernel).
    Decisions are keyed by PrimFunc name; `decisions.workloads` holds each one's workload key."""
    from ...ir.replay import workload_key
    from ...reference import build_reference

    ref = build_reference(problem)
    funcs = ref.primfuncs()
    keys = {name: workload_key(f) for name, f in funcs.items()}  # before anything is scheduled
    dec = Decisions()
    notes = []
    for fs in rule_schedules(problem, vector_lanes, threads, reference=ref, verify_build=verify_build):
        notes.append(f"{fs.name}: {fs.op_class}/{fs.strategy}")
        if not fs.traces:
            continue
        for layer, trace in fs.traces.items():
            getattr(dec, layer)[fs.name] = trace
        dec.workloads[fs.name] = keys[fs.name]
    spec = KernelSpec(problem=problem.id, module=None, decisions=dec, method="rules", notes="; ".join(notes))
    if dec.is_empty():  # no rule applied anywhere: the candidate is the reference itself
        spec.module = ref.script()
        spec.notes += "; no rule applied: module is the reference"
    return spec
