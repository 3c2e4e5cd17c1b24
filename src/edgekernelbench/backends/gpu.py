"""GPU and accelerator backends: device code generation for CUDA, OpenCL, Metal and WebGPU profiles.

No GPU is needed to build: TVM generates the device source (CUDA C, OpenCL C, Metal Shading Language,
WGSL) and compiles the launcher for the profile's host. Building keeps that source, for the Result.

The silent failure this backend guards against: a PrimFunc whose loops are not bound to GPU threads
(blockIdx / threadIdx) gets no device kernel -- TVM compiles its loops as host code that reads device
memory, without an error. `build` therefore checks, after the Relax lowering pipeline and before code
generation, that every buffer store of every PrimFunc sits under a thread binding, and raises
`UnboundLoops` naming the PrimFuncs that do not; the harness records that as a compile error.

Running on a device (correctness, timing) needs a reachable one, with the same harness as the CPU:
- run = "local": a device of the target's kind in this machine (`host-gpu`: CUDA device 0, its arch
  detected by TVM), through a TVM runtime built with that kind (the PyPI wheel has CUDA). A missing
  runtime or device is one clear error (`DeviceUnavailable`), recorded as "infra", never as a wrong kernel;
- run = "remote": a device behind a TVM RPC tracker (rpc.py builds here with this backend);
- otherwise ("compile-only", the built-in Jetson / Mali / Adreno / WebGPU / Metal profiles) the harness
  reports "compiled, correctness not checked".
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from ..errors import EKBError
from ..tvm_env import compile as tvm_compile
from .base import Backend, Built, Loaded, Session
from .host import LocalSession

DEVICE_MODULE_KINDS = ("cuda", "opencl", "metal", "webgpu", "vulkan", "hip", "rocm")
SOURCE_LANGUAGE = {
    "cuda": "cuda",
    "opencl": "opencl",
    "metal": "metal",
    "webgpu": "wgsl",
    "vulkan": "spirv",
    "hip": "hip",
    "rocm": "hip",
}
MAX_SOURCE_CHARS = 32_000  # device source kept in a Result (per candidate, in the run store)
_THREAD_ATTRS = ("thread_extent", "virtual_thread")
_KERNEL_RE = {
    "cuda": re.compile(r"__global__\s+void\s+(?:__launch_bounds__\(\d+\)\s+)?(\w+)\s*\("),
    "hip": re.compile(r"__global__\s+void\s+(?:__launch_bounds__\(\d+\)\s+)?(\w+)\s*\("),
    "opencl": re.compile(r"__kernel\s+void\s+(\w+)\s*\("),
    "metal": re.compile(r"kernel\s+void\s+(\w+)\s*\("),
    "wgsl": re.compile(r"@compute[^\n]*\n\s*fn\s+(\w+)\s*\("),
}


class DeviceUnavailable(EKBError):
    """A local GPU profile whose device cannot be used here (no runtime for its kind, or no device);
    `short`: the reason in a few words, for a table cell."""

    def __init__(self, message: str, short: str):
        self.short = short
        super().__init__(message)


def local_device(profile):
    """The profile's local device (`kind` of its target, device 0), or DeviceUnavailable saying why."""
    import tvm

    kind = str(profile.target.get("kind"))
    try:
        enabled = bool(tvm.runtime.enabled(kind))
    except Exception:  # a kind TVM has no runtime switch for (e.g. webgpu: a browser's)
        enabled = False
    if not enabled:
        why = {
            "cuda": "it needs the NVIDIA driver's libcuda.so.1: no NVIDIA driver on this machine",
        }.get(kind, f"this TVM build has no {kind} runtime")
        raise DeviceUnavailable(
            f"{profile.name}: TVM's {kind} runtime is not loaded ({why}); run it where the device is, "
            f'or reach one over RPC (run = "remote" and an rpc_key)',
            short=f"no {kind} runtime" + (" (no NVIDIA driver)" if kind == "cuda" else ""),
        )
    dev = tvm.device(kind, 0)
    if not dev.exist:
        raise DeviceUnavailable(
            f"{profile.name}: no {kind} device found here ({kind}:0 does not exist: no GPU, no driver, "
            f"or hidden by CUDA_VISIBLE_DEVICES)",
            short=f"no {kind} device",
        )
    return dev


