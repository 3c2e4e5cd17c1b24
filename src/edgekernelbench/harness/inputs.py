"""What the judge feeds a candidate: inputs nobody can predict, typical and stress distributions.

A judgment's inputs all come from one seed that the judge draws from the OS (`fresh_seed`) after the
candidate's processes started, and records in the result after the verdict (`ekb eval --seed` replays
it). From that seed, independent streams (numpy SeedSequence [seed, tag, purpose, index]) give:

- the correctness trials (`InputPlan.trial`): the first in the problem's typical distribution (its
  InputSpecs), then each stress distribution its inputs allow (`stress_kinds`), then typical again up to
  the number of trials asked for (at least one per stress kind);
- the timing sets (`InputPlan.timing_sets`): several typical sets, none equal to a trial's, that the
  timed calls take in turn (backends/call_loop.py);
- the choice of which timed calls are checked, and the sentinel written before them (harness/evaluate.py).

The stress distributions, per input (an input a kind does not apply to keeps its typical draw):
- "large": a real-valued input drawn from N(0, s^2) (unbounded domain) scaled by LARGE: softmax and
  log-sum inputs far from 0 (exp overflows float32 past 88.7), GEMM and convolution operands far from
  unit scale, quantizer inputs past the int8 range (saturation);
- "extremes": a bounded input (integers, or a uniform float range) at the ends of its range only, with
  some zeros where 0 is inside it: int8 at -128 / 127, uint8 at 0 / 255 (where a u8 x s8 product pair
  saturates 16 bits);
- "ties": values on a coarse grid (a power of two near a quarter of the typical scale), a fraction of
  them exactly 0: exact ties for max / argmax / pooling and rounding, exact zeros at ReLU's and division's
  edges;
- "constant_rows": every row (the last axis) one value of that grid: a variance of exactly 0 for a
  normalization (grid values sum exactly in any order), a uniform softmax row.

A trial counts only where the oracle's own outputs are finite (harness/evaluate.py); there, a candidate
that returns NaN or infinity is wrong. The problem's tolerance stays (atol, rtol), with atol taken at the
output's scale: |got - want| <= atol * max(1, rms(want) / rms(typical want)) + rtol * |want| -- a GEMM of
operands 64x larger has outputs 4096x larger, whose float32 rounding in another summation order is 4096x
larger too.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import numpy as np

TYPICAL = "typical"
STRESS_KINDS = ("large", "extremes", "ties", "constant_rows")
LARGE = 64.0  # "large": N(0, s^2) inputs scaled by this (a softmax logit of std 2 -> 128)
TIES_GRID = 4  # "ties", "constant_rows": values on a grid of about (typical scale) / TIES_GRID
TIES_ZEROS = 0.25  # "ties": this share of the values exactly 0 (where 0 is in the domain)
_TAG = 0x1E7B  # the judge's streams (Problem.sample_inputs keeps its own, for the tools outside the judge)
_TRIAL, _TIMING, _SCHEDULE = 1, 2, 3


def fresh_seed() -> int:
    """A judgment's seed: 63 bits from the OS, unknown to anything before it is drawn."""
    return secrets.randbits(63)


def _unbounded(spec) -> bool:
    return spec.dist == "normal" and np.issubdtype(np.dtype(spec.dtype), np.floating)


def _bounded(spec) -> bool:
    return spec.dist in ("int", "uniform")


def stress_kinds(specs) -> tuple[str, ...]:
    """The stress distributions some input of `specs` (a problem's InputSpecs) allows, in STRESS_KINDS
    order."""
    kinds = []
    if any(_unbounded(s) for s in specs):
        kinds.append("large")
    if any(_bounded(s) for s in specs):
        kinds.append("extremes")
    kinds.append("ties")
    if any(len(s.shape) >= 1 and s.shape[-1] > 1 for s in specs):
        kinds.append("constant_rows")
    return tuple(kinds)


def _grid(spec) -> tuple[float, float, float]:
    """(step, low, high) of the grid of one input's "ties" and "constant_rows" values: a power of two near
    a quarter of its typical scale (integers: at least 1), inside its range. Values on it are dyadic
    rationals, whose sums, squares and means in float32 are exact: a row of equal values has a mean equal
    to them and a variance of exactly 0 in every summation order. (A constant row of arbitrary floats does
    not: its computed variance is rounding error, which a layer norm with eps 1e-12 blows up into outputs
    that differ between two correct implementations.)"""
    width = spec.scale if spec.dist == "normal" else (spec.high - spec.low) / 2
    step = 2.0 ** np.floor(np.log2(width / TIES_GRID)) if width > 0 else 0.0
    if spec.dist == "int":
        step = max(1.0, step)
    if spec.dist == "normal":
        return step, -np.inf, np.inf
    return step, spec.low, spec.high


