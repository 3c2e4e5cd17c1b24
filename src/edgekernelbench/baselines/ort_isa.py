"""ONNX Runtime held to the ISA of a pinned host profile.

ONNX Runtime's CPU kernels (MLAS) are chosen by CPUID once, when onnxruntime is loaded. A candidate built
for host-avx2 on an AVX-512 CPU would otherwise be compared with ORT's 512-bit kernels, a comparison an
AVX2-only CPU never makes. So where a host profile pins a narrower ISA than this CPU has, the judge hides
from CPUID, in its own process and before it loads onnxruntime, the vector extensions this CPU has and the
profile's CPU lacks (`plan_pin`, in the parent; `apply_pin`, in the judge's process). Linux's CPUID
faulting (arch_prctl ARCH_SET_CPUID) makes the instruction trap, and a signal handler
(data/ekb_cpuid_mask.c) answers with those bits of leaf 7 cleared. ONNX Runtime then runs the kernels it
runs on a CPU with only the profile's ISA -- its u8 x s8 GEMM saturating without VNNI included -- on this
CPU's cores. Where there is no CPUID faulting (another OS, another architecture, a hypervisor without it),
it runs its widest kernels and the result says why (Result.extra["onnxruntime_isa"]).

The library is built by the harness's parent into the native cache (native.py) and only loaded by the
judge's process, as the native ORT timer is."""

from __future__ import annotations

import ctypes
import functools
import json
import os
import platform
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from ..native import NativeBuildError, build_shared, source_key

SOURCE = Path(__file__).parent / "data" / "ekb_cpuid_mask.c"

# LLVM's name of a vector extension -> where CPUID announces it: (subleaf of leaf 7, register 0-3 for
# EAX, EBX, ECX, EDX, bit)
LEAF7_FEATURES = {
    "avx512f": (0, 1, 16),
    "avx512dq": (0, 1, 17),
    "avx512ifma": (0, 1, 21),
    "avx512pf": (0, 1, 26),
    "avx512er": (0, 1, 27),
    "avx512cd": (0, 1, 28),
    "avx512bw": (0, 1, 30),
    "avx512vl": (0, 1, 31),
    "avx512vbmi": (0, 2, 1),
    "avx512vbmi2": (0, 2, 6),
    "avx512vnni": (0, 2, 11),
    "avx512bitalg": (0, 2, 12),
    "avx512vpopcntdq": (0, 2, 14),
    "avx512vp2intersect": (0, 3, 8),
    "amx-bf16": (0, 3, 22),
    "avx512fp16": (0, 3, 23),
    "amx-tile": (0, 3, 24),
    "amx-int8": (0, 3, 25),
    "avxvnni": (1, 0, 4),
    "avx512bf16": (1, 0, 5),
    "amx-fp16": (1, 0, 21),
    "avxifma": (1, 0, 23),
    "avxvnniint8": (1, 3, 4),
    "avxneconvert": (1, 3, 5),
    "amx-complex": (1, 3, 8),
    "avxvnniint16": (1, 3, 10),
    "avx10.1": (1, 3, 19),
    "avx10.1-256": (1, 3, 19),
    "avx10.1-512": (1, 3, 19),
}


@dataclass(frozen=True)
class ISAPin:
    """What the judge hides from ONNX Runtime: `features` (LLVM's names) as the leaf-7 bit masks
    `leaf7_0` and `leaf7_1` (EAX, EBX, ECX, EDX of subleaves 0 and 1), with the `library` the parent
    built."""

    profile: str
    features: tuple[str, ...]
    leaf7_0: tuple[int, int, int, int]
    leaf7_1: tuple[int, int, int, int]
    library: str

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ISAPin:
        return cls(
            profile=str(d["profile"]),
            features=tuple(d["features"]),
            leaf7_0=tuple(int(x) for x in d["leaf7_0"]),
            leaf7_1=tuple(int(x) for x in d["leaf7_1"]),
            library=str(d["library"]),
        )


def masks(features) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The leaf-7 bit masks (subleaf 0, subleaf 1; EAX..EDX each) of the LEAF7_FEATURES among `features`."""
    out = [[0, 0, 0, 0], [0, 0, 0, 0]]
    for f in features:
        sub, reg, bit = LEAF7_FEATURES[f]
        out[sub][reg] |= 1 << bit
    return tuple(out[0]), tuple(out[1])


def features_to_hide(host: set[str], target: set[str]) -> tuple[str, ...]:
    """The vector extensions (LEAF7_FEATURES) this host has and the target's CPU lacks, sorted."""
    return tuple(sorted(f for f in LEAF7_FEATURES if f in host and f not in target))


