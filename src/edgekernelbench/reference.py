"""The reference IR of a problem: ONNX -> Relax (tvm.relax.frontend.onnx) -> legalized, fused PrimFuncs.

Weights stay parameters of `main` (keep_params_in_input=True), so the module prints as
self-contained TVMScript and the harness passes weights as arguments, like any kernel input.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

from .problems import Problem

REFERENCE_PIPELINE = ["LegalizeOps", "AnnotateTIROpPattern", "FoldConstant", "FuseOps", "FuseTIR"]


@dataclass
class Reference:
    problem_id: str
    module: object  # tvm.IRModule: Relax `main` (+ `main_transform_params`) + fused PrimFuncs
    input_names: list[str]  # graph inputs: the first parameters of main
    param_names: list[str]  # ONNX weights: the tuple main_transform_params takes
    params: list[np.ndarray]  # the raw weights, in param_names order

    def script(self) -> str:
        return module_script(self.module)

    def brief_script(self) -> tuple[str, int]:
        """(TVMScript with the Relax constants' values left out, how many constants were left out): for
        prompts. Constants stay referenced as `metadata["..."][i]`; `metadata_header` restores them."""
        text = _NONFINITE_CONST.sub(r'R.const(float("\1"), "\2")', self.module.script(show_meta=False))
        refs = set(_METADATA_REF.findall(text))
        text = text.replace(_OMITTED_LINE, "").rstrip() + "\n"
        return text, len(refs)

    def metadata_header(self) -> str:
        """The `metadata = tvm.ir.load_json(...)` block of the full script ("" when there are no
        constants): prepended to a candidate that uses `metadata[...]` without defining it."""
        return metadata_header(self.script())

    def primfuncs(self) -> dict:
        import tvm

        return {
            gv.name_hint: f for gv, f in self.module.functions.items() if isinstance(f, tvm.tirx.PrimFunc)
        }

    def kernel_calls(self) -> list[str]:
        """PrimFunc names in the order main calls them."""
        from .executor import graph_steps

        return [s.func for s in graph_steps(self.module["main"]) if s.kind == "call_tir"]


_NONFINITE_CONST = re.compile(r'R\.const\("(-?inf|nan)", "(\w+)"\)')
_METADATA_REF = re.compile(r'metadata\["[\w.]+"\]\[\d+\]')
_METADATA_DEF = re.compile(r"^metadata\s*=", re.M)
_OMITTED_LINE = "# Metadata omitted. Use show_meta=True in script() method to show it."


def metadata_header(script: str) -> str:
    """The leading `metadata = tvm.ir.load_json(\"\"\"...\"\"\")` block of a TVMScript text, or ""."""
    if not script.startswith("metadata = "):
        return ""
    end = script.find('""")')
    return script[: end + len('""")')] + "\n" if end >= 0 else ""


def uses_undefined_metadata(text: str) -> bool:
    """A candidate that refers to the reference's constants (`metadata[...]`) without defining them."""
    return bool(_METADATA_REF.search(text)) and not _METADATA_DEF.search(text)


def module_script(mod) -> str:
    """TVMScript that parses back to the same module: constants inline (show_meta), and non-finite
    Relax constants, which TVM 0.27 prints as strings, written as float('inf')."""
    return _NONFINITE_CONST.sub(r'R.const(float("\1"), "\2")', mod.script(show_meta=True))


def kernel_flops(func) -> float | None:
    """TVM's FLOP estimate of one PrimFunc (None when TVM cannot estimate it, e.g. opaque calls)."""
    import tvm
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        return float(estimate_tir_flops(tvm.IRModule({"main": func})))
    except Exception:
        return None


def generic_target():
    import tvm

    return tvm.target.Target({"kind": "llvm"})


def relax_from_onnx(model):
    from tvm.relax.frontend.onnx import from_onnx

    return from_onnx(model, keep_params_in_input=True)


def legalize_and_fuse(mod, target=None):
    import tvm
    from tvm import relax

    target = target or generic_target()
    with target:
        return tvm.transform.Sequential(relax.backend.cpu_generic.legalize_passes(target))(mod)


def strip_params(mod):
    """Drop the weight values from main's attributes: they live in Reference.params instead."""
    import tvm

    funcs = {}
    for gv, f in mod.functions.items():
        if gv.name_hint == "main" and f.attrs is not None and "params" in f.attrs:
            f = f.without_attr("params")
        funcs[gv] = f
    return tvm.IRModule(funcs, attrs=mod.attrs)


@functools.lru_cache(maxsize=64)
def _build_reference(problem_id: str) -> Reference:
    from .problems import get_problem

    return build_reference_uncached(get_problem(problem_id))


def build_reference(problem: Problem) -> Reference:
    from .problems.suite import _REGISTRY

    if _REGISTRY.get(problem.id) is problem:
        return _build_reference(problem.id)
    return build_reference_uncached(problem)


def build_reference_uncached(problem: Problem) -> Reference:
    mod = relax_from_onnx(problem.model)
    main = mod["main"]
    n_in = int(main.attrs["num_input"])
    params = [p.numpy() for p in main.attrs["params"]] if "params" in main.attrs else []
    names = [p.name for p in main.params]
    from tvm import relax

    if params:  # weight-only work (layout transposes, bias reshapes) moves to main_transform_params
        mod = relax.transform.LiftTransformParams()(mod)
    fused = strip_params(legalize_and_fuse(mod))
    return Reference(problem.id, fused, names[:n_in], names[n_in:], params)
