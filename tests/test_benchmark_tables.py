"""The benchmark scripts' tables, read from a run store with known results: the counts and verdicts they
print are what the docs quote."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from edgekernelbench.records import Result, Timing
from edgekernelbench.store import RunStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import leka_alone  # noqa: E402
import leka_vs_metaschedule  # noqa: E402


def _result(problem, sample, *, correct=True, tvm=10.0, ort=1.2, ci=(1.1, 1.3), us=50.0):
    t = Timing(median=us * 1e-6, iqr=0.0, min=us * 1e-6, max=us * 1e-6, count=25, number=10)
    return Result(
        problem=problem,
        sample=sample,
        backend="host",
        compiled=True,
        correct=correct,
        runtime=t if correct else None,
        speedups={"tvm-default": tvm, "onnxruntime": ort} if correct else {},
        speedup_ci={"onnxruntime": list(ci)} if correct else {},
    )


@pytest.fixture
def run_dir(tmp_path):
    with RunStore(tmp_path) as store:
        for problem, kw in {
            "L3/a": {"ort": 1.5, "ci": (1.4, 1.6)},  # fast
            "L3/b": {"ort": 0.98, "ci": (0.95, 1.02)},  # tie, behind on the point estimate
            "L3/c": {"ort": 0.7, "ci": (0.65, 0.75)},  # slow
            "L3/d": {"correct": False},
        }.items():
            store.put(_result(problem, 4, **kw))
            store.put_agent_run(problem, "leka", {"trials": 10, "usage": {"wall_s": 20.0}})
    return tmp_path


def test_leka_alone_counts_fast_ties_and_behind(run_dir, capsys):
    rs = {r["problem"]: r for r in leka_alone.rows(run_dir, "leka")}
    assert [rs[p]["verdict"] for p in ("L3/a", "L3/b", "L3/c", "L3/d")] == ["fast", "tie", "slow", None]
    assert rs["L3/a"]["ort_us"] == pytest.approx(75.0)  # the candidate's 50 us times the paired 1.5x
    assert leka_alone.main([str(run_dir), "--rows"]) == 0
    out = capsys.readouterr().out
    assert "4 problems, 3 correct: Fast@1.0 vs ONNX Runtime 25.0% (1 of 4, 1 tie(s))" in out
    assert "40 judgments, 80 s" in out
    assert "L3/c 0.70x (slow), L3/b 0.98x (tie)" in out  # behind, worst first
    assert "| L3/a | 10.00x | 1.50x [1.40, 1.60] | 50 | 75 | fast |" in out


def test_leka_alone_rejects_a_directory_without_a_store(tmp_path, capsys):
    assert leka_alone.main([str(tmp_path / "nothing")]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_head_to_head_counts_even_within_two_percent():
    table = [
        {"problem": "a", "method": "leka", "vs_tvm_default": 20.0},
        {"problem": "a", "method": "metaschedule", "vs_tvm_default": 10.0},
        {"problem": "b", "method": "leka", "vs_tvm_default": 10.1},
        {"problem": "b", "method": "metaschedule", "vs_tvm_default": 10.0},
        {"problem": "c", "method": "leka", "vs_tvm_default": 9.0},
        {"problem": "c", "method": "metaschedule", "vs_tvm_default": 10.0},
        {"problem": "d", "method": "leka", "vs_tvm_default": None},  # no correct candidate: 1.0
        {"problem": "d", "method": "metaschedule", "vs_tvm_default": 1.01},
    ]
    assert leka_vs_metaschedule.head_to_head(table) == {"ahead": ["a"], "even": ["b", "d"], "behind": ["c"]}


def test_sliding_tile_compares_both_tiles_on_the_same_output(capsys):
    """benchmarks/sliding_tile.py records a depthwise kernel's first point with and without the sliding tile
    and finds both outputs the same, and prints the ratio; a bad argument is one
    line and status 2."""
    import sliding_tile

    assert sliding_tile.main(["L1/dwconv3x3_kws:fused_conv2d_add_relu", "--top", "1", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("same output") == 2 and "OUTPUT DIFFERS" not in out and "new/old: first point" in out
    assert sliding_tile.main(["L1/no_such_problem:k"]) == 2
    assert sliding_tile.main(["no-colon"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("sliding_tile: error:") for e in err)


@pytest.mark.parametrize("native, noted", [(512, True), (256, False)])
def test_a_profile_narrower_than_the_cpu_is_noted_in_the_results(monkeypatch, native, noted):
    """results_io.pinned_isa_notes: a run built for host-avx2 on a CPU with 512-bit vectors says whether
    ONNX Runtime was held to the same ISA (each judgment's record of it) or ran its wider kernels there, and
    why; on an AVX2-only CPU (the native profile as wide) it says nothing."""
    import dataclasses

    import results_io

    from edgekernelbench.backends import registry

    real = registry.get_profile

    def get_profile(name, threads=1):
        p = real(name, threads)
        return dataclasses.replace(p, vector_bits=native) if name == "host-cpu" else p

    monkeypatch.setattr(registry, "get_profile", get_profile)
    held = {"vs_ort": 1.1, "ort_isa": {"hidden": ["avx512f", "avx512vnni"], "by": "CPUID faulting"}}
    wide = {"vs_ort": 0.9, "ort_isa": {"hidden": [], "why": "no CPUID faulting"}}
    failed = {"vs_ort": None, "ort_isa": {}}  # not timed: says nothing either way
    notes = results_io.pinned_isa_notes("host-avx2", [held, held, failed])
    assert bool(notes) == noted
    if noted:
        assert "host-avx2 (256-bit vectors)" in notes[0] and "held to the same ISA" in notes[0]
        assert "avx512f, avx512vnni" in notes[0]
        (note,) = results_io.pinned_isa_notes("host-avx2", [held, wide])
        assert "ran its 512-bit ones in 1 of 2 judgments (no CPUID faulting)" in note
    assert results_io.pinned_isa_notes("host-cpu", [wide]) == []
