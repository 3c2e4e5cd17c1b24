"""Metrics against hand-computed values."""

from __future__ import annotations

import math

import pytest

from edgekernelbench.harness.result import Result
from edgekernelbench.metrics import (
    Aggregate,
    compile_at_k,
    correct_at_k,
    fast_at_k,
    geomean_speedup,
    is_fast,
    level_of,
    mean_roofline_fraction,
    outcomes,
    pass_at_k,
    roofline,
)


def res(problem="L1/a", sample=0, correct=True, compiled=True, speedups=None, backend="llvm", **kw):
    return Result(
        problem=problem,
        sample=sample,
        backend=backend,
        compiled=compiled or correct,
        correct=correct,
        speedups=dict(speedups or {}),
        **kw,
    )


# --- pass@k --------------------------------------------------------------------------------------


def test_pass_at_k_hand_values():
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2) = 0.7
    assert pass_at_k(10, 0, 3) == 0.0
    assert pass_at_k(3, 3, 2) == 1.0
    assert pass_at_k(4, 2, 3) == 1.0  # n - c < k: every 3-draw has a success
    assert pass_at_k(1, 0, 1) == 0.0
    assert pass_at_k(1, 1, 1) == 1.0


def test_pass_at_k_matches_comb_form():
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_pass_at_k_large_n_is_stable():
    v = pass_at_k(10_000, 1, 100)
    assert v == pytest.approx(0.01)


@pytest.mark.parametrize("n,c,k", [(2, 1, 3), (3, 4, 1), (3, -1, 1), (3, 1, 0)])
def test_pass_at_k_rejects_bad_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


# --- per problem aggregates ----------------------------------------------------------------------


def test_level_of():
    assert level_of("L1/dwconv3x3_kws") == 1
    assert level_of("L12/x") == 12
    assert level_of("dwconv") is None


def test_correct_at_1_two_problems():
    rs = [
        res("L1/a", 0, correct=True),
        res("L1/a", 1, correct=False),
        res("L2/b", 0, correct=True),
        res("L2/b", 1, correct=True),
    ]
    agg = correct_at_k(rs, 1)
    assert agg == Aggregate(pytest.approx(0.75), 2, 0)


def test_compile_at_1():
    rs = [
        res("L1/a", 0, correct=False, compiled=True),
        res("L1/a", 1, correct=False, compiled=False),
        res("L1/b", 0, correct=False, compiled=False),
    ]
    assert compile_at_k(rs, 1).value == pytest.approx(0.25)


def test_problems_with_fewer_than_k_samples_are_skipped():
    rs = [res("L1/a", 0), res("L1/a", 1, correct=False), res("L1/b", 0)]
    agg = correct_at_k(rs, 2)
    assert agg.problems == 1 and agg.skipped == 1
    assert agg.value == pytest.approx(1.0)  # pass@2(2, 1) = 1
    none = correct_at_k([res("L1/a", 0)], 2)
    assert none.value is None and none.skipped == 1


def test_fast_strictness():
    exact = res("L1/a", 0, speedups={"ort": 1.0})
    above = res("L1/a", 1, speedups={"ort": 1.0001})
    wrong_fast = res("L1/a", 2, correct=False, speedups={"ort": 50.0})
    unmeasured = res("L1/a", 3, speedups={})
    assert not is_fast(exact, 1.0, "ort")
    assert is_fast(above, 1.0, "ort")
    assert not is_fast(wrong_fast, 1.0, "ort")
    assert not is_fast(unmeasured, 0.0, "ort")
    assert not is_fast(above, 1.0, "tvm-default")  # no speedup for that baseline
    rs = [exact, above, wrong_fast, unmeasured]
    assert fast_at_k(rs, 1.0, "ort").value == pytest.approx(0.25)
    assert fast_at_k(rs, 0.0, "ort").value == pytest.approx(0.5)
    assert fast_at_k(rs, 1.0, "tvm-default").value == 0.0
    assert outcomes(rs)["L1/a"].c_fast(1.0, "ort") == 1


