"""A candidate's kernels compiled one by one, each at most once per cache: the host CPU's build for a search.

A search judges candidates that differ from the best one in a single kernel, and `tvm.compile` compiles
every kernel of the graph again: for resnet8_ic (26 PrimFuncs) 2.4 s of LLVM plus 1.5 s of code
generation at first use, when the one kernel that changed takes 0.1-0.6 s. Here the graph is lowered as
`tvm.compile` lowers it (the Relax pipeline and the VM's code generation, 0.03 s), each PrimFunc is compiled
alone to an object file kept under the digest of its lowered TIR and the target, and the objects are linked
into one shared library; the VM is linked with that library (`link`).

Who may write a cache matters: an object file in it runs in every later candidate's process. The judge
compiles (harness/evaluate.py), from a module it verified, and only the judges of one warm judge
(harness/zygote.py) can write its cache (their Landlock rules); a builder, which runs the candidate's
Python, and the candidate's own process (harness/runner.py) cannot.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from ..tvm_env import GRAPH_EXEC_MODE, TIR_PIPELINE, build_tir

LIBRARY = "kernels.so"


def _lowered(mod, target):
    """(the VM's ExecBuilder, the lowered PrimFuncs, constants) as tvm.compile has them before it builds
    the PrimFuncs; None where the module carries external libraries (BYOC): those build the whole way."""
    from tvm import relax
    from tvm.relax import vm_build

    with target:
        lowered = relax.get_pipeline("default_build")(mod)
    attrs = dict(lowered.attrs) if lowered.attrs else {}
    if attrs.get("external_mods"):
        return None
    builder = relax.ExecBuilder()
    lowered = vm_build._vmcodegen(builder, lowered, GRAPH_EXEC_MODE)  # as tvm_env.build_graph
    return builder, vm_build._filter_tir(lowered), dict(attrs.get("const_name_to_constant", {}))


class CacheUnavailable(RuntimeError):
    """The cache could not be written or its objects linked (this machine's fault, not the candidate's)."""


def _digest(func_json: str, target) -> str:
    """The cache's name for a kernel: its lowered TIR, every attribute of the target (and host) and TVM's
    version, and the TIR lowering's name (tvm_env.TIR_PIPELINE); two builds share an object file only when
    all of them are equal."""
    import tvm

    key = json.dumps([tvm.__version__, TIR_PIPELINE, target.export(), func_json], sort_keys=True, default=str)
    return hashlib.sha256(key.encode()).hexdigest()


def compile_kernels(mod, target, cache: Path, out_dir: Path) -> tuple[Path, float, dict] | None:
    """Compiles `mod`'s kernels for `target` into out_dir/kernels.so, each kernel taken from `cache` when
    an earlier build compiled it. Returns (library, seconds, {"kernels", "compiled"}); None: `mod` is built
    whole (external libraries, or no C compiler here to link with). Raises what TVM's build raises (the
    candidate's compile error), or CacheUnavailable."""
    import tvm
    from tvm.support import cc

    t0 = time.perf_counter()
    if cc.get_cc() is None:
        return None
    lowered = _lowered(mod, target)
    if lowered is None:
        return None
    _, tir, _ = lowered
    objects, compiled, symbols, callers = [], 0, [], []
    for gv in tir.get_global_vars():
        one = tvm.IRModule({gv: tir[gv]})
        symbols.append(str((tir[gv].attrs or {}).get("global_symbol", gv.name_hint)))
        obj = cache / f"{_digest(tvm.ir.save_json(one), target)}.o"
        if not obj.is_file():
            built = build_tir(one, target)
            tmp = out_dir / f"{obj.stem}.o"
            try:
                built.write_to_file(str(tmp))
                os.replace(tmp, obj)  # whole or not at all: a judge killed mid-write leaves no half object
            except Exception as e:
                raise CacheUnavailable(f"writing {obj.name}: {e}") from e
            compiled += 1
        objects.append(str(obj))
        if symbols[-1].startswith(VM_MAIN_PREFIX):
            callers.append(obj)
    library = out_dir / LIBRARY
    try:
        cc.create_shared(str(library), objects, options=_kernel_aliases(callers, symbols))
    except Exception as e:
        why = (str(e).strip().splitlines() or [type(e).__name__])[-1]
        raise CacheUnavailable(f"linking the kernels: {why}") from e
    return library, time.perf_counter() - t0, {"kernels": len(objects), "compiled": compiled}


VM_MAIN_PREFIX = "__vmtir__"  # the compiled VM's functions (tvm_env.GRAPH_EXEC_MODE): main's calls


def _kernel_aliases(callers: list[Path], kernels: list[str]) -> list[str]:
    """Linker options that bind the compiled VM's calls to the kernels' packed entries. Its main calls each
    kernel by name, a symbol that a build of the whole graph resolves inside its one object; compiled alone,
    the caller's object leaves it undefined (LLVM names the declaration of a repeated call "name.N"), and
    each kernel's object exports its entry as __tvm_ffi_<name>. The undefined names are read from the
    callers' objects (nm, from the binutils the C compiler links with)."""
    import re
    import subprocess

    known = set(kernels)
    out = []
    for obj in callers:
        try:
            nm = subprocess.run(["nm", "-u", str(obj)], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as e:
            raise CacheUnavailable(f"reading the compiled VM's calls (nm): {e}") from e
        if nm.returncode != 0:
            raise CacheUnavailable(f"reading the compiled VM's calls (nm): {nm.stderr.strip()[-200:]}")
        for name in (ln.split()[-1] for ln in nm.stdout.splitlines() if ln.strip()):
            kernel = name if name in known else re.sub(r"\.\d+$", "", name)
            if kernel in known:
                out.append(f"-Wl,--defsym,{name}=__tvm_ffi_{kernel}")
    return sorted(set(out))


def link(mod, target, library: Path):
    """The VM executable of `mod` whose kernels are those of `library` (compile_kernels' output)."""
    import tvm
    from tvm import relax
    from tvm.relax import vm_build

    lowered = _lowered(mod, target)
    if lowered is None:
        raise ValueError("a module with external libraries is built whole")
    builder, _, constants = lowered
    lib = tvm.runtime.load_module(str(library))
    return relax.VMExecutable(vm_build._ffi_api.VMLink(builder, target, lib, [], constants))
