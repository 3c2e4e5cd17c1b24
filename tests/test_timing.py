"""The timing protocol's statistics: paired speedups, their confidence intervals, and the verdicts."""

from __future__ import annotations

import ast
import math
import time

import numpy as np
import pytest

from edgekernelbench.harness.timing import TimingConfig, median_ci, paired_speedup, time_interleaved
from edgekernelbench.metrics import fast_at_k, is_fast, ties, verdict
from edgekernelbench.records import Result, Timing


def timing(samples):
    s = np.asarray(samples, dtype=float)
    return Timing(float(np.median(s)), 0.0, float(s.min()), float(s.max()), len(s), 1, [float(x) for x in s])


def test_median_ci_order_statistics():
    # n = 15: P(B <= 3) = 576 / 2^15, so [x_4, x_12] covers the median with 96.5 %; [x_5, x_11] would not
    assert median_ci(range(1, 16)) == (4.0, 12.0)
    assert median_ci(range(1, 52)) == (19.0, 33.0)
    # too few values for 95 %: the whole range, never a narrower interval than the data allow
    assert median_ci([3.0, 1.0, 2.0]) == (1.0, 3.0)
    assert median_ci([5.0]) == (5.0, 5.0)
    with pytest.raises(ValueError):
        median_ci([])


def test_median_ci_covers_the_median_at_the_stated_rate():
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(2000):
        lo, hi = median_ci(rng.lognormal(0.0, 0.3, 21))
        hits += lo <= 1.0 <= hi  # the lognormal's median is exp(0) = 1
    assert 0.94 <= hits / 2000 <= 0.995


def test_paired_speedup_cancels_a_shared_drift():
    # the machine slows down 3x over the run; in every round the baseline takes 2x the candidate
    drift = np.linspace(1.0, 3.0, 15)
    cand, base = timing(1e-5 * drift), timing(2e-5 * drift)
    s, lo, hi = paired_speedup(base, cand)
    assert s == pytest.approx(2.0) and lo == pytest.approx(2.0) and hi == pytest.approx(2.0)


def test_paired_speedup_interval_contains_one_for_equal_code():
    rng = np.random.default_rng(1)
    cand = timing(1e-5 * rng.lognormal(0, 0.05, 15))
    base = timing(1e-5 * rng.lognormal(0, 0.05, 15))
    s, lo, hi = paired_speedup(base, cand)
    assert lo < 1.0 < hi and lo <= s <= hi


def test_paired_speedup_without_samples_is_the_ratio_of_medians():
    s, lo, hi = paired_speedup(Timing(3e-5, 0, 3e-5, 3e-5, 1, 1), Timing(1e-5, 0, 1e-5, 1e-5, 1, 1))
    assert (s, lo, hi) == pytest.approx((3.0, 3.0, 3.0))


def test_time_interleaved_keeps_the_rounds():
    calls = {"a": 0, "b": 0}

    def contender(name):
        def run(number):
            calls[name] += number
            return 1e-3

        return run

    t = time_interleaved({"a": contender("a"), "b": contender("b")}, TimingConfig(0.0, 0.0, 7))
    assert t["a"].count == 7 and len(t["a"].samples) == 7 and len(t["b"].samples) == 7


