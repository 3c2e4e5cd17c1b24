"""The builder's directory is hostile: the builder runs the candidate's Python, which can leave anything
where module.json should be. Before, a symlink to /proc/self/mem made the parent raise an uncaught OSError
that ended `ekb eval` (and every resumed run stopped on the same candidate), and one to /proc/self/environ
made it copy its own environment, API keys included, into the judge's directory."""

from __future__ import annotations

import sqlite3

import pytest
from test_cli import ekb
from test_python_attacks import RIGHT, attack, judge


def plant(target: str) -> str:
    """Parse-time code: module.json is a symlink to `target`, and the builder says it made a module."""
    return (
        "import json, os\n"
        f"os.symlink({target!r}, 'module.json')\n"
        "open('built.json', 'w').write(json.dumps({'ok': True}))\n"
        "os._exit(0)\n"
    )


@pytest.mark.parametrize("target", ["/proc/self/mem", "/proc/self/environ", "/dev/zero", "."])
def test_a_module_that_is_not_a_plain_file_is_the_candidates_failure(target):
    r = judge(attack(plant(target), RIGHT))
    assert r.reason == "forbidden" and "not a plain file" in r.detail, (r.reason, r.detail)
    assert "PATH=" not in r.detail and "EKB_STORE_KEY" not in r.detail  # nothing of an environment


def test_a_poisoned_candidate_in_the_middle_of_a_run_is_recorded_and_the_run_goes_on(tmp_path):
    run = tmp_path / "run"
    d = run / "candidates" / "L1" / "tiny_scale_add"
    d.mkdir(parents=True)
    right = "@I.ir_module\nclass Module:\n    @T.prim_func(private=True)\n"
    from test_python_attacks import SIG

    right += (
        f"    def fused_multiply_add({SIG}):\n"
        + "\n".join("        " + ln for ln in RIGHT.splitlines())
        + "\n"
    )
    (d / "sample0.py").write_text(right)
    (d / "sample1.py").write_text(attack(plant("/proc/self/mem"), RIGHT))
    (d / "sample2.py").write_text(right)
    first = ekb("eval", run, "--no-measure", "--trials", "1")
    assert first.returncode == 0, first.stdout + first.stderr
    with sqlite3.connect(run / "results.db") as db:
        status = dict(db.execute("SELECT sample, status FROM results").fetchall())
    assert status == {0: "correct", 1: "forbidden", 2: "correct"}, status
    again = ekb("eval", run, "--no-measure", "--trials", "1")  # resumed: nothing left, nothing stops it
    assert again.returncode == 0 and "skipped 3" in again.stdout, again.stdout + again.stderr


@pytest.mark.parametrize(
    "text",
    [
        '{"problem": "L1/tiny_scale_add", "format_version": "2", "module": "x"}',
        '{"problem": "L1/tiny_scale_add", "format_version": null, "module": "x"}',
        '{"problem": "L1/tiny_scale_add", "decisions": {"loop": {"f": [[["a", [], {}, []]], []]}, "graph": 7}}',
        "[" * 100_000 + "]" * 100_000,
    ],
    ids=["version a string", "version null", "graph not an object", "nested 100k deep"],
)
def test_a_malformed_spec_in_a_run_is_the_candidates_parse_error(tmp_path, text):
    """Found by the red team of 2026-12-07: a spec whose fields have the wrong types raised a TypeError
    (or a RecursionError) that ended `ekb eval`, every later candidate unjudged, and every resumed run."""
    from test_python_attacks import SIG

    run = tmp_path / "run"
    d = run / "candidates" / "L1" / "tiny_scale_add"
    d.mkdir(parents=True)
    (d / "sample0.json").write_text(text)
    body = "\n".join("        " + ln for ln in RIGHT.splitlines())
    (d / "sample1.py").write_text(
        f"@I.ir_module\nclass Module:\n    @T.prim_func(private=True)\n    def fused_multiply_add({SIG}):\n{body}\n"
    )
    p = ekb("eval", run, "--no-measure", "--trials", "1")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stdout + p.stderr
    with sqlite3.connect(run / "results.db") as db:
        status = dict(db.execute("SELECT sample, status FROM results").fetchall())
    assert status == {0: "parse_error", 1: "correct"}, status
