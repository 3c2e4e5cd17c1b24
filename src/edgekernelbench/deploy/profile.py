"""The per-kernel profile of an artifact, like LiteRT benchmark_model's per-operator table: each kernel's
share of the model's time, its time per call, where its decision came from, and its roofline fraction.

The times are the C program's (`c/model -p N`: every kernel call of N runs timed alone, in the same object
code as the artifact's kernels), the median of each call over the runs; a kernel's total is the sum over its
calls, its share that total over all kernels'. The roofline (metrics.roofline) takes the kernel's FLOPs and
buffer bytes per call recorded at deploy time (the manifest's kernels) and the backend's peaks (runs: the
profile's measured peaks, the run's cached ones, else measured here in a fresh process)."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field


@dataclass
class KernelProfile:
    kernel: str
    calls: int
    us_per_call: float  # the mean over its calls of each call's median
    total_us: float  # per model run
    share: float  # of the kernels' time
    cumulative: float
    decision: str  # its source: run (sample k) / kerneldb #id / leka / rules / tvm-default
    gflops: float | None  # achieved
    roofline: float | None  # fraction of the attainable (compute or memory roof)
    bound: str | None  # compute | memory
    flag: str | None = None  # "above_roof": a measurement error, not a result


@dataclass
class Profile:
    runner: str
    runs: int
    kernels_us: float  # the kernels' time per run (sum of the totals)
    peak: str  # where the peaks came from ("" : no roofline)
    rows: list[KernelProfile] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def table(self) -> str:
        """The table as text (what `ekb deploy --profile` prints and writes to DIR/profile.txt)."""
        head = (
            f"{'kernel':<34} {'calls':>5} {'us/call':>9} {'total us':>9} {'%':>6} {'cum %':>6}  "
            f"{'decision':<22} {'GFLOP/s':>8} {'roofline':>12}"
        )
        lines = [
            f"per-kernel profile: {self.runner}, {self.runs} runs, kernels {self.kernels_us:,.1f} us per run",
            head,
            "-" * len(head),
        ]
        for r in self.rows:
            gf = "-" if r.gflops is None else f"{r.gflops:.2f}"
            roof = "-" if r.roofline is None else f"{100 * r.roofline:.0f}% {r.bound or ''}"
            roof += " !" if r.flag else ""
            lines.append(
                f"{r.kernel[:34]:<34} {r.calls:>5} {r.us_per_call:>9.2f} {r.total_us:>9.2f} "
                f"{100 * r.share:>6.1f} {100 * r.cumulative:>6.1f}  {r.decision[:22]:<22} {gf:>8} {roof:>12}"
            )
        lines.append(
            f"roofline: achieved / attainable at this kernel's intensity ({self.peak})"
            if self.peak
            else "roofline: no peak figures for this backend"
        )
        if any(r.flag for r in self.rows):
            lines.append(
                "!: above its roof, a measurement error, not a result (FLOPs overcounted, the peak measured "
                "low on a busy machine, or a call too short for its clock)"
            )
        return "\n".join(lines)


def decision_label(entry: dict) -> str:
    """A manifest kernel's decision in a few words."""
    p = entry.get("provenance") or {}
    if entry["source"] == "run":
        return f"run (sample {p.get('sample')})"
    if entry["source"] == "kerneldb":
        return f"kerneldb #{p.get('entry')}"
    if entry["source"] == "tvm-default" and entry.get("pinned"):
        return "tvm-default (judged)"
    return entry["source"]


def kernel_profile(
    steps: list[dict], kernels: list[dict], peak: dict | None, integer: bool, runner: str
) -> Profile:
    """The Profile from the C program's steps ([{"kernel", "us": [...]}] in call order) and the manifest's
    kernels; `peak`: a peak record (backends/peak.py: flops, bandwidth, levels, int8_ops, source) or None."""
    from ..metrics import roofline

    by_name = {k["name"]: k for k in kernels}
    per_call: dict[str, list[float]] = {}
    for st in steps:
        per_call.setdefault(st["kernel"], []).append(statistics.median(st["us"]))
    total = sum(sum(v) for v in per_call.values()) or 1.0
    rows = []
    for name, times in sorted(per_call.items(), key=lambda kv: -sum(kv[1])):
        entry = by_name.get(name, {"source": "?"})
        us = sum(times) / len(times)
        gflops = frac = bound = flag = None
        flops = entry.get("flops") or 0.0
        if us > 0:
            gflops = flops / (us * 1e-6) / 1e9 if flops else None
        if peak and us > 0 and entry.get("bytes"):
            roof = roofline(
                flops,
                entry["bytes"],
                us * 1e-6,
                (peak.get("int8_ops") if integer else None) or peak.get("flops"),
                peak.get("bandwidth"),
                peak.get("levels"),
                entry.get("bytes_written") or None,
            )
            frac, bound, flag = roof.fraction, roof.bound, roof.flag
        rows.append(
            KernelProfile(
                name,
                len(times),
                us,
                sum(times),
                sum(times) / total,
                0.0,
                decision_label(entry),
                gflops,
                frac,
                bound,
                flag,
            )
        )
    cum = 0.0
    for r in rows:
        cum += r.share
        r.cumulative = cum
    runs = len(steps[0]["us"]) if steps else 0
    return Profile(runner, runs, total if steps else 0.0, (peak or {}).get("source", ""), rows)


def peak_for(profile, threads: int, from_run: str | None) -> dict | None:
    """The backend's peaks for the roofline: the profile's measured ones, the run's cached ones (`from_run`),
    else measured here in a fresh process (a local profile; None otherwise or when that fails)."""
    from pathlib import Path

    from ..backends.peak import profile_peak
    from ..harness.peak import measure_peak_isolated

    peak = profile_peak(profile, threads)
    if peak:
        return peak
    if from_run:
        from ..store import DB_NAME, RunStore

        if (Path(from_run) / DB_NAME).is_file():
            with RunStore(Path(from_run)) as store:
                peak = store.get_meta(f"peak:{profile.name}:{threads}")
            if peak:
                return {**peak, "source": f"{peak.get('source', 'measured')} (cached in run {from_run})"}
    peak = measure_peak_isolated(profile, threads)
    return {**peak, "source": f"{peak.get('source', 'measured')} (here)"} if peak else None
