"""The kernels of a problem, as agents see them: name, workload key, operator class, FLOPs; a kernel's
TVMScript after a spec's decisions; the backend target as a kernel-database key."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..ir.spec import SCHEDULE_LAYERS, Decisions


@dataclass(frozen=True)
class KernelInfo:
    name: str  # the PrimFunc's name in the reference (decisions are keyed by it)
    workload: str  # ir.replay.workload_key: the same workload in any problem has the same key
    op_class: str  # search.rules classification: conv2d, pointwise, dense, injective, ...
    flops: float | None


@functools.lru_cache(maxsize=64)
def kernels(problem_id: str, graph: str = "") -> tuple[KernelInfo, ...]:
    """The kernels the reference's main calls, in call order (weight transforms excluded); `graph`: a
    graph key (search/graph.py), "" for the reference's graph."""
    from ..ir.replay import workload_key
    from ..reference import kernel_flops
    from .graph import graph_reference
    from .rules import analyze

    ref = graph_reference(problem_id, graph)
    funcs = ref.primfuncs()
    out = []
    for name in dict.fromkeys(ref.kernel_calls()):
        if name.startswith("main") or name not in funcs:
            continue
        try:
            op_class = analyze(funcs[name], name).op_class
        except Exception:  # noqa: BLE001 -- an opaque kernel is still a kernel
            op_class = "opaque"
        out.append(KernelInfo(name, workload_key(funcs[name]), op_class, kernel_flops(funcs[name])))
    return tuple(out)


def kernel_layers(decisions: Decisions, name: str) -> dict:
    """The layer traces a spec's decisions hold for one kernel, in replay order."""
    return {
        layer: getattr(decisions, layer)[name]
        for layer in SCHEDULE_LAYERS
        if name in getattr(decisions, layer)
    }


def kernel_script(problem_id: str, layers: dict, name: str, graph: str = "") -> str:
    """TVMScript of kernel `name` after its `layers` are replayed on the PrimFunc of the reference (with
    graph key `graph` applied)."""
    from ..ir.replay import apply_trace, combine_layers
    from .graph import graph_reference

    func = graph_reference(problem_id, graph).primfuncs()[name]
    if layers:
        trace, where = combine_layers(
            [(layer, layers[layer]) for layer in SCHEDULE_LAYERS if layer in layers]
        )
        func = apply_trace(func, trace, name, where).mod["main"]
    return func.script()


def concat_traces(first: list, second: list) -> list:
    """One trace replaying `first` then `second` (a phase recorded on its own schedule: it starts by
    looking its blocks up again, so it replays after `first`)."""
    insts, decisions = list(first[0]), list(first[1])
    offset = len(insts)
    return [insts + list(second[0]), decisions + [[int(i) + offset, d] for i, d in second[1]]]


def backend_target_key(profile) -> str:
    """The kernel-database key of a backend: its TVM target with "mcpu": "native" resolved."""
    from ..backends.host import resolve_target
    from ..kerneldb import target_key

    return target_key(resolve_target(profile))


def tvm_version() -> str:
    import tvm

    return str(tvm.__version__)
