"""Metrics against hand-computed values."""

from __future__ import annotations

import math

import pytest

from edgekernelbench.metrics import (
    Aggregate,
    compile_at_k,
    correct_at_k,
    fast_at_k,
    geomean_speedup,
    is_fast,
    level_of,
    mean_roofline_fraction,
    memory_level,
    mix_bandwidth,
    outcomes,
    pass_at_k,
    roofline,
    roofline_flags,
)
from edgekernelbench.records import Result, Roofline


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


def roof(fraction, **kw):
    return Roofline(1.0, 1.0, None, None, fraction, None, **kw)


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
        res("L1/a", 0, roofline=roof(0.2)),
        res("L1/a", 1, roofline=roof(0.4)),
        res("L1/a", 2, correct=False, roofline=roof(0.9)),
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


# --- roofline: memory levels, flags -----------------------------------------------------------------

KIB, MIB = 2**10, 2**20
# a peak record's levels, deliberately out of order: memory_level sorts them by capacity
LEVELS = [
    {"level": "DRAM", "capacity": None, "bandwidth": 10e9},
    {"level": "L2", "capacity": 2 * MIB, "bandwidth": 70e9},
    {"level": "L1d", "capacity": 48 * KIB, "bandwidth": 300e9},
    {"level": "L3", "capacity": 100 * MIB, "bandwidth": 20e9},
]


@pytest.mark.parametrize(
    "working_set, level, own, below",
    [
        (10 * KIB, "L1d", 300e9, None),
        (48 * KIB, "L1d", 300e9, None),  # exactly the capacity still fits
        (64 * KIB, "L2", 70e9, 300e9),
        (3 * MIB, "L3", 20e9, 70e9),
        (200 * MIB, "DRAM", 10e9, 20e9),
    ],
)
def test_roofline_takes_the_roof_of_the_level_the_working_set_fits_in(working_set, level, own, below):
    name, roof = memory_level(working_set, LEVELS)
    assert name == level
    if below is None:  # all of it inside the fastest level: that level's roof
        assert roof == own
    else:  # the part the faster levels hold goes faster: between this level's roof and the one below
        assert own < roof < below
    # a copy (no FLOPs) of that working set in 1 ms: its bandwidth against that roof
    r = roofline(0, working_set, 1e-3, peak_flops=1e12, peak_bw=10e9, levels=LEVELS)
    assert (r.level, r.peak_bw) == (level, roof)
    assert r.fraction == pytest.approx(working_set / 1e-3 / roof)
    assert r.to_dict()["level"] == level and r.to_dict()["peak_bw"] == roof
    # with FLOPs: the memory roof is intensity x that bandwidth
    m = roofline(working_set / 4, working_set, 1e-3, peak_flops=1e15, levels=LEVELS)
    assert m.bound == "memory" and m.attainable_flops == pytest.approx(0.25 * roof)


def test_the_faster_levels_serve_the_share_of_the_working_set_they_hold():
    levels = [
        {"level": "A", "capacity": 1000, "bandwidth": 400e9},
        {"level": "B", "capacity": 4000, "bandwidth": 100e9},
        {"level": "DRAM", "capacity": None, "bandwidth": 10e9},
    ]
    # 2000 B: half in A, half in B: 1 / (0.5 / 400e9 + 0.5 / 100e9) = 160e9
    assert memory_level(2000, levels) == ("B", pytest.approx(160e9))
    # 8000 B: 1/8 in A, 3/8 in B, 1/2 in DRAM: 1 / (0.125 / 400e9 + 0.375 / 100e9 + 0.5 / 10e9)
    assert memory_level(8000, levels) == ("DRAM", pytest.approx(1 / 0.0540625e-9))
    assert memory_level(1000, levels) == ("A", 400e9)


def test_memory_level_edges():
    bounded = [lv for lv in LEVELS if lv["capacity"]]
    assert memory_level(1e12, bounded) == ("L3", pytest.approx(20e9, rel=1e-4))  # past every capacity
    assert memory_level(1, []) is None
    assert memory_level(1, [{"level": "L1d", "capacity": 1, "bandwidth": 0.0}]) is None
    # one figure for every size (a record from before levels): the "memory" roof
    old = roofline(0, 10 * KIB, 1e-3, peak_bw=10e9)
    assert (old.level, old.peak_bw) == ("memory", 10e9) and old.fraction == pytest.approx(0.001024)
    assert roofline(0, 10 * KIB, 1e-3, peak_bw=10e9, levels=[]).level == "memory"
    assert roofline(2e9, 1e7, 0.01, peak_flops=1e12).level is None