def cpuid_faulting() -> str:
    """ "" where CPUID faulting is available to this process, else why not (one line)."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return f"CPUID cannot be masked on {sys.platform} {platform.machine()} (Linux x86-64 only)"
    ARCH_GET_CPUID, SYS_arch_prctl = 0x1011, 158
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(SYS_arch_prctl, ARCH_GET_CPUID, 0) < 0:
        return f"this kernel has no CPUID faulting (arch_prctl: {os.strerror(ctypes.get_errno())})"
    with open("/proc/cpuinfo") as f:
        flags = next((ln for ln in f if ln.startswith("flags")), "")
    if "cpuid_fault" not in flags.split():
        return "this CPU (or its hypervisor) has no CPUID faulting (no cpuid_fault in /proc/cpuinfo)"
    return ""


def build_library(cache: Path | None = None) -> Path:
    """The CPUID mask library, compiled into the native cache the first time. Raises NativeBuildError."""
    return build_shared(SOURCE, "ekb_cpuid_mask", source_key(SOURCE), "the CPUID mask", cache=cache)


def plan_pin(profile) -> tuple[ISAPin | None, str]:
    """For the harness's parent: (the pin, "") where ONNX Runtime must be held to a pinned host profile's
    ISA and can be; (None, "") where nothing is to be hidden (not a pinned host profile, or this CPU has
    nothing more); (None, why) where something is to be hidden and cannot be. Never raises; planned once
    per profile name and target in a process (every judgment asks)."""
    from ..backends.hostinfo import is_this_host

    if not is_this_host(profile) or profile.target.get("mcpu") in (None, "native"):
        return None, ""
    return _plan(profile.name, json.dumps(profile.target, sort_keys=True))


@functools.cache
def _plan(name: str, target_json: str) -> tuple[ISAPin | None, str]:
    from ..backends.hostinfo import target_features
    from ..tvm_env import host_cpu_features

    host = {f for f, on in host_cpu_features().items() if on}
    try:
        hidden = features_to_hide(host, target_features(json.loads(target_json)))
    except Exception as e:  # noqa: BLE001 -- an LLVM that does not know the CPU
        return None, f"ONNX Runtime not held to {name}'s ISA: LLVM cannot tell its features ({e})"
    if not hidden:
        return None, ""
    why = cpuid_faulting()
    if not why:
        try:
            lib = str(build_library())
        except (NativeBuildError, OSError) as e:
            why = str(e)
    if why:
        return None, f"ONNX Runtime not held to {name}'s ISA (it runs this CPU's widest): {why}"
    leaf7_0, leaf7_1 = masks(hidden)
    return ISAPin(name, hidden, leaf7_0, leaf7_1, lib), ""


# the judge process's pin, once applied: what Result.extra["onnxruntime_isa"] records
_APPLIED: dict = {}


def apply_pin(pin: dict | None, unavailable: str = "") -> dict:
    """In the judge's process, before onnxruntime is loaded: hides the pin's features (ISAPin.to_dict) from
    CPUID here and in every process and thread started from here. TVM is imported first: its SIGSEGV
    handler (a backtrace) must be in place before the mask's, which hands it every fault but CPUID's.
    Returns the record for the result: {"hidden": [...], "by": how} or {"hidden": [], "why": why not}. A
    pin that cannot be applied is recorded, not raised: ONNX Runtime then runs its widest kernels."""
    global _APPLIED
    _APPLIED = _apply(pin, unavailable)
    return dict(_APPLIED)


def _apply(pin: dict | None, unavailable: str) -> dict:
    if not pin:
        return {"hidden": [], **({"why": unavailable} if unavailable else {})}
    p = ISAPin.from_dict(pin)
    if "onnxruntime" in sys.modules:
        return {"hidden": [], "why": "onnxruntime was loaded before the CPUID mask (its kernels were chosen)"}
    from ..tvm_env import import_tvm

    import_tvm()
    try:
        lib = ctypes.CDLL(p.library, use_errno=True)
        four = ctypes.c_uint32 * 4
        lib.ekb_hide_cpuid.argtypes, lib.ekb_hide_cpuid.restype = [four, four], ctypes.c_int
        rc = lib.ekb_hide_cpuid(four(*p.leaf7_0), four(*p.leaf7_1))
    except (OSError, AttributeError) as e:
        return {"hidden": [], "why": f"cannot load the CPUID mask {p.library}: {e}"}
    if rc != 0:
        return {"hidden": [], "why": f"CPUID faulting refused: {os.strerror(ctypes.get_errno())}"}
    return {"hidden": list(p.features), "by": f"CPUID faulting, held to {p.profile}'s ISA"}


def applied() -> dict:
    """This process's record of the pin (apply_pin's), {} where none was asked for."""
    return dict(_APPLIED)
