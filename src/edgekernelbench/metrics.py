"""Benchmark metrics: pure functions over `Result` records. No TVM, no I/O.

Definitions
-----------
For one backend, group the results by problem. For problem *i* let

* ``n_i``  = number of samples (candidates) evaluated,
* ``c_i``  = number of those that are correct (``compile_i`` / ``fast_i`` likewise count the
  samples that compiled / that are fast).

The unbiased pass@k estimator (Chen et al. 2021, "Evaluating Large Language Models Trained on
Code") is::

    pass@k(n, c) = 1 - C(n - c, k) / C(n, k)

the probability that at least one of k samples drawn without replacement from the n is a
success. It is computed in the numerically stable product form::

    C(n - c, k) / C(n, k) = prod_{i = n - c + 1}^{n} (1 - k / i)      (and 1 - it = 1 when n - c < k)

Benchmark-level metrics are the mean over problems of the per-problem estimate::

    Correct@k = mean_i pass@k(n_i, correct_i)
    Compile@k = mean_i pass@k(n_i, compiled_i)
    Fast@k_p  = mean_i pass@k(n_i, fast_i(p, baseline))

where a sample is *fast* for (p, baseline) iff it is correct AND its speedup against that baseline
is above p with confidence: the speedup is the median of the per-round ratios baseline / candidate of
the interleaved timing rounds, and the lower end of its 95% confidence interval
(``Result.speedup_ci``, harness/timing.py `paired_speedup`) must be strictly greater than p. A speedup
whose interval contains p is a *tie* (not fast; counted separately, see `verdict`); one whose interval
lies below p is *slow*. Records without an interval (written before intervals existed) fall back to the
point estimate (fast iff speedup > p). A correct sample without a measured speedup for that baseline is
not fast. Problems with fewer than k samples are skipped and counted in `Aggregate.skipped`.

The geometric-mean speedup over a set of results is ``exp(mean(log s))`` over the speedups s of
the correct samples that have a (finite, positive) speedup for the baseline.

Roofline: with achieved throughput ``F = flops / seconds`` and bandwidth ``B = bytes / seconds``,
arithmetic intensity ``I = flops / bytes``::

    attainable = min(peak_flops, I * peak_bw(level))
    fraction   = F / attainable

``bytes`` is the problem's compulsory traffic (problems/analysis.py: graph inputs and weights read
once, outputs written once). It is also the working set: the timing loop reruns the kernel back to back,
so the data stays in the smallest memory level that holds it, and ``level`` is the smallest measured
level (L1d, L2, L3, ..., DRAM; backends/peak.py) whose capacity is at least ``bytes``. Its roof
``peak_bw(level)`` weighs the level's read-only and read+write figures by the problem's share of bytes
written (its outputs; `mix_bandwidth`), and lets the part of the working set that the faster levels
can hold go at their roofs (`memory_level`). A peak record with one bandwidth figure (before levels
were measured) gives one memory roof for every size.
For an operator with no floating-point work (flops == 0: copies, transposes, pads) the ceiling
is the memory roof and ``fraction = B / peak_bw(level)``.

A fraction above 1 is a measurement error, never a result: the record is flagged ("above_roof",
with a one-line reason), and `mean_roofline_fraction` leaves it out (`roofline_flags` counts them).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from .records import Result, Roofline

__all__ = [
    "Aggregate",
    "ProblemOutcome",
    "Roofline",
    "compile_at_k",
    "correct_at_k",
    "fast_at_k",
    "geomean_speedup",
    "above_roof",
    "is_fast",
    "level_of",
    "mean_roofline_fraction",
    "memory_level",
    "mix_bandwidth",
    "outcomes",
    "pass_at_k",
    "roofline",
    "roofline_flags",
    "ties",
    "time_bound",
    "verdict",
]

_LEVEL_RE = re.compile(r"^L(\d+)/")


def level_of(problem_id: str) -> int | None:
    """The level of a problem id: the integer after "L" ("L1/dwconv" -> 1); None if the id has no level."""
    m = _LEVEL_RE.match(problem_id)
    return int(m.group(1)) if m else None


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k: ``1 - C(n-c, k) / C(n, k)`` for n samples of which c succeed.

    Raises ValueError when k < 1, n < k, or c is outside [0, n].
    """
    if k < 1:
        raise ValueError(f"pass@k needs k >= 1, got k={k}")
    if n < k:
        raise ValueError(f"pass@k needs at least k samples: n={n} < k={k}")
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n, got c={c}, n={n}")
    if n - c < k:  # every draw of k contains a success (includes c == n)
        return 1.0
    if c == 0:
        return 0.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def verdict(result: Result, p: float, baseline: str) -> str | None:
    """ "fast" (the speedup's confidence interval lies above p), "tie" (it contains p), "slow" (it lies
    below p), "implausible" (never fast: its kernels on poisoned outputs are much slower than its timed
    calls, or its time is below the backend's physical bound and a fresh judge did not confirm it -- see
    `time_bound` --, or it is above its roofline and no stateless timing confirmed it); None when the
    sample is not correct or has no speedup
    against `baseline`. A record without
    an interval is judged on its point estimate: "fast" when speedup > p, else "slow"."""
    if not result.correct:
        return None
    s = result.speedups.get(baseline)
    if s is None or math.isnan(s):
        return None
    if result.implausible:
        return "implausible"  # faster than the machine allows, and a fresh judge did not confirm it
    if above_roof(result.roofline) and not stateless_ok(result):
        return "implausible"  # above its roofline, and no timing without reuse confirmed its speed
    ci = result.speedup_ci.get(baseline)
    if not ci:
        return "fast" if s > p else "slow"
    lo, hi = ci
    if lo > p:
        return "fast"
    return "slow" if hi < p else "tie"