def test_fast_at_k_mean_over_problems():
    rs = [
        res("L1/a", 0, speedups={"b": 2.0}),
        res("L1/a", 1, speedups={"b": 0.5}),
        res("L1/b", 0, speedups={"b": 3.0}),
    ]
    assert fast_at_k(rs, 1.0, "b").value == pytest.approx((0.5 + 1.0) / 2)
    assert fast_at_k(rs, 1.0, "b", k=2) == Aggregate(1.0, 1, 1)


def test_outcomes_refuse_mixed_backends_and_duplicates():
    with pytest.raises(ValueError, match="backend"):
        outcomes([res(backend="llvm"), res(sample=1, backend="cuda")])
    with pytest.raises(ValueError, match="duplicate"):
        outcomes([res(), res()])


def test_geomean():
    rs = [
        res("L1/a", 0, speedups={"b": 2.0}),
        res("L1/b", 0, speedups={"b": 8.0}),
        res("L1/c", 0, correct=False, speedups={"b": 1000.0}),  # incorrect: ignored
        res("L1/d", 0, speedups={"other": 3.0}),  # no speedup vs b: ignored
    ]
    assert geomean_speedup(rs, "b") == pytest.approx(4.0)
    assert geomean_speedup(rs, "other") == pytest.approx(3.0)
    assert geomean_speedup(rs, "missing") is None
    assert geomean_speedup([], "b") is None


def test_mean_roofline_fraction():
    rs = [
        res("L1/a", 0, extra={"roofline": {"fraction": 0.2}}),
        res("L1/a", 1, extra={"roofline": {"fraction": 0.4}}),
        res("L1/a", 2, correct=False, extra={"roofline": {"fraction": 0.9}}),
        res("L1/a", 3),
    ]
    assert mean_roofline_fraction(rs) == pytest.approx(0.3)
    assert mean_roofline_fraction([res()]) is None


# --- roofline ------------------------------------------------------------------------------------


def test_roofline_compute_bound():
    # 2 GFLOP over 10 MB in 10 ms; peaks 1 TFLOP/s and 100 GB/s.
    # intensity = 200 FLOP/B, memory roof = 200 * 1e11 = 2e13 > 1e12 -> compute bound.
    r = roofline(2e9, 1e7, 0.01, peak_flops=1e12, peak_bw=1e11)
    assert r.achieved_flops == pytest.approx(2e11)
    assert r.achieved_bw == pytest.approx(1e9)
    assert r.intensity == pytest.approx(200.0)
    assert r.attainable_flops == pytest.approx(1e12)
    assert r.fraction == pytest.approx(0.2)
    assert r.bound == "compute"


def test_roofline_memory_bound():
    # 1 MFLOP over 4 MB in 1 ms; intensity 0.25 FLOP/B; memory roof 0.25 * 1e11 = 2.5e10 < 1e12.
    r = roofline(1e6, 4e6, 1e-3, peak_flops=1e12, peak_bw=1e11)
    assert r.achieved_flops == pytest.approx(1e9)
    assert r.achieved_bw == pytest.approx(4e9)
    assert r.intensity == pytest.approx(0.25)
    assert r.attainable_flops == pytest.approx(2.5e10)
    assert r.fraction == pytest.approx(0.04)  # 1e9 / 2.5e10, also = achieved_bw / peak_bw
    assert r.bound == "memory"


def test_roofline_zero_flops_and_missing_peaks():
    copy = roofline(0, 8e6, 1e-3, peak_flops=1e12, peak_bw=1e11)  # 8 GB/s of 100 GB/s
    assert copy.fraction == pytest.approx(0.08)
    assert copy.bound == "memory"
    assert roofline(0, 8e6, 1e-3).fraction is None

    bare = roofline(2e9, 1e7, 0.01)
    assert bare.achieved_flops == pytest.approx(2e11)
    assert bare.attainable_flops is None and bare.fraction is None and bare.bound is None

    only_compute = roofline(2e9, 1e7, 0.01, peak_flops=1e12)
    assert only_compute.fraction == pytest.approx(0.2)
    only_bw = roofline(1e6, 4e6, 1e-3, peak_bw=1e11)
    assert only_bw.fraction == pytest.approx(0.04)

    with pytest.raises(ValueError):
        roofline(1, 1, 0.0)
