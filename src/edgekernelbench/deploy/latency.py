"""Latency as engineers report it (LiteRT's benchmark_model: init, first inference, steady state): for each
runner of an artifact, the load / initialisation time, the first inference, and the steady state as the
p50 / p90 / p99 of N single runs, each timed alone, with the thread count, the CPU, its frequency governor
and clock where the OS lets them be read, and the runner's peak resident memory.

The runners: run.py (Python and TVM's runtime, in a fresh process without the compiler), the static C
program (c/model: the same form a board gets), and a farm device through TVM RPC. The paired comparison
with tvm-default and ONNX Runtime is timing.py's; this is what one model costs in one process."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..machine import cpu_governor, cpu_mhz, cpu_model


def percentile(values: list[float], p: float) -> float:
    """The nearest-rank percentile `p` (0 < p <= 100) of `values` (as the C program computes it)."""
    s = sorted(values)
    k = math.ceil(p / 100.0 * len(s))
    return s[min(max(k, 1), len(s)) - 1]


@dataclass
class Latency:
    runner: str  # what ran the model
    threads: int
    runs: int  # single runs timed for the steady state
    load_s: float | None  # loading and initialising (runtime, library, VM, weights)
    first_s: float | None  # the first inference
    p50_s: float | None
    p90_s: float | None
    p99_s: float | None
    mean_s: float | None
    min_s: float | None
    max_s: float | None
    cpu: str  # the CPU that ran it (this host's, or "" for a device)
    governor: str | None  # cpufreq's governor, None where it cannot be read
    mhz: float | None
    peak_rss_bytes: int | None = None  # the runner's peak resident memory
    model_rss_bytes: int | None = None  # of which the model's: after loading and running minus before loading
    workspace_peak_bytes: int | None = None  # the most workspace its kernels held at once (C program)
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        """One line: init, first run, p50 / p90 / p99 over N runs."""

        def us(s):
            return "-" if s is None else f"{s * 1e6:,.1f} us"

        load = "-" if self.load_s is None else f"{self.load_s * 1e3:,.1f} ms"
        return (
            f"{self.runner}: init {load}, first {us(self.first_s)}, p50 {us(self.p50_s)} / p90 "
            f"{us(self.p90_s)} / p99 {us(self.p99_s)} over {self.runs} runs, {self.threads} thread(s)"
        )


def host_facts() -> dict:
    """The CPU, its governor and clock, as this host's OS reports them."""
    return {"cpu": cpu_model(), "governor": cpu_governor(), "mhz": cpu_mhz()}


def latency(
    runner: str, threads: int, load_s, first_s, runs_s: list[float], facts: dict, **memory
) -> Latency:
    """A Latency from a runner's times (seconds); `facts`: host_facts() or a device's."""
    steady = {f"p{p}_s": percentile(runs_s, p) if runs_s else None for p in (50, 90, 99)}
    return Latency(
        runner=runner,
        threads=threads,
        runs=len(runs_s),
        load_s=load_s,
        first_s=first_s,
        **steady,
        mean_s=sum(runs_s) / len(runs_s) if runs_s else None,
        min_s=min(runs_s) if runs_s else None,
        max_s=max(runs_s) if runs_s else None,
        cpu=facts.get("cpu", ""),
        governor=facts.get("governor"),
        mhz=facts.get("mhz"),
        **memory,
    )


def from_run_py(stats: dict, facts: dict) -> Latency:
    """From run.py's --stats JSON."""
    peak, before = stats.get("peak_rss_kib"), stats.get("rss_before_load_kib")
    return latency(
        "run.py (Python + TVM runtime)",
        int(stats.get("threads", 1)),
        stats.get("load_s"),
        stats.get("first_s"),
        list(stats.get("runs_s") or []),
        facts,
        peak_rss_bytes=peak * 1024 if peak else None,
        model_rss_bytes=(peak - before) * 1024 if peak and before else None,
        note=f"init includes {stats['runtime_s'] * 1e3:.0f} ms importing tvm_ffi and loading libtvm_runtime"
        if stats.get("runtime_s") is not None
        else "",
    )


def from_c_program(stats: dict, facts: dict, runner: str = "c/model (static C program)") -> Latency:
    """From the C program's -j JSON (microseconds)."""
    rss = stats.get("max_rss_kib")
    return latency(
        runner,
        int(stats.get("threads", 1)),
        stats["init_us"] / 1e6 if stats.get("init_us") is not None else None,
        stats["first_us"] / 1e6 if stats.get("first_us") is not None else None,
        [t / 1e6 for t in stats.get("runs_us") or []],
        facts,
        peak_rss_bytes=rss * 1024 if rss else None,
        workspace_peak_bytes=stats.get("workspace_peak_bytes"),
    )