def is_fast(result: Result, p: float, baseline: str) -> bool:
    """Correct AND faster than `baseline` by more than p with confidence (see `verdict`)."""
    return verdict(result, p, baseline) == "fast"


@dataclass
class ProblemOutcome:
    """The samples of one problem on one backend."""

    problem: str
    backend: str
    samples: list[Result]

    @property
    def level(self) -> int | None:
        return level_of(self.problem)

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def c_compiled(self) -> int:
        return sum(1 for r in self.samples if r.compiled)

    @property
    def c_correct(self) -> int:
        return sum(1 for r in self.samples if r.correct)

    def c_fast(self, p: float, baseline: str) -> int:
        return sum(1 for r in self.samples if is_fast(r, p, baseline))

    def c_tie(self, p: float, baseline: str) -> int:
        return sum(1 for r in self.samples if verdict(r, p, baseline) == "tie")


def outcomes(results: Iterable[Result]) -> dict[str, ProblemOutcome]:
    """Groups the results of ONE backend by problem (sorted by problem id).

    Raises ValueError when the results mix backends (filter them first) or when the same
    (problem, sample) appears twice (it would be counted twice).
    """
    groups: dict[str, ProblemOutcome] = {}
    seen: set[tuple[str, int]] = set()
    backend: str | None = None
    for r in results:
        if backend is None:
            backend = r.backend
        elif r.backend != backend:
            raise ValueError(
                f"metrics are per backend: results mix {backend!r} and {r.backend!r}; filter by backend"
            )
        key = (r.problem, r.sample)
        if key in seen:
            raise ValueError(f"duplicate result for problem {r.problem!r} sample {r.sample}")
        seen.add(key)
        groups.setdefault(r.problem, ProblemOutcome(r.problem, r.backend, [])).samples.append(r)
    return dict(sorted(groups.items()))


@dataclass(frozen=True)
class Aggregate:
    """A mean over problems. `value` is None when no problem had enough samples."""

    value: float | None
    problems: int  # problems that entered the mean
    skipped: int  # problems skipped for having fewer than k samples


def _mean_pass_at_k(groups: Iterable[ProblemOutcome], k: int, count) -> Aggregate:
    vals: list[float] = []
    skipped = 0
    for g in groups:
        if g.n < k:
            skipped += 1
            continue
        vals.append(pass_at_k(g.n, count(g), k))
    return Aggregate(sum(vals) / len(vals) if vals else None, len(vals), skipped)


def correct_at_k(results: Iterable[Result], k: int = 1) -> Aggregate:
    """Correct@k: mean over problems of pass@k(n, #correct)."""
    return _mean_pass_at_k(outcomes(results).values(), k, lambda g: g.c_correct)