def test_mix_bandwidth_weighs_reads_and_writes():
    lv = {"level": "L2", "capacity": 2 * MIB, "bandwidth": 60e9, "read_bandwidth": 120e9}
    assert mix_bandwidth(lv, 1000, 0) == pytest.approx(120e9)  # read-only: the read figure
    assert mix_bandwidth(lv, 1000, 500) == pytest.approx(60e9)  # as much written as read: the stream
    # 1/W = 2/60e9 - 1/120e9 = 1/40e9; 750 read, 250 written: 1000 / (750/120e9 + 250/40e9) = 80e9
    assert mix_bandwidth(lv, 1000, 250) == pytest.approx(80e9)
    assert mix_bandwidth(lv, 1000, None) == pytest.approx(120e9)  # split unknown: the larger figure
    assert mix_bandwidth({"bandwidth": 60e9}, 1000, 0) == 60e9  # no read figure (older record)
    noisy = {"bandwidth": 60e9, "read_bandwidth": 20e9}  # 2/C - 1/R < 0: no positive write cost
    assert mix_bandwidth(noisy, 1000, 100) == 60e9
    # writes cost more than reads: a write-heavy kernel's roof is below C, but C stays the floor
    assert mix_bandwidth(lv, 1000, 1000) == pytest.approx(60e9)
    slow_reader = {"bandwidth": 60e9, "read_bandwidth": 40e9}  # the read kernel fell short of the stream
    assert mix_bandwidth(slow_reader, 1000, 0) == 60e9
    # through roofline: a GEMV-like read-only kernel at 100 GB/s is under the L2 read roof
    levels = [dict(lv), {"level": "DRAM", "capacity": None, "bandwidth": 10e9, "read_bandwidth": 12e9}]
    r = roofline(0.5e5, 1e5, 1e-6, peak_flops=1e12, levels=levels, bytes_written=0)
    assert r.level == "L2" and r.peak_bw == pytest.approx(120e9) and r.flag is None
    assert r.fraction == pytest.approx(100e9 / 120e9)
    assert roofline(0.5e5, 1e5, 1e-6, peak_flops=1e12, levels=levels, bytes_written=5e4).flag == "above_roof"


def test_roofline_above_the_roof_is_flagged_with_a_reason():
    # memory-bound: a 1 MiB copy in 10 us = 105 GB/s against its L2 roof of 72.6 GB/s (70 GB/s, and
    # 300 GB/s for the 4.7% that L1d holds)
    r = roofline(0, MIB, 1e-5, peak_flops=1e12, levels=LEVELS)
    assert r.peak_bw == pytest.approx(1 / ((48 / 1024) / 300e9 + (1 - 48 / 1024) / 70e9))
    assert r.fraction == pytest.approx(MIB / 1e-5 / r.peak_bw) and r.fraction > 1
    assert r.flag == "above_roof" and r.to_dict()["flag"] == "above_roof"
    assert "144% of the L2 roof (72.6 GB/s, working set 1024.0 KiB)" in r.reason and "\n" not in r.reason
    # compute-bound: 2 GFLOP in 1 ms = 2 TFLOP/s against a 1 TFLOP/s peak
    c = roofline(2e9, 1e6, 1e-3, peak_flops=1e12, levels=LEVELS)
    assert c.bound == "compute" and c.flag == "above_roof" and "200% of the compute roof" in c.reason
    # under the roof: no flag
    ok = roofline(0, MIB, 1e-4, peak_flops=1e12, levels=LEVELS)
    assert ok.fraction < 1 and ok.flag is None and ok.reason is None


def test_fractions_above_the_roof_are_counted_not_averaged():
    rs = [
        res("L1/a", 0, roofline=roof(0.2)),
        res("L1/a", 1, roofline=roof(0.4)),
        res("L1/b", 0, roofline=roof(1.3, flag="above_roof", reason="x")),
        res("L1/b", 1, roofline=roof(1.59)),  # an older record: no flag, still above
        res("L1/c", 0, correct=False, roofline=roof(2.0, flag="above_roof")),
    ]
    assert mean_roofline_fraction(rs) == pytest.approx(0.3)
    assert roofline_flags(rs) == 2  # correct samples only
    assert roofline_flags(rs[:2]) == 0
    flagged_only = [rs[2]]
    assert mean_roofline_fraction(flagged_only) is None and roofline_flags(flagged_only) == 1
