"""Materialize a KernelSpec into an IRModule by replaying its decisions on the problem's reference IR.

Runs inside the worker process: module text from a candidate is parsed here (TVM's TVMScript
parser evaluates Python expressions), never in the harness's parent process.
"""

from __future__ import annotations

import contextlib
import json

from ..errors import DecisionError, MalformedCandidate, SignatureMismatch
from .spec import SCHEDULE_LAYERS, KernelSpec

# Instruction kinds by layer, for splitting a flat trace (e.g. from MetaSchedule) into phases.
MEMORY_KINDS = {
    "CacheRead",
    "CacheWrite",
    "ReindexCacheRead",
    "ReindexCacheWrite",
    "CacheInplace",
    "CacheIndex",
    "ReIndex",
    "TransformLayout",
    "TransformBlockLayout",
    "SetScope",
    "StorageAlign",
    "SetAxisSeparator",
    "SetDType",
    "RollingBuffer",
}
TARGET_KINDS = {"Tensorize", "Blockize", "Annotate", "Unannotate", "EnterPostproc"}
GRAPH_PASSES = {  # Relax passes a graph-layer decision may name, with the args they accept
    "ConvertLayout": ("desired_layouts",),
    "FoldConstant": (),
    "FuseOps": ("fuse_opt_level",),
    "FuseTIR": (),
    "DeadCodeElimination": (),
    "CombineParallelMatmul": (),
    "FastMathTransform": (),
}
# the project's own graph passes (name -> (module of ir/, its factory, args)): ir/int8_dot.py,
# ir/fast_log.py, ir/clip_ops.py, ir/dropout.py, ir/quantize_rint.py, ir/packed_gemm.py, ir/bias_init.py,
# ir/block_transpose.py
PROJECT_PASSES = {
    "Int8DotProduct": ("int8_dot", "int8_dot_pass", ()),
    "FastLog": ("fast_log", "fast_log_pass", ()),
    "QuantizeRint": ("quantize_rint", "quantize_rint_pass", ()),
    "ClipAsOps": ("clip_ops", "clip_ops_pass", ()),
    "DropoutAsIdentity": ("dropout", "dropout_pass", ()),
    "PackedWeights": ("packed_gemm", "packed_gemm_pass", ()),
    "BiasInit": ("bias_init", "bias_init_pass", ()),
    "BlockTranspose": ("block_transpose", "block_transpose_pass", ()),
}


def workload_key(func) -> str:
    """Structural hash of a PrimFunc, independent of its name: the same workload in two problems
    gets the same key, so recorded decisions can be looked up and reused."""
    import tvm_ffi

    if func.attrs is not None and "global_symbol" in func.attrs:
        func = func.without_attr("global_symbol")
    return f"{tvm_ffi.structural_hash(func, map_free_vars=True):016x}"


def _json_default(o):
    return o.value if hasattr(o, "value") else str(o)


def trace_json(sch) -> list:
    """The schedule's trace as plain JSON data ([insts, decisions])."""
    return json.loads(json.dumps(sch.trace.as_json(remove_postproc=False), default=_json_default))


def combine_layers(layer_traces: list[tuple[str, list]]) -> tuple[list, list[tuple[str, int, str]]]:
    """Concatenates the phases of one PrimFunc into one trace; returns it and, per instruction,
    (layer, index within the layer, kind) for error messages."""
    insts, decisions, where = [], [], []
    for layer, (l_insts, l_dec) in layer_traces:
        offset = len(insts)
        insts.extend(l_insts)
        decisions.extend([[int(i) + offset, d] for i, d in l_dec])
        where.extend((layer, k, inst[0]) for k, inst in enumerate(l_insts))
    return [insts, decisions], where


def _prefix(trace: list, n: int) -> list:
    insts, decisions = trace
    return [insts[:n], [d for d in decisions if int(d[0]) < n]]