def compile_at_k(results: Iterable[Result], k: int = 1) -> Aggregate:
    """Compile@k: mean over problems of pass@k(n, #compiled)."""
    return _mean_pass_at_k(outcomes(results).values(), k, lambda g: g.c_compiled)


def fast_at_k(results: Iterable[Result], p: float, baseline: str, k: int = 1) -> Aggregate:
    """Fast_p@k: mean over problems of pass@k(n, #(correct and speedup vs baseline > p))."""
    return _mean_pass_at_k(outcomes(results).values(), k, lambda g: g.c_fast(p, baseline))


def ties(results: Iterable[Result], p: float, baseline: str) -> int:
    """How many correct samples tie with `baseline` at p: their speedup interval contains p, so they are
    neither fast nor slow (reported next to Fast@p)."""
    return sum(1 for r in results if verdict(r, p, baseline) == "tie")


def geomean_speedup(results: Iterable[Result], baseline: str) -> float | None:
    """Geometric mean of the speedups vs `baseline` of the correct samples that have one.

    Speedups that are not finite and positive are ignored. None when no sample qualifies.
    """
    logs = [
        math.log(s)
        for r in results
        if r.correct and (s := r.speedups.get(baseline)) is not None and math.isfinite(s) and s > 0
    ]
    return math.exp(sum(logs) / len(logs)) if logs else None


PLAUSIBLE_MARGIN = 0.5  # a time below half the physical bound is implausible (the bound's own error: < 2x)


def time_bound(
    flops: float,
    bytes: float,
    peak_flops: float | None,
    bandwidth: float | None,
    levels: Iterable[dict] = (),
    integer: bool = False,
) -> float | None:
    """The least time one run can take on a backend, in seconds: its compulsory bytes at the fastest
    bandwidth measured at any memory level (the stream or the read-only figure, whichever is higher), and
    its FLOPs at the measured peak FLOP/s -- the larger of the two. `integer`: the problem computes on
    8-bit integers, whose throughput (dot-product instructions) exceeds the float peak, so only the memory
    bound applies. None when no peak is known. A measured time below PLAUSIBLE_MARGIN times this bound is
    implausible: work skipped or results reused across the timed calls, not speed."""
    bws = [
        float(b)
        for b in [bandwidth, *(lv.get(k) for lv in levels for k in ("bandwidth", "read_bandwidth"))]
        if isinstance(b, int | float) and math.isfinite(b) and b > 0
    ]
    t_mem = bytes / max(bws) if bws and bytes > 0 else 0.0
    t_flop = flops / peak_flops if peak_flops and flops > 0 and not integer else 0.0
    return max(t_mem, t_flop) or None


def implausible(seconds: float, bound: float | None) -> bool:
    """A time below PLAUSIBLE_MARGIN of the physical bound (`time_bound`)."""
    return bound is not None and seconds < PLAUSIBLE_MARGIN * bound


# A candidate whose kernels, each timed alone on outputs overwritten before every call (so nothing an
# earlier call left in memory can be reused), take more than this many times its time through the VM is
# reusing such memory: implausible (harness/api.py check_plausible). The suite's 192 reference and rule-based
# candidates measure 0.05-1.18 (per-kernel timing has no VM dispatch), the red team's caches 30-2500.
STATE_FACTOR = 1.5


def stateless_ok(result: Result) -> bool:
    """The result's speed was confirmed without reuse of memory between calls: its kernels on poisoned
    outputs are no slower than STATE_FACTOR times its time (stateless timing), or a fresh judge confirmed
    an implausibly fast time ("implausible-confirmed")."""
    plaus = result.plausibility
    if plaus is None:
        return False
    if plaus.status == "implausible-confirmed":
        return True
    return plaus.stateless_ratio is not None and plaus.stateless_ratio <= STATE_FACTOR


def above_roof(roof: Roofline | None) -> bool:
    """A roofline record (``Result.roofline``) that claims more than its roof: flagged "above_roof", or (a
    record from before flags existed) a fraction above 1."""
    if roof is None:
        return False
    f = roof.fraction
    over = f is not None and math.isfinite(f) and f > 1.0
    return roof.flag == "above_roof" or over


