"""One timing protocol for everything that is compared.

Each contender exposes run(number) -> seconds per call over `number` back-to-back calls (a C loop:
TVM's time_evaluator, the native ONNX Runtime timer).
1. calibration: `number` per contender so that one round lasts at least `min_repeat_ms` (it runs the
   contender: its time counts toward the warm-up);
2. warm-up: each contender runs until `warmup_ms` has passed, calibration included;
3. `rounds` rounds, interleaved: in every round each contender runs once, in a rotating order; with
   `max_rounds`, `rounds` more at a time while a paired ratio's interval is still wide (up to max_rounds);
4. per contender: median of the rounds, interquartile range, min, max, and every round's figure;
5. per pair (candidate, baseline): the speedup is the median of the per-round ratios, with a
   distribution-free 95% confidence interval (`paired_speedup`); metrics.verdict calls it fast at p
   only when the whole interval lies above p.
The candidate and its baselines are measured by the same process in the same run. A local worker
timing on one thread pins that thread to the CPU it runs on (`pin_thread`: no migration between
rounds), and `MachineWatch` records what else the machine did meanwhile (the other CPUs' busy share,
this process's involuntary context switches), so a result says whether it was timed on a quiet machine.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from ..records import Timing


@dataclass(frozen=True)
class TimingConfig:
    warmup_ms: float = 50.0
    min_repeat_ms: float = 10.0
    rounds: int = 25
    # up to this many rounds (in steps of `rounds`) while a paired ratio's interval is wider than
    # WIDE_CI of the ratio (`time_interleaved`); 0: exactly `rounds`
    max_rounds: int = 0
    # a contender timed around a request to another process (harness/runner.py RunnerProxy.timer: the
    # candidate) carries the request's fixed cost in every round (its round trip and what the runner's
    # timed path adds besides the calls); its rounds last at least this many of that cost
    # (`request_overhead_s`, estimated from requests of 0, 1 and 2 calls), at most MAX_ROUND_MS, so it is
    # ~1% of a round. 0: `min_repeat_ms` only (the search's protocol: its judgments compare candidates
    # with each other). On the 2-vCPU EPYC of 2026-12-06 a 2.7 ms model's request cost ~0.4 ms besides its
    # calls (a 39 us round trip, the rest TVM's time evaluator), and 10 ms rounds judged the candidate
    # 0.95-0.96x of tvm-default with tvm-default's own code.
    overheads_per_round: int = 100
    # input sets the timed calls take in turn (backends/call_loop.py): no call sees the inputs of the
    # call before it, and a kernel that reuses what it computed for inputs it saw cannot profit
    input_sets: int = 3

    @classmethod
    def quick(cls) -> TimingConfig:
        """Few rounds, but not short ones: a candidate timed in its own process (harness/runner.py) pays one
        request round trip per round (0.1 to several ms here), which 1 ms rounds did not amortise (a GEMM of
        136 us measured 220-985 us with 3 x 1 ms rounds; 134-144 us with 10 ms rounds)."""
        return cls(warmup_ms=20.0, min_repeat_ms=10.0, rounds=3)

    @classmethod
    def search(cls) -> TimingConfig:
        """An agent's search judgments under `--quick`: the short protocol's 10 ms rounds, 9 of them. With 3,
        the paired speedup's confidence interval is the range of 3 ratios and one burst from a neighbour
        moves the median: on logmel_frontend_yamnet, schedules that differ in an unroll step measured
        24x-40x over tvm-default, and a change that ran 1.3x faster alone was not kept. 9 rounds cost
        ~0.1 s more per contender, against the 3-5 s of a judgment (two processes, a build, the oracle).
        Up to 27 while the rounds disagree (`max_rounds`): on a busy machine a graph change measured 1.18x
        faster with an interval of [0.54x, 1.82x] after 9, so the search could not keep it. Rounds of 8 ms
        (the final judgment's are 10): a round trip to the runner (0.1 ms on a quiet machine) is still about
        1% of one, and a tvm-default of 8-10 ms per call (resnet8_ic's: 9 ms) runs once per round, not twice;
        the N = 32 run's timing and profiles took 225 s of its 437 s of judgments with 10 ms rounds."""
        return replace(cls.quick(), rounds=9, max_rounds=27, min_repeat_ms=8.0, overheads_per_round=0)


CALIBRATION_TRIES = 3  # measurements per step of the calibration; the fastest one counts
MAX_ROUND_MS = 250.0  # the longest round `overheads_per_round` asks for (a slow channel must not stall it)


def min_round_ms(run: Callable[[int], float], cfg: TimingConfig) -> float:
    """How long one round of contender `run` must last: `cfg.min_repeat_ms`, or for a contender that reports
    the fixed cost of the request it is timed around (`run.request_overhead_s`), at least
    `cfg.overheads_per_round` of those (capped at MAX_ROUND_MS). A contender can only lengthen its own
    rounds this way, never shorten them: a larger cost makes the cost a smaller part of them."""
    if not cfg.overheads_per_round:
        return cfg.min_repeat_ms
    cost = float(getattr(run, "request_overhead_s", 0.0) or 0.0)
    return max(cfg.min_repeat_ms, min(MAX_ROUND_MS, cfg.overheads_per_round * cost * 1e3))


def _calibrate(run: Callable[[int], float], min_repeat_ms: float) -> int:
    """The calls per round that make one round last at least `min_repeat_ms`. Each step takes the fastest of
    CALIBRATION_TRIES measurements: a transient delay (a request's round trip to the candidate's runner
    process on a loaded machine: up to milliseconds) must not end the calibration with a `number` so small
    that every round is mostly that delay."""
    number = 1
    while True:
        per_call = math.inf
        for _ in range(CALIBRATION_TRIES):  # a try already below `min_repeat_ms` ends the step: grow now
            per_call = min(per_call, run(number))
            if per_call * number * 1e3 < min_repeat_ms:
                break
        total_ms = per_call * number * 1e3
        if total_ms >= min_repeat_ms or number >= 1 << 20:
            return number
        grow = min_repeat_ms / max(total_ms, 1e-6) * 1.2
        number = max(number * 2, int(number * grow) + 1)


def time_interleaved(
    contenders: dict[str, Callable[[int], float]],
    cfg: TimingConfig,
    between: Callable[[int | None], None] | None = None,
) -> dict[str, Timing]:
    """The protocol of the module docstring. `between(r)` (the judge's checks) runs before round r and,
    with None, after the last round: outside every timed region."""
    names = list(contenders)
    numbers, warm_ms = {}, {}
    for name in names:  # the calibration runs each contender: that much of its warm-up is done
        t0 = time.perf_counter()
        numbers[name] = _calibrate(contenders[name], min_round_ms(contenders[name], cfg))
        warm_ms[name] = (time.perf_counter() - t0) * 1e3
    for name in names:  # the rest of the warm-up
        t_end = time.perf_counter() + max(0.0, cfg.warmup_ms - warm_ms[name]) / 1e3
        while time.perf_counter() < t_end:
            contenders[name](1)
    samples: dict[str, list[float]] = {n: [] for n in names}
    r = 0
    while r < cfg.rounds or (r < cfg.max_rounds and (r % cfg.rounds or _unresolved(samples, names))):
        if between is not None:
            between(r)
        order = names[r % len(names) :] + names[: r % len(names)]
        for n in order:
            samples[n].append(contenders[n](numbers[n]))
        r += 1
    if between is not None:
        between(None)
    out = {}
    for n in names:
        s = np.asarray(samples[n])
        q1, q3 = np.percentile(s, [25, 75])
        out[n] = Timing(
            median=float(np.median(s)),
            iqr=float(q3 - q1),
            min=float(s.min()),
            max=float(s.max()),
            count=len(s),
            number=numbers[n],
            samples=[float(x) for x in s],
        )
    return out


CONFIDENCE = 0.95
WIDE_CI = 0.10  # a paired ratio's interval wider than this share of the ratio: more rounds (max_rounds)


def _unresolved(samples: dict[str, list[float]], names: list[str]) -> bool:
    """Whether the first contender's paired ratio against any other (the candidate against its baselines)
    has a confidence interval wider than WIDE_CI of the ratio."""
    first = samples[names[0]]
    if min(first) <= 0:
        return False
    for n in names[1:]:
        s, lo, hi = _paired(samples[n], first)
        if hi - lo > WIDE_CI * s:
            return True
    return False


def _paired(baseline: list[float], candidate: list[float], confidence: float = CONFIDENCE):
    """(median, low, high) of the per-round ratios baseline / candidate (`median_ci`)."""
    ratios = [x / y for x, y in zip(baseline, candidate, strict=True)]
    lo, hi = median_ci(ratios, confidence)
    return float(np.median(ratios)), lo, hi


def median_ci(values, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """A distribution-free confidence interval for the median of `values`: the order statistics
    x_(k) and x_(n+1-k) (1-based) with the largest k such that 2 * P(Binomial(n, 1/2) < k) <= 1 - confidence.
    With fewer than 6 values no k qualifies at 95%; the interval is then (min, max), whose coverage is only
    1 - 2^(1-n): few rounds give wide, honest intervals, so speedups near p come out as ties."""
    xs = sorted(float(v) for v in values)
    n = len(xs)
    if n == 0:
        raise ValueError("median_ci needs at least one value")
    k, tail = 0, 0.0  # tail = P(B <= k - 1)
    while k < n // 2:
        nxt = tail + math.comb(n, k) / 2.0**n
        if 2 * nxt > 1 - confidence:
            break
        k, tail = k + 1, nxt
    k = max(k, 1)
    return xs[k - 1], xs[n - k]


def paired_speedup(baseline: Timing, candidate: Timing, confidence: float = CONFIDENCE):
    """(speedup, low, high) of `candidate` over `baseline` from the same interleaved rounds: in round r both
    ran within one rotation, so the ratio baseline_r / candidate_r cancels what the two shared (a slower
    core, a busy neighbour, a frequency step); the speedup is the median of those ratios and (low, high)
    its confidence interval (median_ci). Falls back to the ratio of the medians, with no interval
    ((s, s, s)), when the per-round samples are missing or unequal in number (old records)."""
    b, c = baseline.samples, candidate.samples
    if not b or len(b) != len(c) or min(c) <= 0:
        s = baseline.median / candidate.median if candidate.median > 0 else math.nan
        return s, s, s
    return _paired(b, c, confidence)


def fraction_of_peak(
    kernel: Timing, kernel_flops: float, peak: Timing, peak_flops: float
) -> tuple[float, float, float]:
    """(fraction, low, high): a kernel's FLOP/s over the peak micro-kernel's, from the same interleaved
    rounds (records.Timing of each): the median of the per-round ratios and its confidence interval
    (`paired_speedup`), so a round slowed by a neighbour slows both."""
    s, lo, hi = paired_speedup(peak, kernel)
    scale = kernel_flops / peak_flops
    return s * scale, lo * scale, hi * scale


# ------------------------------------------------------------------------------------------ the machine
DISTURBED_BUSY = 0.25  # other CPUs busy more than this share of the timing: "disturbed"


def _other_cpus_ticks(mine: set[int]) -> tuple[int, int] | None:
    """(busy, total) clock ticks of the CPUs not in `mine`, from /proc/stat; None where unreadable."""
    try:
        with open("/proc/stat") as f:
            lines = [ln.split() for ln in f if ln.startswith("cpu") and ln[3:4].isdigit()]
    except OSError:
        return None
    busy = total = 0
    for parts in lines:
        if int(parts[0][3:]) in mine:
            continue
        v = [int(x) for x in parts[1:]]
        total += sum(v[:8])  # user nice system idle iowait irq softirq steal
        busy += sum(v[:8]) - v[3] - v[4]
    return busy, total


def _involuntary_switches() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw


def _affinity() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set()


class MachineWatch:
    """Records, around a timing, how busy the machine's other CPUs were (their busy ticks in /proc/stat,
    10 ms resolution) and how often this process was preempted (involuntary context switches). The
    result (`summary()`) goes into Result.timing_env; "disturbed" is set when the other CPUs
    were busy more than DISTURBED_BUSY of the time: on a 2-core VM a busy neighbour core slows some
    kernels far more than others (measured here: 30-40 % on an L1-resident loop), which no statistic
    over the rounds can undo. Off Linux the figures are absent (None)."""

    def __enter__(self) -> MachineWatch:
        self.cpus = _affinity()
        self.t0, self.ticks0, self.switches0 = time.perf_counter(), _other_cpus_ticks(self.cpus), None
        with contextlib.suppress(Exception):
            self.switches0 = _involuntary_switches()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self.t0
        ticks1 = _other_cpus_ticks(self.cpus)
        self.busy = None
        if self.ticks0 and ticks1 and ticks1[1] > self.ticks0[1]:
            self.busy = (ticks1[0] - self.ticks0[0]) / (ticks1[1] - self.ticks0[1])
        self.switches = None
        with contextlib.suppress(Exception):
            if self.switches0 is not None:
                self.switches = _involuntary_switches() - self.switches0

    def summary(self) -> dict:
        return {
            "cpus": sorted(self.cpus),
            "other_cpus_busy": None if self.busy is None else round(self.busy, 3),
            "preemptions": self.switches,
            "seconds": round(self.seconds, 3),
            "disturbed": bool(self.busy is not None and self.busy > DISTURBED_BUSY),
        }


def current_cpu() -> int | None:
    """The CPU the calling thread last ran on (Linux /proc/thread-self/stat, field 39); None elsewhere."""
    try:
        with open("/proc/thread-self/stat") as f:
            stat = f.read()
        return int(stat[stat.rindex(")") + 2 :].split()[36])
    except (OSError, ValueError, IndexError):
        return None


def pin_thread() -> int | None:
    """Pins the calling thread to the CPU it runs on, so the timed code is not migrated between rounds
    (a migration starts it on cold private caches); returns the CPU, or None where it cannot."""
    cpu = current_cpu()
    if cpu is None or cpu not in _affinity():
        return None
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError:
        return None
    return cpu