def _on_grid(spec, x: np.ndarray) -> np.ndarray:
    step, low, high = _grid(spec)
    if step > 0:
        x = np.round(x.astype(np.float64) / step) * step
    return np.clip(x, low, high)


def draw(spec, kind: str, rng: np.random.Generator) -> np.ndarray:
    """One input drawn from its `kind` of distribution (TYPICAL or one of STRESS_KINDS)."""
    x = spec.sample(rng)
    if kind == TYPICAL:
        return x
    if kind == "large":
        return (x * LARGE).astype(spec.dtype) if _unbounded(spec) else x
    if kind == "extremes":
        if not _bounded(spec):
            return x
        ends = [spec.low, spec.high] + ([0] if spec.low < 0 < spec.high else [])
        weights = [0.45, 0.45, 0.1][: len(ends)]
        return rng.choice(np.asarray(ends), size=spec.shape, p=np.asarray(weights) / sum(weights)).astype(
            spec.dtype
        )
    if kind == "ties":
        x = _on_grid(spec, x)
        if spec.dist == "normal" or spec.low <= 0 <= spec.high:
            x = np.where(rng.random(spec.shape) < TIES_ZEROS, 0, x)
        return np.asarray(x).astype(spec.dtype)
    if kind == "constant_rows":
        if len(spec.shape) >= 1 and spec.shape[-1] > 1:
            row = _on_grid(spec, x[..., :1])
            return np.ascontiguousarray(np.broadcast_to(row, x.shape)).astype(spec.dtype)
        return x
    raise ValueError(f"unknown input distribution kind {kind!r}")


@dataclass(frozen=True)
class Trial:
    index: int
    kind: str  # TYPICAL or a stress kind
    inputs: dict[str, np.ndarray]


class InputPlan:
    """Every input of one judgment, from its seed (see the module docstring)."""

    def __init__(self, problem, seed: int, trials: int, timing_sets: int = 3):
        self.problem, self.seed = problem, int(seed)
        specs = problem.inputs
        stress = stress_kinds(specs)
        count = max(int(trials), 1 + len(stress)) if trials > 0 else 0
        kinds = [TYPICAL, *stress]
        self.kinds: list[str] = (kinds + [TYPICAL] * count)[:count]
        self.n_timing_sets = max(1, int(timing_sets))

    def rng(self, purpose: int, index: int = 0) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence([self.seed, _TAG, purpose, index]))

    def trial(self, t: int) -> Trial:
        rng = self.rng(_TRIAL, t)
        kind = self.kinds[t]
        return Trial(t, kind, {s.name: draw(s, kind, rng) for s in self.problem.inputs})

    def trials(self):
        for t in range(len(self.kinds)):
            yield self.trial(t)

    def timing_sets(self) -> list[dict[str, np.ndarray]]:
        """The timed calls' inputs: typical, from streams of their own (none is a trial's)."""
        out = []
        for k in range(self.n_timing_sets):
            rng = self.rng(_TIMING, k)
            out.append({s.name: draw(s, TYPICAL, rng) for s in self.problem.inputs})
        return out

    def schedule_rng(self) -> np.random.Generator:
        """For the judge's choice of checked calls and their sentinels."""
        return self.rng(_SCHEDULE)


def output_scales(expected: list[np.ndarray], typical: list[np.ndarray] | None) -> list[float]:
    """Per output, max(1, rms(expected) / rms(typical)): the factor on atol for a trial whose outputs are
    larger than the typical trial's (module docstring)."""
    if typical is None:
        return [1.0] * len(expected)
    out = []
    for e, t in zip(expected, typical, strict=False):
        rms_e = float(np.sqrt(np.mean(np.square(e.astype(np.float64))))) if e.size else 0.0
        rms_t = float(np.sqrt(np.mean(np.square(t.astype(np.float64))))) if t.size else 0.0
        out.append(max(1.0, rms_e / rms_t) if rms_t > 0 and np.isfinite(rms_e) else 1.0)
    return out + [1.0] * (len(expected) - len(out))