def mean_roofline_fraction(results: Iterable[Result]) -> float | None:
    """Mean of ``Result.roofline.fraction`` over the correct samples that carry one, leaving out those
    above their roof (a measurement error, not a result: counted by `roofline_flags`)."""
    vals = []
    for r in results:
        roof = r.roofline
        finite = roof is not None and roof.fraction is not None and math.isfinite(roof.fraction)
        if r.correct and finite and not above_roof(roof):
            vals.append(float(roof.fraction))
    return sum(vals) / len(vals) if vals else None


def roofline_flags(results: Iterable[Result]) -> int:
    """How many correct samples are above their roof (see `above_roof`); `mean_roofline_fraction`
    leaves them out."""
    return sum(1 for r in results if r.correct and above_roof(r.roofline))


def mix_bandwidth(level: dict, bytes: float, bytes_written: float | None) -> float:
    """The bandwidth roof of one memory level for a kernel that reads ``bytes - bytes_written`` and
    writes ``bytes_written`` bytes. With the level's read+write stream figure C ("bandwidth": as many
    bytes written as read) and read-only figure R ("read_bandwidth"), a byte read costs 1/R and a byte
    written 1/W with 1/W = 2/C - 1/R (so a 1:1 mix gets C and a read-only kernel R)::

        roof = max(C, bytes / (read / R + written / W))

    C is a floor: whatever the mix, the stream kernel showed that this level moves C bytes/s (a read-only
    figure below it says the read kernel fell short, not the memory). Without a read-only figure, or
    without `bytes_written`, the roof is max(C, R); with 2/C - 1/R <= 0 (noise), it is C."""
    c = float(level["bandwidth"])
    r = level.get("read_bandwidth")
    if not (isinstance(r, int | float) and math.isfinite(r) and r > 0):
        return c
    r = float(r)
    if bytes_written is None or bytes <= 0:
        return max(c, r)
    inv_w = 2.0 / c - 1.0 / r
    if inv_w <= 0:
        return c
    written = min(max(float(bytes_written), 0.0), float(bytes))
    return max(c, bytes / ((bytes - written) / r + written * inv_w))


def memory_level(
    working_set: float, levels: Iterable[dict], bytes_written: float | None = None
) -> tuple[str, float] | None:
    """(name, bytes/s): the smallest memory level that holds `working_set` bytes, and the memory roof
    for that working set, for a kernel that writes `bytes_written` of its bytes.

    The roof is the level's own (`mix_bandwidth`), except for the part of the working set that the
    levels below can hold: an ideal cache keeps min(working set, capacity) bytes in each faster level,
    so each level serves its share of the bytes at its own roof::

        1 / roof = sum_k share_k / mix_bandwidth(level_k)

    (a 3.5 MiB working set with a 2 MiB L2 gets up to 57% of its bytes from L2: a roof between L2's and
    L3's; a working set inside L1d gets L1d's). `levels`: mappings with "level" (name), "capacity"
    (bytes; None = unbounded, main memory), "bandwidth" (bytes/s, read+write stream) and optionally
    "read_bandwidth", in any order (a peak record's ``levels``). Past every capacity: the unbounded
    level, else the largest one. None when no level has a positive, finite bandwidth.
    """
    usable = [
        lv
        for lv in levels
        if isinstance(bw := lv.get("bandwidth"), int | float) and math.isfinite(bw) and bw > 0
    ]
    if not usable:
        return None

    def capacity(lv: dict) -> float:
        return math.inf if lv.get("capacity") is None else float(lv["capacity"])

    usable.sort(key=capacity)
    k = next((i for i, lv in enumerate(usable) if working_set <= capacity(lv)), len(usable) - 1)
    name = str(usable[k]["level"])
    if working_set <= 0:
        return name, mix_bandwidth(usable[k], working_set, bytes_written)
    seconds_per_byte, below = 0.0, 0.0
    for i, lv in enumerate(usable[: k + 1]):
        held = working_set if i == k else min(working_set, capacity(lv))
        if held > below:
            seconds_per_byte += (held - below) / working_set / mix_bandwidth(lv, working_set, bytes_written)
        below = held
    return name, 1.0 / seconds_per_byte


