"""results/*.json -> docs/results.md and the README's headline table (benchmarks/render_results.py): the
pages people read say what the benchmark scripts last wrote, and every figure names its machine."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import render_results  # noqa: E402


def _report(name="demo_bench", figure="1.23x", **over):
    r = {
        "benchmark": name,
        "date": "2026-12-07",
        "commit": "abc1234",
        "command": f"python benchmarks/{name}.py",
        "machine": {"cpu": "Some CPU", "llvm_cpu": "znver3", "isa": ["avx2", "fma"], "threads": 1},
        "protocol": "25 paired rounds",
        "headline": {"what": "a figure", "figure": figure},
        "table": {"columns": ["problem", "speedup"], "rows": [["L1/x", 1.234567], ["L1/y", None]]},
    }
    r.update(over)
    return r


def test_committed_results_are_complete_records():
    """Every committed results file says what ran, where, when, from which commit, and how to rerun it."""
    files = sorted((ROOT / "results").glob("*.json"))
    assert files, "results/ has no benchmark results"
    for f in files:
        r = json.loads(f.read_text())
        assert r["benchmark"] == f.stem
        for key in ("date", "commit", "command", "headline", "machine"):
            assert r.get(key), f"{f.name}: no {key}"
        assert r["machine"].get("cpu") and r["machine"].get("isa"), f"{f.name}: the machine is not named"
        assert r["command"].startswith("python benchmarks/"), f"{f.name}: {r['command']}"
        assert (ROOT / r["command"].split()[1]).is_file(), f"{f.name}: its script is gone"


def test_pages_say_what_the_results_say():
    """docs/results.md and the README's table are rendered from results/*.json, not edited by hand."""
    assert render_results.main(["--check"]) == 0, "run: python benchmarks/render_results.py"


def test_page_names_machine_and_rounds_cells(tmp_path):
    (tmp_path / "demo_bench.json").write_text(json.dumps(_report()))
    reports = render_results.load(tmp_path)
    text = render_results.page(reports)
    assert "**a figure: 1.23x**" in text
    assert "Some CPU (LLVM znver3: avx2, fma), 1 thread(s)" in text
    assert "| L1/x | 1.23 |" in text and "| L1/y | - |" in text
    assert "`python benchmarks/demo_bench.py`" in text


def test_readme_block_is_replaced_and_the_rest_kept(tmp_path):
    reports = [_report(figure="2.00x")]
    before = f"intro\n{render_results.START}\nold table\n{render_results.END}\noutro\n"
    after = render_results.readme(before, reports)
    assert after.startswith("intro\n") and after.endswith("\noutro\n")
    assert "old table" not in after and "| a figure | 2.00x | Some CPU, avx2, fma | 2026-12-07 |" in after
    with pytest.raises(SystemExit):
        render_results.readme("no markers here", reports)


def test_known_benchmarks_come_first(tmp_path):
    for name in ("zzz_extra", "zoo", "identical_code"):
        (tmp_path / f"{name}.json").write_text(json.dumps(_report(name)))
    assert [r["benchmark"] for r in render_results.load(tmp_path)] == ["identical_code", "zoo", "zzz_extra"]