def apply_trace(func, trace: list, func_name: str, where=None):
    """Replays `trace` on a fresh schedule of `func`; a failure names the step that did not apply."""
    from tvm import s_tir

    from .int8_dot import register_intrinsics

    register_intrinsics()  # a trace may tensorize with the project's intrinsics
    mod = _as_main(func)
    try:
        sch = s_tir.Schedule(mod)
        s_tir.Trace.apply_json_to_schedule(trace, sch)
        return sch
    except Exception as first:  # find the first instruction that fails
        failing, detail = len(trace[0]) - 1, _one_line(first)
        for n in range(1, len(trace[0]) + 1):
            try:
                s_tir.Trace.apply_json_to_schedule(_prefix(trace, n), s_tir.Schedule(mod))
            except Exception as e:
                failing, detail = n - 1, _one_line(e)
                break
        layer, step, kind = (
            (where or [("loop", i, trace[0][i][0]) for i in range(len(trace[0]))])[failing]
            if trace[0]
            else ("loop", 0, "?")
        )
        raise DecisionError(func_name, layer, step, kind, detail) from first


def _one_line(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    msgs = [ln for ln in lines if "Error" in ln or "error" in ln or "Check failed" in ln]
    return (msgs[-1] if msgs else (lines[-1] if lines else type(e).__name__))[:500]


def _as_main(func):
    """A module holding a deep copy of `func` as main: scheduling must never touch the (cached) reference,
    and with_attr/Schedule may reuse a PrimFunc's storage in place."""
    import tvm

    from ..tvm_env import load_json

    copy = load_json(tvm.ir.save_json(func))
    return tvm.IRModule({"main": copy.with_attr("global_symbol", "main")})


class LayerRecorder:
    """Schedules one PrimFunc in layer phases and records each phase's trace.

    >>> rec = LayerRecorder(func)
    >>> with rec.layer("loop"):
    ...     i, j = rec.sch.get_loops(rec.sch.get_sblock("C")); rec.sch.vectorize(j)
    >>> rec.traces()  # {"loop": [insts, decisions]}
    """

    def __init__(self, func):
        from tvm import s_tir

        self.sch = s_tir.Schedule(_as_main(func))
        self._bounds: list[tuple[str, int, int]] = []

    @contextlib.contextmanager
    def layer(self, name: str):
        if name not in SCHEDULE_LAYERS:
            raise ValueError(f"unknown schedule layer {name!r}")
        start = len(self.sch.trace.insts)
        yield self.sch
        self._bounds.append((name, start, len(self.sch.trace.insts)))

    def traces(self) -> dict[str, list]:
        insts, decisions = trace_json(self.sch)
        out: dict[str, list] = {}
        for name, a, b in self._bounds:
            if b == a:
                continue
            if name in out:
                raise ValueError(f"layer {name} recorded twice; phases must be loop, memory, target in order")
            out[name] = [insts[a:b], [[int(i) - a, d] for i, d in decisions if a <= int(i) < b]]
        return out

    def func(self):
        return self.sch.mod["main"]


def split_flat_trace(trace: list) -> dict[str, list]:
    """Splits a flat trace into monotone phases: a layer runs from its first characteristic
    instruction until the next layer's first; lookup-only instructions stay in the current phase, and so
    do MetaSchedule's hints to its own postprocessors (annotations "meta_schedule.*": a tiling structure,
    the parallel / vectorize / unroll limits), which it sets right after looking a block up."""
    order = {name: i for i, name in enumerate(SCHEDULE_LAYERS)}
    insts, decisions = trace
    current, bounds = 0, []
    for inst in insts:
        kind_layer = 2 if inst[0] in TARGET_KINDS else 1 if inst[0] in MEMORY_KINDS else 0
        if inst[0] in ("Annotate", "Unannotate") and str((inst[2] or [""])[0]).startswith("meta_schedule."):
            kind_layer = 0
        current = max(current, kind_layer)
        bounds.append(current)
    out = {}
    for layer, idx in order.items():
        ks = [k for k, b in enumerate(bounds) if b == idx]
        if ks:
            a, b = ks[0], ks[-1] + 1
            out[layer] = [insts[a:b], [[int(i) - a, d] for i, d in decisions if a <= int(i) < b]]
    return out


# ---------------------------------------------------------------------- materialize
def parse_module(text: str, source: str = "candidate", metadata: str = ""):
    """Parses TVMScript text into an IRModule (inside the worker only). `metadata`: a reference's
    `metadata = tvm.ir.load_json(...)` block, put before the text (for a text that uses `metadata[...]`
    without defining it: prompts show the reference without its constants' values)."""
    import tvm

    lines = [
        ln for ln in text.splitlines() if not ln.lstrip().startswith(("from tvm.script import", "import "))
    ]
    header = metadata.splitlines()
    try:
        mod = tvm.script.from_source("\n".join(header + lines))
    except SyntaxError as e:
        line = e.lineno - len(header) if e.lineno else e.lineno
        raise MalformedCandidate(f"{source}: Python syntax error: {e.msg} (line {line})") from e
    except Exception as e:
        raise MalformedCandidate(f"{source}: TVMScript error: {_one_line(e)}") from e
    if isinstance(mod, tvm.tirx.PrimFunc):
        mod = tvm.IRModule({"main": mod})
    if not isinstance(mod, tvm.IRModule):
        raise MalformedCandidate(
            f"{source}: TVMScript must define an IRModule (@I.ir_module), got {type(mod).__name__}"
        )
    return mod


def apply_graph_decisions(problem, passes: list[dict]):
    """Rebuilds the reference with graph-layer Relax passes applied before legalization and fusion. The
    passes see the weights as parameters of `main`; what they add that depends on weights only (e.g. the
    kernel re-laid out by ConvertLayout) is then lifted into `main_transform_params`, run once."""
    import tvm
    from tvm import relax

    from ..reference import legalize_and_fuse, relax_from_onnx, strip_params

    mod = relax_from_onnx(problem.model)
    seq = []
    for p in passes:
        name, args = p.get("name"), p.get("args", {})
        allowed = GRAPH_PASSES.get(name) if name not in PROJECT_PASSES else PROJECT_PASSES[name][2]
        if allowed is None:
            raise DecisionError(
                "main",
                "graph",
                passes.index(p),
                str(name),
                f"unknown graph pass; allowed: {sorted(GRAPH_PASSES) + sorted(PROJECT_PASSES)}",
            )
        bad = set(args) - set(allowed)
        if bad:
            raise DecisionError("main", "graph", passes.index(p), name, f"unknown arguments {sorted(bad)}")
        if name in PROJECT_PASSES:
            import importlib

            module, factory, _ = PROJECT_PASSES[name]
            seq.append(getattr(importlib.import_module(f"{__package__}.{module}"), factory)(**args))
        else:
            seq.append(getattr(relax.transform, name)(**args))
    if "params" in mod["main"].attrs:
        seq.append(relax.transform.LiftTransformParams())
    try:
        mod = tvm.transform.Sequential(seq)(mod)
    except Exception as e:
        raise DecisionError("main", "graph", 0, "passes", _one_line(e)) from e
    return strip_params(legalize_and_fuse(mod))


def materialize(spec: KernelSpec, problem, reference, record: dict | None = None):
    """Returns the candidate IRModule: its module text (a full module, or PrimFuncs that replace the
    reference's), or the reference, with the spec's schedule decisions replayed per PrimFunc, then its
    `schedule_code` (if any) applied per PrimFunc; the traces that code made go into `record`
    (PrimFunc name -> trace JSON)."""
    import tvm
    from tvm import relax

    if spec.decisions.graph.get("passes"):
        base = apply_graph_decisions(problem, spec.decisions.graph["passes"])
    else:
        base = reference.module
    if spec.module is not None:
        from ..reference import uses_undefined_metadata

        meta = reference.metadata_header() if uses_undefined_metadata(spec.module) else ""
        cand = parse_module(spec.module, metadata=meta)
        names = {gv.name_hint for gv in cand.functions}
        if "main" in names and isinstance(cand["main"], relax.Function):
            base = relax.transform.LegalizeOps()(cand)  # a full module; high-level ops get TVM's lowering
        else:
            ref_funcs = {gv.name_hint for gv in base.functions}
            unknown = sorted(names - ref_funcs)
            if unknown:
                raise MalformedCandidate(
                    f"candidate defines {unknown}, which the reference does not call; PrimFuncs to write: "
                    f"{sorted(n for n in ref_funcs if not n.startswith('main'))}"
                )
            new = {gv.name_hint: f for gv, f in cand.functions.items()}
            for name, f in new.items():
                check_params(name, f, base[name])
            base = _replace_funcs(base, new)
    prim = {gv.name_hint: f for gv, f in base.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    scheduled = {}
    for name in spec.decisions.scheduled_funcs():
        if name not in prim:
            raise DecisionError(
                name, "loop", 0, "-", f"no PrimFunc named '{name}' in the module (PrimFuncs: {sorted(prim)})"
            )
        trace, where = combine_layers(spec.decisions.layer_traces(name))
        scheduled[name] = apply_trace(prim[name], trace, name, where).mod["main"]
    if spec.schedule_code:
        prim.update(scheduled)
        scheduled.update(apply_schedule_code(spec.schedule_code, prim, record))
    return _replace_funcs(base, scheduled) if scheduled else base


def apply_schedule_code(code: str, prim: dict, record: dict | None = None) -> dict:
    """Runs a model's schedule code (inside the worker only): it defines `schedule(name, sch)`, called
    once per PrimFunc with an s_tir.Schedule whose "main" is that PrimFunc. Returns the PrimFuncs it
    changed; their traces (JSON) go into `record`."""
    import tvm
    from tvm import s_tir
    from tvm.script import tirx as T

    ns = {"tvm": tvm, "s_tir": s_tir, "T": T, "__name__": "ekb_schedule_code"}
    try:
        exec(compile(code, "<schedule_code>", "exec"), ns)  # noqa: S102 (worker process only)
    except SyntaxError as e:
        raise MalformedCandidate(f"schedule_code: Python syntax error: {e.msg} (line {e.lineno})") from e
    except Exception as e:
        raise MalformedCandidate(f"schedule_code: {type(e).__name__}: {_one_line(e)}") from e
    fn = ns.get("schedule")
    if not callable(fn):
        raise MalformedCandidate("schedule_code must define a function schedule(name, sch)")
    out = {}
    for name, func in prim.items():
        sch = s_tir.Schedule(_as_main(func))
        try:
            fn(name, sch)
        except Exception as e:
            step = len(sch.trace.insts)
            raise DecisionError(
                name, "loop", step, "schedule_code", f"{type(e).__name__}: {_one_line(e)}"
            ) from e
        if len(sch.trace.insts):
            out[name] = sch.mod["main"]
            if record is not None:
                record[name] = trace_json(sch)
    return out


def buffer_signature(func) -> list[tuple[tuple[int, ...], str]]:
    out = []
    for p in func.params:
        try:
            out.append((tuple(int(d) for d in p.shape), str(p.dtype)))
        except (TypeError, AttributeError):
            out.append(((), str(getattr(p, "dtype", "handle"))))
    return out


def check_params(name: str, cand, ref) -> None:
    """A replacement PrimFunc must take the reference's buffers: same count, shapes and dtypes."""
    import tvm

    if not isinstance(cand, tvm.tirx.PrimFunc):
        raise SignatureMismatch(f"'{name}' must be a PrimFunc, like the reference's")
    got, want = buffer_signature(cand), buffer_signature(ref)
    if len(got) != len(want):
        raise SignatureMismatch(
            f"PrimFunc '{name}' takes {len(got)} buffers, the reference's takes {len(want)}"
        )
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if g != w:
            raise SignatureMismatch(
                f"PrimFunc '{name}' parameter {i} ('{cand.params[i].name}') is "
                f"{g[1]}{list(g[0])}, the reference passes {w[1]}{list(w[0])}"
            )


def _replace_funcs(mod, new: dict):
    """A copy of `mod` with functions replaced by name, keeping the GlobalVars callers refer to."""
    import tvm

    funcs = {}
    for gv, f in mod.functions.items():
        if gv.name_hint in new:
            f = new[gv.name_hint]
            if f.attrs is not None and "global_symbol" in f.attrs:
                f = f.without_attr("global_symbol")
        funcs[gv] = f
    return tvm.IRModule(funcs, attrs=mod.attrs)
