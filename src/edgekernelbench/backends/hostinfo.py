"""What this machine is, detected: the CPU and its ISA as LLVM sees it, its caches as the OS reports them,
its cores. Nothing here is assumed from a CPU's name (a hypervisor may hide AVX-512 from a Zen 4 or a
Xeon), and every fact carries where it came from.

A host profile (kind "host", run "local") is resolved against these facts once, when a command looks it
up (backends/registry.get_profile): its vector width is that of its target's ISA (for "mcpu": "native",
this host's; for a pinned CPU such as "haswell", that CPU's), its caches are this machine's, and a
profile whose ISA this machine cannot run says so (`missing_features`): its candidates would die of
SIGILL."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field, replace

from ..errors import EKBError
from ..machine import SYSFS_CPU, cpu_model, sysfs_caches
from ..records import Node
from .base import BackendProfile

# the ISA extensions a profile's vector width and an int8 kernel's instructions depend on, in the order
# shown; LLVM's feature names
ISA_FEATURES = (
    "sse4.2",
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512vnni",
    "avxvnni",
    "neon",
    "dotprod",
    "i8mm",
    "sve",
    "sve2",
    "v",
)


@dataclass(frozen=True)
class HostFacts:
    cpu: str  # LLVM's name of this CPU
    model: str  # the OS's name of it (/proc/cpuinfo)
    isa: tuple[str, ...]  # the ISA_FEATURES this host has
    vector_bits: int
    caches: dict = field(default_factory=dict)  # l1d_kib, l2_kib, l3_kib: per core
    cores: int = 1  # CPUs this process may run on
    sources: dict = field(default_factory=dict)  # fact -> where it came from


def vector_bits_of(features) -> int:
    """The widest vector registers an ISA feature set (LLVM's names) has: 512 with AVX-512, 256 with AVX,
    else 128 (SSE, NEON, and SVE's architectural minimum)."""
    f = set(features)
    if "avx512f" in f:
        return 512
    if "avx" in f or "avx2" in f:
        return 256
    return 128


@functools.cache
def host_facts() -> HostFacts:
    from ..tvm_env import host_cpu_features, host_cpu_name

    features = host_cpu_features()
    isa = tuple(f for f in ISA_FEATURES if features.get(f))
    caches = sysfs_caches()
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return HostFacts(
        cpu=host_cpu_name(),
        model=cpu_model(),
        isa=isa,
        vector_bits=vector_bits_of(isa),
        caches=caches,
        cores=cores,
        sources={
            "cpu": "LLVM (llvm_get_system_cpu)",
            "isa": "LLVM's host features (CPUID and what the OS enabled)" if features else "unknown",
            "vector_bits": "the widest vector ISA of the target",
            "caches": f"sysfs ({SYSFS_CPU})" if caches else "unknown (no sysfs cache entries)",
            "cores": "the process's CPU affinity",
        },
    )


def target_features(target: dict) -> set[str]:
    """The LLVM features an LLVM target dict enables (its CPU's and its mattr)."""
    import tvm
    from tvm.target import codegen

    return set(codegen.llvm_get_cpu_features(tvm.target.Target(target)))


def is_this_host(profile: BackendProfile) -> bool:
    """A profile of this machine's CPU: kind "host" with an LLVM target, run here or "mcpu": "native"
    (host-cpu-rpc: this machine as a device of the loopback farm)."""
    native = profile.target.get("mcpu") == "native"
    return (
        profile.kind == "host" and profile.target.get("kind") == "llvm" and (profile.run == "local" or native)
    )


def missing_features(profile: BackendProfile) -> list[str]:
    """The ISA_FEATURES a host profile's target uses that this CPU lacks ([]: it can run here)."""
    if not is_this_host(profile) or profile.target.get("mcpu") == "native":
        return []
    from .host import resolve_target

    have = set(host_facts().isa)
    want = target_features(resolve_target(profile))
    return [f for f in ISA_FEATURES if f in want and f not in have]


def resolve_host(profile: BackendProfile) -> BackendProfile:
    """A host profile with what this machine is: the vector width of its target's ISA, this machine's
    caches, and where each came from (extra["detected"]); other profiles as they are."""
    if not is_this_host(profile):
        return profile
    from .host import resolve_target

    facts = host_facts()
    native = profile.target.get("mcpu") == "native"
    try:
        bits = facts.vector_bits if native else vector_bits_of(target_features(resolve_target(profile)))
        bits_from = f"LLVM's features of {'this host' if native else profile.target.get('mcpu')}"
    except Exception:  # noqa: BLE001 -- an LLVM that does not know the CPU: the profile's own figure
        bits, bits_from = profile.vector_bits, f"the profile ({profile.source})"
    detected = {
        "cpu": facts.cpu,
        "model": facts.model,
        "isa": list(facts.isa),
        "cores": facts.cores,
        "vector_bits": bits_from,
        "caches": facts.sources["caches"] if facts.caches else f"the profile ({profile.source})",
    }
    return replace(
        profile,
        vector_bits=bits,
        caches=dict(facts.caches) or dict(profile.caches),
        extra={**profile.extra, "detected": detected},
    )


class ISAUnavailable(EKBError):
    """A host profile's target uses ISA extensions this CPU does not have."""


def require_isa(profile: BackendProfile) -> None:
    """Raises ISAUnavailable (one line) when the candidates of host profile `profile` could not run on this
    CPU: its target uses ISA extensions this machine lacks (they would die of SIGILL)."""
    missing = missing_features(profile)
    if missing:
        facts = host_facts()
        raise ISAUnavailable(
            f"{profile.name} ({profile.target.get('mcpu')}) cannot run on this CPU "
            f"({facts.model or facts.cpu}, LLVM {facts.cpu}: {', '.join(facts.isa) or 'no vector ISA'}): "
            f"it lacks {', '.join(missing)}; "
            "use host-cpu (this CPU as detected)"
            + (" or host-avx2" if "avx2" in facts.isa and profile.name != "host-avx2" else "")
        )


def node_here(ray_node: str = "", cpus=(), timing_core: bool = False) -> Node:
    """This machine as a result records where it was judged (records.Node): its host name, CPU (the OS's
    and LLVM's names), ISA; `ray_node`, `cpus`, `timing_core`: as a cluster's worker claimed them."""
    import platform

    facts = host_facts()
    return Node(
        host=platform.node(),
        ray_node=ray_node,
        cpu_model=facts.model,
        llvm_cpu=facts.cpu,
        isa=tuple(facts.isa),
        cpus=tuple(sorted(cpus)),
        timing_core=timing_core,
    )
