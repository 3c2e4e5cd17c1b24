"""What a backend profile can do on this machine: build (TVM has its target), check correctness
(a local device, an emulator with its cross toolchain, or a remote device behind a tracker), time.
Used by `ekb backends`."""

from __future__ import annotations

import contextlib
import os
import shutil

from ..tvm_env import compile as tvm_compile
from .base import BackendProfile

_GPU_PROBE = """
@T.prim_func
def main(A: T.Buffer((64,), "float32")):
    for i in T.thread_binding(64, thread="threadIdx.x"):
        A[i] = A[i] + T.float32(1)
"""
_CPU_PROBE = """
@T.prim_func
def main(A: T.Buffer((64,), "float32")):
    for i in range(64):
        A[i] = A[i] + T.float32(1)
"""


def target_short(target: dict) -> str:
    """ "llvm cortex-a72", "llvm aarch64", "cuda sm_87", "opencl mali", ..."""
    parts = [str(target.get("kind", "?"))]
    if target.get("mtriple") and not target.get("mcpu"):
        parts.append(str(target["mtriple"]).split("-")[0])
    for key in ("mcpu", "arch", "device"):
        if target.get(key):
            parts.append(str(target[key]))
    return " ".join(parts)


@contextlib.contextmanager
def _quiet_stderr():
    """TVM's C++ warnings (e.g. LLVM's for wasm32) go to fd 2; keep the table clean."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def probe_build(profile: BackendProfile) -> tuple[bool, str]:
    """Builds a 64-element kernel for the profile's target (and host): TVM can build for it here."""
    try:
        import tvm

        from .host import resolve_target

        target = resolve_target(profile)
        if profile.kind == "gpu":
            tgt = tvm.target.Target(target, host=profile.host or {"kind": "llvm"})
        elif profile.host:
            tgt = tvm.target.Target(target, host=profile.host)
        else:
            tgt = tvm.target.Target(target)
        func = tvm.script.from_source(_GPU_PROBE if profile.kind == "gpu" else _CPU_PROBE)
        with _quiet_stderr():
            tvm_compile(tvm.IRModule({"main": func}), tgt)
        return True, "yes"
    except Exception as e:
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        return False, f"no: {type(e).__name__}: {lines[-1] if lines else ''}"[:200]


def local_gpu(profile: BackendProfile) -> tuple[bool, str] | None:
    """For a GPU profile with run = "local": (whether its device is here, what to show); else None."""
    if not profile.uses_local_gpu():
        return None
    from .gpu import DeviceUnavailable, device_description, local_device

    try:
        with _quiet_stderr():
            dev = local_device(profile)
            name = device_description(dev).get("device_name") or str(dev)
    except DeviceUnavailable as e:
        return False, f"no: {e.short}"
    return True, f"yes ({name})"


def backend_capabilities(profile: BackendProfile) -> dict:
    """The profile as data plus {"build", "check", "time"}: each {"ok": bool, "detail": str}."""
    from .hostinfo import missing_features

    build_ok, build_detail = probe_build(profile)
    device = local_gpu(profile) if build_ok else None
    missing = missing_features(profile) if build_ok else []
    if missing:  # this CPU lacks its ISA: built, but never run here
        device = (False, f"no: this CPU lacks {', '.join(missing)}")
    if not build_ok:
        check = (False, "no")
    elif device is not None:
        check = (device[0], device[1])
    elif profile.run == "local":
        check = (True, "yes")
    elif profile.run == "emulated":
        tools = [profile.cross_compiler, profile.emulator[0] if profile.emulator else None]
        missing = [t for t in tools if t and not shutil.which(t)]
        if not profile.cross_compiler or not profile.emulator:
            check = (False, "no: the profile names no cross_compiler / emulator")
        elif missing:
            pkg = f" (apt: {profile.toolchain_package}, qemu-user)" if profile.toolchain_package else ""
            check = (False, f"no: {', '.join(missing)} not on PATH{pkg}")
        else:
            check = (True, "yes (emulated)")
    elif profile.run == "remote":
        check = (False, f"needs tracker (rpc key {profile.rpc_key or profile.name})")
    else:
        check = (False, "no")
    if not build_ok:
        timing = (False, "no")
    elif device is not None:
        timing = (device[0], "yes" if device[0] else "no")
    elif profile.run == "local":
        timing = (True, "yes")
    elif profile.run == "remote":
        timing = (False, "needs tracker")
    elif profile.run == "emulated":
        timing = (False, "no")
    else:
        timing = (False, "no")
    return {
        "name": profile.name,
        "kind": profile.kind,
        "target": profile.target,
        "target_short": target_short(profile.target),
        "host": profile.host,
        "threads": profile.threads,
        "vector_bits": profile.vector_bits,
        "caches": profile.caches,
        # for a host profile: this machine as detected, and where each figure came from (hostinfo.py)
        "detected": profile.extra.get("detected"),
        "run": profile.run,
        "rpc_key": profile.rpc_key,
        "peak_flops": profile.peak_flops,
        "peak_bandwidth": profile.peak_bandwidth,
        "peak_levels": profile.peak_levels,
        "peak_source": profile.peak_source,
        "source": profile.source,
        "description": profile.description,
        "build": {"ok": build_ok, "detail": build_detail},
        "check": {"ok": check[0], "detail": check[1]},
        "time": {"ok": timing[0], "detail": timing[1]},
    }
