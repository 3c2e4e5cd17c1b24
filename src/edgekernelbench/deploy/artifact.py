"""The artifact's format: its manifest, read back; the graph module it ships (main, the kernels it calls) and
the weights main takes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..tvm_env import compile as tvm_compile
from .model import DeployError

FORMAT = 1


def read_manifest(folder: str | Path) -> dict:
    """The artifact's manifest.json (DeployError when there is none, or not one this version reads)."""
    path = Path(folder) / "manifest.json"
    if not path.is_file():
        raise DeployError(f"{folder}: no manifest.json there (not an artifact of ekb deploy)")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise DeployError(f"{path}: unreadable ({e})") from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DeployError(f"{path}: artifact format {manifest.get('format')!r}; this ekb reads {FORMAT}")
    return manifest


def graph_module(mod, funcs: dict | None = None):
    """`main` and the PrimFuncs it calls (main_transform_params is run once at deploy time, not shipped),
    with `funcs` (name -> PrimFunc) replacing those of the same name."""
    import tvm

    from ..executor import graph_steps

    called = {s.func for s in graph_steps(mod["main"]) if s.kind == "call_tir"}
    out = {}
    for gv, f in mod.functions.items():
        name = gv.name_hint
        if name == "main" or name in called:
            if funcs and name in funcs:
                f = funcs[name]
                if f.attrs is not None and "global_symbol" in f.attrs:
                    f = f.without_attr("global_symbol")
            out[gv] = f
    return tvm.IRModule(out, attrs=mod.attrs)


def transformed_weights(reference) -> list[np.ndarray]:
    """main's weight arguments: main_transform_params run once on this host (generic LLVM), or the raw
    weights when there is none."""
    import tvm
    from tvm import relax

    names = {gv.name_hint for gv in reference.module.functions}
    if not reference.params:
        return []
    if "main_transform_params" not in names:
        return [np.asarray(p, order="C") for p in reference.params]
    mod = relax.transform.DeadCodeElimination(["main_transform_params"])(reference.module)
    mod = tvm.IRModule({gv: f for gv, f in mod.functions.items() if gv.name_hint != "main"}, attrs=mod.attrs)
    ex = tvm_compile(mod, tvm.target.Target({"kind": "llvm"}), relax_pipeline="default_build")
    vm = relax.VirtualMachine(ex, tvm.cpu(0))
    out = vm["main_transform_params"](
        tuple(tvm.runtime.tensor(np.asarray(p, order="C")) for p in reference.params)
    )
    return [np.asarray(t.numpy(), order="C") for t in out]