def _above_roof_reason(r: Roofline, bytes: float, peak_flops: float | None) -> str:
    over = f"{100.0 * r.fraction:.0f}% of"
    if r.bound == "memory" or not peak_flops:  # the memory roof bound it (or was the only one)
        return (
            f"{over} the {r.level} roof ({r.peak_bw / 1e9:.3g} GB/s, working set {bytes / 2**10:.1f} KiB): "
            "bytes overcounted, data held in a faster level than the working set suggests, or that roof "
            "measured low"
        )
    return (
        f"{over} the compute roof ({peak_flops / 1e9:.3g} GFLOP/s): FLOPs overcounted, or the peak FLOP/s "
        "measured low (clock, noise)"
    )


def roofline(
    flops: float,
    bytes: float,  # mirrors Result.bytes
    seconds: float,
    peak_flops: float | None = None,
    peak_bw: float | None = None,
    levels: Iterable[dict] | None = None,
    bytes_written: float | None = None,
) -> Roofline:
    """Where one run sits under the roofline of a device (see the module docstring). Pure.

    The memory roof is that of the level the working set (`bytes`) fits in, from `memory_level` over
    `levels` (a peak record's per-level figures): that level's bandwidth for the kernel's mix of reads
    and writes (`bytes_written` of `bytes` are written: the outputs; `mix_bandwidth`), with the share of
    the working set that faster levels can hold at theirs; without levels, `peak_bw` is the one memory
    roof (level "memory"). Missing peaks (None) drop that roof: with only one roof
    known, `attainable_flops` is that roof; with none, it and `fraction` are None. Zero-flop ops are
    measured against the memory roof only (`fraction = achieved_bw / peak_bw`, `attainable_flops` = 0).
    A fraction above 1 gets ``flag = "above_roof"`` and a one-line `reason`.
    """
    if not seconds or seconds <= 0 or not math.isfinite(seconds):
        raise ValueError(f"roofline needs a positive run time, got {seconds!r}")
    if flops < 0 or bytes < 0:
        raise ValueError(f"roofline needs non-negative flops and bytes, got {flops}, {bytes}")
    achieved_flops = flops / seconds
    achieved_bw = bytes / seconds
    intensity = flops / bytes if bytes > 0 else None
    chosen = memory_level(bytes, levels, bytes_written) if levels else None
    if chosen:
        level, peak_bw = chosen
    else:  # one figure for every size (or none)
        level, peak_bw = ("memory", peak_bw) if peak_bw else (None, None)

    if flops == 0:  # pure data movement: only the memory roof means anything
        fraction = achieved_bw / peak_bw if peak_bw and bytes > 0 else None
        r = Roofline(achieved_flops, achieved_bw, intensity, 0.0, fraction, "memory", level, peak_bw)
    else:
        memory_roof = intensity * peak_bw if (peak_bw and intensity is not None) else None
        roofs = [x for x in (peak_flops or None, memory_roof) if x is not None]
        attainable = min(roofs) if roofs else None
        fraction = achieved_flops / attainable if attainable else None
        if peak_flops and memory_roof is not None:
            bound = "memory" if memory_roof < peak_flops else "compute"
        elif peak_flops and bytes == 0:
            bound = "compute"
        else:
            bound = None
        r = Roofline(achieved_flops, achieved_bw, intensity, attainable, fraction, bound, level, peak_bw)
    if r.fraction is not None and r.fraction > 1.0:
        r = replace(r, flag="above_roof", reason=_above_roof_reason(r, bytes, peak_flops))
    return r


def result_roofline(
    result: Result, peak: dict | None, bytes_written: float | None = None, integer: bool = False
) -> Roofline | None:
    """`roofline` of a timed, correct result on a backend's peak record (runs.backend_peak: "flops",
    "bandwidth", "levels", "int8_ops"), as kept in ``Result.roofline``; None when it has
    no time. `integer`: the problem computes on 8-bit integers (Problem.integer), whose compute roof is the
    backend's int8 dot-product peak where it has one ("int8_ops": VNNI), else its float FLOP/s."""
    if not (peak and result.correct and result.runtime):
        return None
    return roofline(
        result.flops,
        result.bytes,
        result.runtime.median,
        (peak.get("int8_ops") if integer else None) or peak["flops"],
        peak["bandwidth"],
        peak.get("levels"),  # absent in records from before per-level peaks
        bytes_written,
    )
