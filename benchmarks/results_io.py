"""What every benchmark script records with its numbers, and where: results/<name>.json at the repository's
root, one file per benchmark (the latest run; history stays in git), rendered into docs/results.md and the
README's headline table by benchmarks/render_results.py.

Each file holds: "benchmark" (its name), "date", "commit", "command" (how to run it again), "machine" (the CPU
as the OS and LLVM name it, its ISA, the backend, its vector width, the threads), "protocol" (how it was
measured), "headline" (one line for the README's table: {"what", "figure"}) and the benchmark's own numbers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"


def commit() -> str:
    """The short hash of the checkout the benchmark ran from (with "+" when it had uncommitted changes)."""
    try:
        git = ["git", "-C", str(ROOT)]
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run([*git, "status", "--porcelain", "--", "src"], capture_output=True, text=True)
    except OSError:
        return "unknown"
    return (head.stdout.strip() or "unknown") + ("+" if dirty.stdout.strip() else "")


def machine(backend: str = "host-cpu", threads: int = 1) -> dict:
    """The machine a benchmark ran on: its CPU (the OS's name and LLVM's), ISA and the backend's vector width."""
    from edgekernelbench.backends.hostinfo import host_facts
    from edgekernelbench.backends.registry import get_profile

    facts = host_facts()
    profile = get_profile(backend, threads)
    return {
        "cpu": facts.model,
        "llvm_cpu": facts.cpu,
        "isa": list(facts.isa),
        "backend": backend,
        "vector_bits": profile.vector_bits,
        "threads": threads,
    }


def pinned_isa_notes(backend: str, rows: list[dict], threads: int = 1) -> list[str]:
    """A note for a results file whose backend pins narrower vectors than this CPU has (host-avx2 on an
    AVX-512 CPU): whether ONNX Runtime was held to the same ISA (its kernels, MLAS, are picked by CPUID;
    the judge hides the wider extensions from it where CPUID faulting allows: baselines/ort_isa.py), from
    each row's "ort_isa" (the final judgment's record of it)."""
    from edgekernelbench.backends.registry import get_profile

    pinned, native = get_profile(backend, threads), get_profile("host-cpu", threads)
    if pinned.vector_bits >= native.vector_bits:
        return []
    timed = [r for r in rows if r.get("vs_ort")]
    held = [r for r in timed if (r.get("ort_isa") or {}).get("hidden")]
    built = (
        f"The candidates were built for {backend} ({pinned.vector_bits}-bit vectors) on a CPU with "
        f"{native.vector_bits}-bit vectors; "
    )
    if timed and len(held) == len(timed):
        hidden = sorted({f for r in held for f in r["ort_isa"]["hidden"]})
        return [
            built + f"ONNX Runtime was held to the same ISA: the judge hid {', '.join(hidden)} from CPUID in "
            "its process before loading it, so it ran the kernels it runs on a CPU without them (on this "
            "CPU's cores and clock)."
        ]
    whys = sorted({(r.get("ort_isa") or {}).get("why", "") for r in timed if r not in held} - {""})
    return [
        built + f"ONNX Runtime picks its kernels by CPUID and ran its {native.vector_bits}-bit ones in "
        f"{len(timed) - len(held)} of {len(timed)} judgments"
        + (f" ({'; '.join(whys)})" if whys else "")
        + f", so the comparison with it is stricter there than on a CPU with only {pinned.vector_bits}-bit "
        "vectors."
    ]


def write(name: str, report: dict, out: Path | None = None) -> Path:
    """Writes `report` (with "benchmark", "date", "commit" and "command" filled in when absent) to
    results/<name>.json, or to `out`; returns the path."""
    path = out or RESULTS / f"{name}.json"
    full = {
        "benchmark": name,
        "date": time.strftime("%Y-%m-%d"),
        "commit": commit(),
        "command": " ".join(["python", f"benchmarks/{Path(sys.argv[0]).name}", *sys.argv[1:]]),
        **report,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(full, indent=1) + "\n")
    return path