def require_device(profile, tracker: str | None = None) -> None:
    """Raises DeviceUnavailable when the profile runs on a local GPU that is not here (one clear line
    before a run starts); nothing for any other profile."""
    if profile.uses_local_gpu(tracker):
        local_device(profile)


def device_description(dev) -> dict:
    """What the record says about a local GPU: name, compute version, memory (what TVM can tell)."""
    out = {"device": str(dev)}
    for attr in ("device_name", "compute_version", "multi_processor_count", "total_global_memory"):
        try:
            value = getattr(dev, attr)
        except Exception:
            continue
        if value is not None:
            out[attr] = value
    return out


class UnboundLoops(EKBError):
    """PrimFuncs with work outside any GPU thread binding: they would get no device kernel."""

    def __init__(self, funcs: dict[str, list[str]], target_kind: str):
        self.funcs = funcs
        parts = []
        for name, blocks in sorted(funcs.items()):
            where = f" (blocks {', '.join(blocks[:4])}{', ...' if len(blocks) > 4 else ''})" if blocks else ""
            parts.append(f"{name}{where}")
        super().__init__(
            f"loops not bound to GPU threads (blockIdx/threadIdx) in PrimFunc(s) {'; '.join(parts)}: "
            f"TVM gives them no {target_kind} device code and compiles them as host code; bind the loops "
            f"(sch.bind) or schedule with dlight's GPU rules"
        )


@dataclass
class GPUBuilt(Built):
    """A device build: the executable, plus the generated device source and its kernel names."""

    device_source: str = ""
    language: str = ""
    device_kernels: list[str] = field(default_factory=list)

    @property
    def extra(self) -> dict:
        """What the harness puts in Result.extra."""
        src = self.device_source
        out = {
            "device_language": self.language,
            "device_kernels": list(self.device_kernels),
            "device_source": src[:MAX_SOURCE_CHARS],
        }
        if len(src) > MAX_SOURCE_CHARS:
            out["device_source_truncated"] = {"kept": MAX_SOURCE_CHARS, "total": len(src)}
        return out


# ---------------------------------------------------------------------------------- IR check
def _unbound_blocks(stmt, bound: bool, block: str, out: list[str]) -> None:
    """Appends the name of the enclosing block of every BufferStore not under a thread binding."""
    from tvm import s_tir, tirx

    if stmt is None:
        return
    if isinstance(stmt, tirx.BufferStore):
        if not bound:
            out.append(block)
        return
    if isinstance(stmt, tirx.For):
        _unbound_blocks(stmt.body, bound or stmt.kind == tirx.ForKind.THREAD_BINDING, block, out)
    elif isinstance(stmt, tirx.AttrStmt):
        _unbound_blocks(stmt.body, bound or str(stmt.attr_key) in _THREAD_ATTRS, block, out)
    elif isinstance(stmt, tirx.SeqStmt):
        for s in stmt.seq:
            _unbound_blocks(s, bound, block, out)
    elif isinstance(stmt, tirx.IfThenElse):
        _unbound_blocks(stmt.then_case, bound, block, out)
        _unbound_blocks(stmt.else_case, bound, block, out)
    elif isinstance(stmt, s_tir.SBlockRealize):
        _unbound_blocks(stmt.block, bound, block, out)
    elif isinstance(stmt, s_tir.SBlock):
        name = str(stmt.name_hint)
        _unbound_blocks(stmt.init, bound, name, out)
        _unbound_blocks(stmt.body, bound, name, out)
    else:
        body = getattr(stmt, "body", None)  # While, and any other statement with a body
        if isinstance(body, tirx.Stmt):
            _unbound_blocks(body, bound, block, out)


