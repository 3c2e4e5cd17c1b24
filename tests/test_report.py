"""Summaries and their renderings over synthetic results."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace

import pytest
from rich.console import Console

from edgekernelbench.records import Result, Roofline, Timing
from edgekernelbench.report.render import (
    CSV_FIELDS,
    fmt_pct,
    render_backend_matrix,
    render_problem_table,
    render_table,
    render_tables,
    to_csv,
    to_json,
)
from edgekernelbench.report.summary import above_roof_lines, per_problem_rows, summarize

BASELINES = ("tvm-default", "onnxruntime")


def r(problem, sample, backend="llvm", correct=True, compiled=True, speedups=None, fraction=None, **kw):
    return Result(
        problem=problem,
        sample=sample,
        backend=backend,
        compiled=compiled or correct,
        correct=correct,
        speedups=dict(speedups or {}),
        runtime=Timing(1e-5, 0.0, 1e-5, 1e-5, 1, 1) if correct else None,
        roofline=Roofline(1.0, 1.0, None, None, fraction, None) if fraction is not None else None,
        **kw,
    )


@pytest.fixture
def results():
    return [
        # L1/a: 2 of 3 correct; one fast vs both baselines
        r("L1/a", 0, speedups={"tvm-default": 2.0, "onnxruntime": 1.0}, fraction=0.5),
        r("L1/a", 1, speedups={"tvm-default": 0.5, "onnxruntime": 0.25}, fraction=0.1),
        r("L1/a", 2, correct=False, reason="wrong_output", detail="mismatch\nat [0, 1]"),
        # L1/b: not compiled
        r("L1/b", 0, correct=False, compiled=False, reason="compile_error", detail="TVMError: boom"),
        # L2/c: correct, fast vs tvm-default only (no ORT measurement)
        r("L2/c", 0, speedups={"tvm-default": 8.0}),
        # another backend
        r("L1/a", 0, backend="cuda", speedups={"tvm-default": 3.0}),
    ]


def test_summarize(results):
    s = summarize(results, BASELINES)
    assert [b.backend for b in s.backends] == ["cuda", "llvm"]
    llvm = s.backend("llvm")
    assert [lv.level for lv in llvm.levels] == ["L1", "L2", "all"]

    l1 = llvm.level("L1")
    assert (l1.problems, l1.samples) == (2, 4)
    assert l1.compile_at_1 == pytest.approx((1.0 + 0.0) / 2)
    assert l1.correct_at_1 == pytest.approx((2 / 3 + 0.0) / 2)
    assert l1.fast["tvm-default"][1.0] == pytest.approx((1 / 3) / 2)
    assert l1.fast["onnxruntime"][1.0] == 0.0  # 1.0 is not > 1.0
    assert l1.fast["onnxruntime"][0.5] == pytest.approx((1 / 3) / 2)
    assert l1.fast["onnxruntime"][0.0] == pytest.approx((2 / 3) / 2)
    assert l1.geomean_speedup["tvm-default"] == pytest.approx(1.0)  # sqrt(2 * 0.5)
    assert l1.geomean_speedup["onnxruntime"] == pytest.approx(0.5)  # sqrt(1 * 0.25)
    assert l1.roofline_fraction == pytest.approx(0.3)

    al = llvm.all
    assert (al.problems, al.samples) == (3, 5)
    assert al.correct_at_1 == pytest.approx((2 / 3 + 0 + 1) / 3)
    assert al.fast["tvm-default"][1.0] == pytest.approx((1 / 3 + 0 + 1) / 3)
    assert al.geomean_speedup["tvm-default"] == pytest.approx((2.0 * 0.5 * 8.0) ** (1 / 3))
    assert llvm.level("L2").geomean_speedup["onnxruntime"] is None
    assert llvm.level("L2").roofline_fraction is None

    assert s.backend("cuda").all.correct_at_1 == 1.0


def test_json_round_trip(results):
    s = summarize(results, BASELINES)
    d = json.loads(to_json(s))
    assert d == json.loads(json.dumps(s.to_dict()))
    llvm = next(b for b in d["backends"] if b["backend"] == "llvm")
    l1 = next(lv for lv in llvm["levels"] if lv["level"] == "L1")
    assert l1["fast"]["tvm-default"]["1.0"] == pytest.approx(1 / 6)
    assert l1["geomean_speedup"]["onnxruntime"] == pytest.approx(0.5)
    assert d["ps"] == [0.0, 0.5, 0.8, 1.0, 1.5, 2.0]


def test_csv_round_trip(results):
    s = summarize(results, BASELINES)
    rows = list(csv.DictReader(io.StringIO(to_csv(s))))
    # backends x levels x baselines x ps: cuda (L1, all) + llvm (L1, L2, all) = 5 levels
    assert len(rows) == 5 * len(BASELINES) * len(s.ps)
    assert tuple(rows[0]) == CSV_FIELDS
    row = next(
        x
        for x in rows
        if (x["backend"], x["level"], x["baseline"], x["p"]) == ("llvm", "all", "tvm-default", "1.0")
    )
    assert float(row["fast_at_1"]) == pytest.approx((1 / 3 + 0 + 1) / 3)
    assert int(row["problems"]) == 3 and int(row["samples"]) == 5
    l2 = next(x for x in rows if (x["backend"], x["level"], x["baseline"]) == ("llvm", "L2", "onnxruntime"))
    assert l2["geomean_speedup"] == "" and l2["roofline_fraction"] == ""


def test_render_table(results):
    s = summarize(results, BASELINES)
    console = Console(record=True, width=250)
    for t in render_tables(s):
        console.print(t)
    text = console.export_text()
    for header in (
        "level",
        "problems",
        "Compile@1",
        "Correct@1",
        "Fast@1.0 vs tvm-default",
        "Fast@1.0 vs onnxruntime",
        "geomean vs tvm-default",
        "geomean vs onnxruntime",
        "roofline",
    ):
        assert header in text, header
    assert "EdgeKernelBench: llvm" in text and "EdgeKernelBench: cuda" in text
    assert "55.6%" in text  # llvm all Correct@1 = (2/3 + 0 + 1) / 3
    assert "4.00x" not in text and "2.00x" in text  # llvm all geomean vs tvm-default = 2

    combined = Console(record=True, width=250)
    combined.print(render_table(s, p_headline=1.5))
    out = combined.export_text()
    assert "backend" in out and "Fast@1.5 vs tvm-default" in out
    with pytest.raises(ValueError):
        render_table(s, p_headline=3.0)


def test_backend_matrix_has_a_column_group_per_backend(results):
    s = summarize(results, BASELINES)
    console = Console(record=True, width=250)
    console.print(render_backend_matrix(s))
    lines = console.export_text().splitlines()
    assert lines[0].strip() == "EdgeKernelBench: cuda, llvm"
    assert lines[2].index("cuda") < lines[2].index("llvm")
    text = "\n".join(lines)
    assert text.count("Compile@1") == 2 and text.count("vs tvm-default") == 2
    rows = {ln.split("│")[1].strip(): [c.strip() for c in ln.split("│")[2:-1]] for ln in lines if "│" in ln}
    # problems | cuda: Compile, Correct, Fast vs tvm-default, Fast vs onnxruntime | llvm: the same
    # the L2 sample has no onnxruntime speedup: Fast vs onnxruntime is unknown there, not 0%
    assert rows["L2"] == ["1", "-", "-", "-", "-", "100.0%", "100.0%", "100.0%", "-"]
    assert rows["all"][1:5] == ["100.0%", "100.0%", "100.0%", "-"]  # cuda: no onnxruntime measurement
    assert rows["all"][6] == "55.6%"


def test_fmt_pct():
    assert fmt_pct(2 / 3) == "66.7%"
    assert fmt_pct(1.0) == "100.0%"
    assert fmt_pct(None) == "-"


def test_per_problem_rows(results):
    rows = per_problem_rows(results, BASELINES)
    assert len(rows) == len(results)
    first = rows[0]
    assert (first["backend"], first["problem"], first["sample"]) == ("cuda", "L1/a", 0)
    wrong = next(x for x in rows if x["backend"] == "llvm" and x["sample"] == 2)
    assert wrong["status"] == "wrong_output" and wrong["detail"] == "at [0, 1]"
    assert wrong["runtime_us"] is None
    ok = next(x for x in rows if x["backend"] == "llvm" and x["problem"] == "L2/c")
    assert ok["runtime_us"] == pytest.approx(10.0)
    assert ok["speedups"] == {"tvm-default": 8.0, "onnxruntime": None}

    console = Console(record=True, width=200)
    console.print(render_problem_table(results, BASELINES))
    text = console.export_text()
    assert "compile_error" in text and "at [0, 1]" in text and "TVMError: boom" in text


def test_empty_summary():
    s = summarize([], BASELINES)
    assert s.backends == []
    assert list(csv.DictReader(io.StringIO(to_csv(s)))) == []
    assert json.loads(to_json(s))["backends"] == []


def test_fast_is_unknown_where_nothing_could_be_timed():
    from edgekernelbench.records import Result
    from edgekernelbench.report.summary import summarize

    emulated = [Result("L1/a", 0, "rpi4", compiled=True, correct=True, timing_status="not measured")]
    wrong = [Result("L1/a", 0, "host-cpu", compiled=True, correct=False, reason="wrong_output")]
    s = summarize(emulated + wrong)
    assert s.backend("rpi4").all.correct_at_1 == 1.0
    assert s.backend("rpi4").all.fast["tvm-default"][1.0] is None  # emulated: never reported as speed
    assert s.backend("host-cpu").all.fast["tvm-default"][1.0] == 0.0  # measurable, and nothing was fast


def test_fast_is_unknown_against_a_baseline_that_could_not_run():
    from edgekernelbench.records import Result
    from edgekernelbench.report.summary import summarize

    remote = [Result("L1/a", 0, "rpi5", compiled=True, correct=True, speedups={"tvm-default": 2.0})]
    s = summarize(remote).backend("rpi5").all
    assert s.fast["tvm-default"][1.0] == 1.0 and s.fast["onnxruntime"][1.0] is None


def test_ties_are_shown_next_to_fast_and_in_the_detail_table():
    rs = [
        r("L1/a", 0, speedups={"tvm-default": 1.3}, speedup_ci={"tvm-default": [1.2, 1.4]}),
        r("L1/b", 0, speedups={"tvm-default": 1.02}, speedup_ci={"tvm-default": [0.97, 1.06]}),
    ]
    s = summarize(rs, ("tvm-default",))
    lv = s.backend("llvm").all
    assert lv.fast["tvm-default"][1.0] == pytest.approx(0.5) and lv.ties["tvm-default"][1.0] == 1
    console = Console(record=True, width=250)
    console.print(render_table(s))
    console.print(render_problem_table(rs, ["tvm-default"]))
    text = console.export_text()
    assert "50.0% (1 tie)" in text
    assert "1.02x ~" in text and "1.30x ~" not in text
    rows = list(csv.DictReader(io.StringIO(to_csv(s))))
    assert {row["ties"] for row in rows if row["p"] == "1.0" and row["level"] == "all"} == {"1"}
    assert json.loads(to_json(s))["backends"][0]["levels"][-1]["ties"]["tvm-default"]["1.0"] == 1


def test_fractions_above_the_roof_are_a_count_in_the_report_not_in_the_mean():
    flagged = r("L1/b", 0, fraction=1.4)
    flagged.roofline = replace(
        flagged.roofline, flag="above_roof", reason="140% of the L2 roof (70 GB/s, ...)"
    )
    rs = [
        r("L1/a", 0, fraction=0.5),
        r("L1/a", 1, fraction=0.1),
        flagged,
        r("L1/c", 0, fraction=1.59),  # recorded before flags existed: above its roof all the same
        r("L1/d", 0, correct=False, fraction=3.0),  # not correct: neither averaged nor counted
    ]
    s = summarize(rs, BASELINES)
    lv = s.backend("llvm").level("L1")
    assert lv.roofline_fraction == pytest.approx(0.3) and lv.roofline_flags == 2
    console = Console(record=True, width=250)
    console.print(render_table(s))
    assert "30.0% (2 above roof)" in console.export_text()
    rows = list(csv.DictReader(io.StringIO(to_csv(s))))
    assert {row["roofline_flags"] for row in rows if row["level"] == "L1"} == {"2"}
    assert json.loads(to_json(s))["backends"][0]["levels"][0]["roofline_flags"] == 2
    lines = above_roof_lines(rs)
    assert lines == [
        "above roof: L1/b sample 0 on llvm: 140% of the L2 roof (70 GB/s, ...)",
        "above roof: L1/c sample 0 on llvm: fraction 1.59 (recorded before roofs had flags)",
    ]
    # every sample above its roof: no mean, the column still shows the count
    only = summarize([flagged], BASELINES).backend("llvm").all
    assert only.roofline_fraction is None and only.roofline_flags == 1
    console = Console(record=True, width=250)
    console.print(render_table(summarize([flagged], BASELINES)))
    assert "- (1 above roof)" in console.export_text()
