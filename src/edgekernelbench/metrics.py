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

where a sample is *fast* for (p, baseline) iff it is correct AND its measured speedup against
that baseline (baseline time / candidate time) is strictly greater than p. A correct sample
without a measured speedup for that baseline is not fast. Problems with fewer than k samples
are skipped and counted in `Aggregate.skipped`.

The geometric-mean speedup over a set of results is ``exp(mean(log s))`` over the speedups s of
the correct samples that have a (finite, positive) speedup for the baseline.

Roofline: with achieved throughput ``F = flops / seconds`` and bandwidth ``B = bytes / seconds``,
arithmetic intensity ``I = flops / bytes``::

    attainable = min(peak_flops, I * peak_bw)
    fraction   = F / attainable

For an operator with no floating-point work (flops == 0: copies, transposes, pads) the ceiling
is the memory roof and ``fraction = B / peak_bw``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from .harness.result import Result

__all__ = [
    "Aggregate",
    "ProblemOutcome",
    "Roofline",
    "compile_at_k",
    "correct_at_k",
    "fast_at_k",
    "geomean_speedup",
    "is_fast",
    "level_of",
    "mean_roofline_fraction",
    "outcomes",
    "pass_at_k",
    "roofline",
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


def is_fast(result: Result, p: float, baseline: str) -> bool:
    """Correct AND speedup against `baseline` strictly greater than p (no speedup -> not fast)."""
    if not result.correct:
        return False
    s = result.speedups.get(baseline)
    return s is not None and not math.isnan(s) and s > p


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


def mean_roofline_fraction(results: Iterable[Result]) -> float | None:
    """Mean of ``extra["roofline"]["fraction"]`` over the correct samples that carry one."""
    vals = []
    for r in results:
        if not r.correct:
            continue
        f = (r.extra.get("roofline") or {}).get("fraction")
        if isinstance(f, int | float) and not isinstance(f, bool) and math.isfinite(f):
            vals.append(float(f))
    return sum(vals) / len(vals) if vals else None


@dataclass(frozen=True)
class Roofline:
    achieved_flops: float  # FLOP/s
    achieved_bw: float  # bytes/s
    intensity: float | None  # FLOP/byte; None when bytes == 0 (inf intensity)
    attainable_flops: float | None  # min of the known roofs; None when no roof applies
    fraction: float | None  # achieved / attainable (memory-bound ops: achieved_bw / peak_bw)
    bound: str | None  # "compute" | "memory" | None (unknown)

    def to_dict(self) -> dict:
        return {
            "achieved_flops": self.achieved_flops,
            "achieved_bw": self.achieved_bw,
            "intensity": self.intensity,
            "attainable_flops": self.attainable_flops,
            "fraction": self.fraction,
            "bound": self.bound,
        }


def roofline(
    flops: float,
    bytes: float,  # mirrors Result.bytes
    seconds: float,
    peak_flops: float | None = None,
    peak_bw: float | None = None,
) -> Roofline:
    """Where one run sits under the roofline of a device (see the module docstring).

    Missing peaks (None) drop that roof: with only one roof known, `attainable_flops` is that
    roof; with none, it and `fraction` are None. Zero-flop ops are measured against the memory
    roof only (`fraction = achieved_bw / peak_bw`, `attainable_flops` = 0).
    """
    if not seconds or seconds <= 0 or not math.isfinite(seconds):
        raise ValueError(f"roofline needs a positive run time, got {seconds!r}")
    if flops < 0 or bytes < 0:
        raise ValueError(f"roofline needs non-negative flops and bytes, got {flops}, {bytes}")
    achieved_flops = flops / seconds
    achieved_bw = bytes / seconds
    intensity = flops / bytes if bytes > 0 else None

    if flops == 0:  # pure data movement: only the memory roof means anything
        fraction = achieved_bw / peak_bw if peak_bw and bytes > 0 else None
        return Roofline(achieved_flops, achieved_bw, intensity, 0.0, fraction, "memory")

    memory_roof = intensity * peak_bw if (peak_bw and intensity is not None) else None
    roofs = [r for r in (peak_flops or None, memory_roof) if r is not None]
    attainable = min(roofs) if roofs else None
    fraction = achieved_flops / attainable if attainable else None
    if peak_flops and memory_roof is not None:
        bound = "memory" if memory_roof < peak_flops else "compute"
    elif peak_flops and bytes == 0:
        bound = "compute"
    else:
        bound = None
    return Roofline(achieved_flops, achieved_bw, intensity, attainable, fraction, bound)