def unbound_primfuncs(mod) -> dict[str, list[str]]:
    """PrimFunc name -> names of the blocks whose stores are outside any GPU thread binding
    (thread-bound loop or thread_extent attribute); PrimFuncs without such stores are left out."""
    import tvm

    found: dict[str, list[str]] = {}
    for gv, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        blocks: list[str] = []
        _unbound_blocks(func.body, False, "", blocks)
        if blocks:
            names = [b for b in dict.fromkeys(blocks) if b and b != "root"]
            found[gv.name_hint] = names
    return found


def device_modules(rt_mod) -> list:
    """The device modules imported (at any depth) by a runtime module: the host library of a Relax
    VM executable imports them (`ex.mod.imports[0].imports`), a TIR build imports them directly."""
    out, stack, seen = [], [rt_mod], set()
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        if m.kind in DEVICE_MODULE_KINDS:
            out.append(m)
        stack.extend(m.imports)  # kind and imports only: a foreign-host LLVM module cannot be JIT-ed here
    return out


def kernel_names(source: str, language: str) -> list[str]:
    rx = _KERNEL_RE.get(language)
    return list(dict.fromkeys(rx.findall(source))) if rx else []


# ---------------------------------------------------------------------------------- backend
class GPUBackend(Backend):
    """Builds for a GPU target (with its host) and keeps the device source; runs on a local device
    when the profile's run is "local" (remote devices: rpc.py's RPCBackend builds with this class)."""

    def target(self, extra_attrs=None):
        import tvm

        t = dict(self.profile.target)
        t.update(extra_attrs or {})
        return tvm.target.Target(t, host=self.profile.host or {"kind": "llvm"})

    def build(self, mod, extra_attrs=None, stock: bool = False) -> GPUBuilt:
        import tvm
        from tvm import relax

        from .host import primfunc_library

        target = self.target(extra_attrs)
        t0 = time.perf_counter()
        with target:
            lowered = relax.get_pipeline("default_build")(mod)  # what tvm.compile would run
        unbound = unbound_primfuncs(lowered)
        if unbound:
            raise UnboundLoops(unbound, target.kind.name)
        graph = tvm_compile(lowered, target, stock=stock, relax_pipeline=None)
        devs = device_modules(graph.mod)
        if not devs and any(isinstance(f, tvm.tirx.PrimFunc) for f in lowered.functions.values()):
            names = sorted(
                gv.name_hint for gv, f in lowered.functions.items() if isinstance(f, tvm.tirx.PrimFunc)
            )
            raise UnboundLoops({n: [] for n in names}, target.kind.name)
        kernels = tvm_compile(primfunc_library(mod), target, stock=stock) if self.profile.can_check else None
        language = SOURCE_LANGUAGE.get(target.kind.name, target.kind.name)
        source = "\n".join(m.inspect_source() for m in devs)  # NB inspect_source("cu") returns ""
        return GPUBuilt(
            graph,
            kernels,
            time.perf_counter() - t0,
            device_source=source,
            language=language,
            device_kernels=kernel_names(source, language),
        )

    def session(self) -> Session:
        if self.profile.run == "local":
            return LocalGPUSession(local_device(self.profile))
        if self.profile.can_check:  # remote: the RPC backend's job (rpc.py); emulated: no GPU emulator
            raise EKBError(
                f"{self.name}: run = {self.profile.run} needs a device session; a GPU profile runs on a "
                f"local device (run = local) or through a TVM RPC tracker (run = remote)"
            )
        return CompileOnlySession(self.name, self.profile.run)


class LocalGPUSession(LocalSession):
    """A GPU of this machine: tensors live in device memory; the harness copies results back."""

    def describe(self) -> dict:
        return {"device": {"local": device_description(self.device)}}


class CompileOnlySession(Session):
    """Nothing to run on: the profile's device is not reachable from here."""

    device = None

    def __init__(self, backend: str, run: str):
        self.backend, self.run = backend, run

    def _fail(self):
        raise EKBError(
            f"{self.backend}: no device to run on here (run = {self.run}); GPU profiles build device code "
            f"only, running needs the device (a TVM RPC tracker for run = remote)"
        )

    def to_device(self, array):
        self._fail()

    def load(self, built: Built) -> Loaded:
        self._fail()