def test_rounds_are_added_while_the_pair_disagrees():
    """With max_rounds, rounds are added `rounds` at a time while the paired ratio's interval is wider than
    WIDE_CI of it, up to max_rounds: a quiet pair stops at `rounds`; a pair whose rounds disagree (every
    other round of the candidate slowed by a neighbour) gets more, and stops once they agree."""
    from edgekernelbench.harness.timing import WIDE_CI

    def contender(times):
        seq = iter(times)
        return lambda number: next(seq)

    def run(cand, base, rounds=9, max_rounds=27):
        cfg = TimingConfig(0.0, 0.0, rounds, max_rounds)
        # calibration: CALIBRATION_TRIES calls of each at number 1 (0 ms rounds: already long enough)
        t = time_interleaved(
            {"candidate": contender([1e-3] * 3 + cand), "base": contender([2e-3] * 3 + base)}, cfg
        )
        return t["candidate"].count

    quiet = [1e-3] * 27
    assert run(quiet, [2e-3] * 27) == 9
    noisy = [1e-3 if i % 2 else 1.6e-3 for i in range(27)]
    assert run(noisy, [2e-3] * 27) == 27  # the interval stays [1.25, 2.0]
    settles = [1.6e-3 if i in (0, 3, 6) else 1e-3 for i in range(27)]  # 3 slow rounds: resolved after 18
    assert run(settles, [2e-3] * 27) == 18
    assert run(noisy, [2e-3] * 27, max_rounds=0) == 9  # without max_rounds: exactly `rounds`
    assert WIDE_CI < 0.25  # (1.25, 2.0) around 2 is wide; a 2% decision needs far less


def result(speedup, ci=None, correct=True, problem="L1/a", sample=0):
    return Result(
        problem,
        sample,
        "llvm",
        compiled=True,
        correct=correct,
        speedups={"tvm-default": speedup},
        speedup_ci={"tvm-default": list(ci)} if ci else {},
    )


@pytest.mark.parametrize(
    "speedup, ci, expected",
    [
        (1.30, (1.20, 1.40), "fast"),
        (1.03, (0.97, 1.08), "tie"),  # point estimate above 1, but not with confidence
        (0.97, (0.94, 1.01), "tie"),
        (0.80, (0.75, 0.85), "slow"),
        (1.03, None, "fast"),  # an old record without an interval: its point estimate
        (1.00, None, "slow"),
    ],
)
def test_verdict(speedup, ci, expected):
    assert verdict(result(speedup, ci), 1.0, "tvm-default") == expected
    assert is_fast(result(speedup, ci), 1.0, "tvm-default") == (expected == "fast")


def test_verdict_needs_a_correct_sample_with_a_speedup():
    assert verdict(result(2.0, (1.9, 2.1), correct=False), 1.0, "tvm-default") is None
    assert verdict(result(2.0, (1.9, 2.1)), 1.0, "onnxruntime") is None
    assert verdict(result(math.nan), 1.0, "tvm-default") is None


def test_ties_are_not_fast_and_are_counted():
    rs = [
        result(1.3, (1.2, 1.4), problem="L1/a"),
        result(1.02, (0.98, 1.05), problem="L1/b"),
        result(0.9, (0.85, 0.95), problem="L1/c"),
    ]
    assert fast_at_k(rs, 1.0, "tvm-default").value == pytest.approx(1 / 3)
    assert ties(rs, 1.0, "tvm-default") == 1
    assert ties(rs, 0.0, "tvm-default") == 0


def test_machine_watch_sees_a_busy_neighbour_cpu():
    import os
    import subprocess
    import sys

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or len(cpus) > 8:
        pytest.skip("needs 2-8 CPUs")
    mine, others = cpus[0], cpus[1:]
    spin = "import os, sys, time\nos.sched_setaffinity(0, {int(sys.argv[1])})\nt = time.time()\nwhile time.time() - t < 3: pass"
    procs = [subprocess.Popen([sys.executable, "-c", spin, str(c)]) for c in others]
    script = (
        "import os, time\nfrom edgekernelbench.harness.timing import MachineWatch\n"
        f"os.sched_setaffinity(0, {{{mine}}})\ntime.sleep(0.5)\n"
        "with MachineWatch() as w:\n    time.sleep(1.0)\nprint(w.summary())"
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        ).stdout
    finally:
        for p in procs:
            p.kill()
    summary = ast.literal_eval(out)  # a dict printed by the child
    assert summary["cpus"] == [mine] and summary["disturbed"] and summary["other_cpus_busy"] > 0.5


