"""One timing protocol for everything that is compared.

Each contender exposes run(number) -> seconds per call over `number` back-to-back calls.
1. warm-up: each contender runs until `warmup_ms` has passed;
2. calibration: `number` per contender so that one round lasts at least `min_repeat_ms`;
3. `rounds` rounds, interleaved: in every round each contender runs once, in a rotating order;
4. per contender: median of the rounds, interquartile range, min, max.
The candidate and its baselines are measured by the same process in the same run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .result import Timing


@dataclass(frozen=True)
class TimingConfig:
    warmup_ms: float = 50.0
    min_repeat_ms: float = 20.0
    rounds: int = 15

    @classmethod
    def quick(cls) -> TimingConfig:
        return cls(warmup_ms=2.0, min_repeat_ms=1.0, rounds=3)


def python_timer(fn: Callable[[], object]) -> Callable[[int], float]:
    """Wraps a Python callable (e.g. an ONNX Runtime session run) as a contender."""

    def run(number: int) -> float:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        return (time.perf_counter() - t0) / number

    return run


def _calibrate(run: Callable[[int], float], min_repeat_ms: float) -> int:
    number = 1
    while True:
        per_call = run(number)
        total_ms = per_call * number * 1e3
        if total_ms >= min_repeat_ms or number >= 1 << 20:
            return number
        grow = min_repeat_ms / max(total_ms, 1e-6) * 1.2
        number = max(number * 2, int(number * grow) + 1)


def time_interleaved(contenders: dict[str, Callable[[int], float]], cfg: TimingConfig) -> dict[str, Timing]:
    names = list(contenders)
    for name in names:  # warm-up
        t_end = time.perf_counter() + cfg.warmup_ms / 1e3
        while time.perf_counter() < t_end:
            contenders[name](1)
    numbers = {n: _calibrate(contenders[n], cfg.min_repeat_ms) for n in names}
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(cfg.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for n in order:
            samples[n].append(contenders[n](numbers[n]))
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
        )
    return out