def test_pin_thread_pins_the_calling_thread_to_its_cpu():
    import subprocess
    import sys

    script = (
        "import os\nfrom edgekernelbench.harness.timing import pin_thread\n"
        "cpu = pin_thread()\nprint(cpu, sorted(os.sched_getaffinity(0)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split(maxsplit=1)
    assert out[0] != "None" and ast.literal_eval(out[1]) == [int(out[0])]


def test_calibration_is_not_fooled_by_a_transient_delay():
    """A round trip that spikes (a loaded machine) on one measurement must not stop the calibration at a
    `number` so small that each round is mostly that delay."""
    from edgekernelbench.harness import timing

    calls = []

    def run(number: int) -> float:  # a 1 us kernel behind a 50 us round trip; one 5 ms spike
        calls.append(number)
        delay = 5e-3 if len(calls) == 2 else 50e-6
        return (delay + number * 1e-6) / number

    n = timing._calibrate(run, min_repeat_ms=2.0)
    assert n * 1e-6 >= 1.5e-3, n  # the kernel's own work fills the round, not the spike


def test_calibration_counts_toward_the_warm_up_and_short_steps_end_early():
    """A step of the calibration whose first try is already shorter than `min_repeat_ms` grows at once (its
    fastest try could only be shorter); the final step still takes CALIBRATION_TRIES tries. The
    calibration runs the contender, so only what is left of `warmup_ms` after it is spent warming up."""
    from edgekernelbench.harness import timing

    def contender(per_call):
        calls = []

        def run(number):
            calls.append(number)
            time.sleep(per_call * number)
            return per_call

        return run, calls

    run, calls = contender(1e-4)  # 0.1 ms per call, 5 ms rounds
    n = timing._calibrate(run, min_repeat_ms=5.0)
    assert n * 1e-4 >= 5e-3 and calls.count(n) == timing.CALIBRATION_TRIES
    assert all(calls.count(k) == 1 for k in calls if k != n)  # the short steps: one try each
    long_cal, calls_long = contender(1e-4)  # calibration (~20 ms) longer than the warm-up: none left
    short_cal, calls_short = contender(1e-4)
    time_interleaved({"a": long_cal}, TimingConfig(warmup_ms=1.0, min_repeat_ms=5.0, rounds=1))
    time_interleaved({"a": short_cal}, TimingConfig(warmup_ms=200.0, min_repeat_ms=5.0, rounds=1))
    assert calls_long.count(1) == 1  # the calibration's first try only
    assert calls_short.count(1) > 100  # ~180 ms of single calls after a ~20 ms calibration


def test_a_contender_behind_a_request_gets_rounds_that_amortise_its_cost():
    """A contender timed around a request (the candidate in its runner process) reports the request's fixed
    cost; its rounds last at least `overheads_per_round` of it (capped), so a 0.5 ms cost is ~1% of a round
    instead of 5% of a 10 ms one. A contender without one, and the search's protocol, keep `min_repeat_ms`."""
    from edgekernelbench.harness import timing

    def contender(trip: float | None):
        numbers = []

        def run(number: int) -> float:  # a 1 ms call behind the round trip, no real sleep
            numbers.append(number)
            return ((trip or 0.0) + number * 1e-3) / number

        if trip is not None:
            run.request_overhead_s = trip
        return run, numbers

    cfg = TimingConfig(warmup_ms=0.0, min_repeat_ms=10.0, rounds=3)
    proxy, proxy_numbers = contender(0.5e-3)
    local, local_numbers = contender(None)
    out = time_interleaved({"candidate": proxy, "baseline": local}, cfg)
    assert timing.min_round_ms(proxy, cfg) == pytest.approx(50.0)
    assert out["candidate"].number * 1e-3 >= 50e-3  # the 0.5 ms cost is <= 1% of each round
    assert 10 <= out["baseline"].number < 20  # unchanged: 10 ms rounds
    assert set(proxy_numbers[-3:]) == {out["candidate"].number}
    slow, _ = contender(10e-3)  # a slow channel (or a candidate slowing it) gets long rounds, capped
    assert timing.min_round_ms(slow, cfg) == timing.MAX_ROUND_MS
    assert timing.min_round_ms(proxy, TimingConfig.search()) == TimingConfig.search().min_repeat_ms
