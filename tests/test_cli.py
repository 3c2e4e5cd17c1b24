"""The ekb command: errors are one line with a non-zero exit; eval -> report works; a killed run resumes."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_harness import CORRECT, prim

TINY = "L1/tiny_scale_add"


def ekb(*args, check=False, timeout=600):
    p = subprocess.run(
        [sys.executable, "-m", "edgekernelbench.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert p.returncode == 0, p.stdout + p.stderr
    return p


def assert_one_line_error(p, needle):
    assert p.returncode != 0
    assert "Traceback" not in p.stdout + p.stderr
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], p.stderr


def write_candidates(run_dir: Path, texts: dict[int, str], problem=TINY):
    d = run_dir / "candidates" / problem
    d.mkdir(parents=True, exist_ok=True)
    for k, text in texts.items():
        (d / (f"sample{k}.json" if text.lstrip().startswith("{") else f"sample{k}.py")).write_text(text)


def test_list_json_has_the_level1_suite():
    out = json.loads(ekb("list", "--level", "1", "--json", check=True).stdout)
    assert len([p for p in out if "test" not in p["tags"]]) >= 30


@pytest.mark.parametrize(
    "args, needle",
    [
        (["show", "L1/not_a_problem"], "unknown problem"),
        (["eval", "/nonexistent/run"], "no such run directory"),
        (["report", "/nonexistent/run"], "no results.db"),
        (["baseline", "--backend", "rpi9", "--problem", TINY], "unknown backend"),
        (["check", TINY, "/nonexistent/file.py"], "no such file"),
    ],
)
def test_bad_input_is_one_line(args, needle):
    assert_one_line_error(ekb(*args), needle)


def test_unknown_problem_dir_and_backend_in_eval(tmp_path):
    write_candidates(tmp_path, {0: CORRECT}, problem="L1/no_such_problem")
    assert_one_line_error(ekb("eval", tmp_path), "unknown problem")
    (tmp_path / "candidates" / "L1" / "no_such_problem" / "sample0.py").unlink()
    write_candidates(tmp_path, {0: CORRECT})
    assert_one_line_error(ekb("eval", tmp_path, "--backend", "host-cpu,pi"), "unknown backend")


def test_eval_report_and_malformed_candidates(tmp_path):
    write_candidates(
        tmp_path,
        {
            0: CORRECT,
            1: "{not json",
            2: prim("T.evaluate(0)"),
            3: json.dumps({"problem": TINY, "module": CORRECT, "method": "spec"}),
        },
    )
    p = ekb("eval", tmp_path, "--quick", "--trials", "2", check=True)
    assert "evaluated 4 (2 correct)" in p.stdout
    from edgekernelbench.store import RunStore

    with RunStore(tmp_path) as store:
        by_sample = {r.sample: r for r in store.results()}
    assert by_sample[0].correct and by_sample[3].correct and by_sample[3].method == "spec"
    assert by_sample[1].reason == "parse_error" and "not valid JSON" in by_sample[1].detail
    assert by_sample[2].reason == "nan_output"
    assert by_sample[0].timing_status == "measured" and by_sample[0].roofline is not None
    again = ekb("eval", tmp_path, "--quick", check=True)
    assert "evaluated 0" in again.stdout and "skipped 4" in again.stdout
    ekb(
        "report",
        tmp_path,
        "--json",
        tmp_path / "r.json",
        "--csv",
        tmp_path / "r.csv",
        "--per-problem",
        check=True,
    )
    summary = json.loads((tmp_path / "r.json").read_text())
    assert summary and (tmp_path / "r.csv").read_text().startswith("backend,")
    # the candidates came from two methods (TVMScript files, a spec): each gets its own metrics
    by_method = summary["by_method"]
    assert {"spec", "tvmscript-file"} <= set(by_method)
    spec_all = by_method["spec"]["backends"][0]["levels"][-1]
    assert spec_all["correct_at_1"] == 1.0 and spec_all["samples"] == 1


def test_killed_eval_resumes_without_losing_records(tmp_path):
    n = 6
    write_candidates(tmp_path, {k: CORRECT for k in range(n)})
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgekernelbench.cli", "eval", str(tmp_path), "--no-measure", "--trials", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    db = tmp_path / "results.db"
    deadline = time.time() + 120
    done = 0
    while time.time() < deadline and done < 2:
        time.sleep(0.2)
        if db.exists():
            try:
                with sqlite3.connect(db) as con:
                    done = con.execute("select count(*) from results").fetchone()[0]
            except sqlite3.OperationalError:
                pass
    os.killpg(proc.pid, signal.SIGKILL)  # the parent and its worker, mid-run
    proc.wait()
    assert 2 <= done < n
    with sqlite3.connect(db) as con:
        before = dict(con.execute("select sample, created from results").fetchall())
    assert len(before) >= 2
    p = ekb("eval", tmp_path, "--no-measure", "--trials", "1", check=True)
    assert f"skipped {len(before)}" in p.stdout
    with sqlite3.connect(db) as con:
        after = dict(con.execute("select sample, created from results").fetchall())
        statuses = {s for (s,) in con.execute("select status from results")}
    assert sorted(after) == list(range(n)) and statuses == {"correct"}
    assert all(after[k] == v for k, v in before.items())  # finished records were not redone


def test_baseline_then_show_lists_kernels_with_time_shares(tmp_path):
    pid = "L2/ds_block_kws"
    ekb("baseline", "--problem", pid, "--out", tmp_path, "--quick", check=True)
    from edgekernelbench.store import RunStore

    with RunStore(tmp_path) as store:
        rows = {k[2]: v for k, v in store.baselines().items() if k[0] == pid}
    assert set(rows) == {"reference", "tvm-default", "onnxruntime"}
    kernels = rows["tvm-default"]["extra"]["kernels"]
    assert len(kernels) >= 2 and abs(sum(k["share"] for k in kernels) - 1) < 1e-6
    assert all(k["median"] > 0 and k["flops"] is not None for k in kernels)
    out = ekb("show", pid, "--baselines-dir", tmp_path, "--no-script", check=True).stdout
    assert "kernels main calls" in out and "share" in out and "tvm-default us" in out
    for k in kernels:
        assert k["kernel"] in out
    # a second baseline run reuses the stored measurements
    assert (
        "L2/ds_block_kws"
        in ekb("baseline", "--problem", pid, "--out", tmp_path, "--quick", check=True).stdout
    )


def test_run_directory_profiles_extend_the_backends(tmp_path):
    write_candidates(tmp_path, {0: CORRECT})
    (tmp_path / "profiles.toml").write_text(
        '[my-board]\ndescription = "this CPU under another name"\nkind = "host"\nrun = "local"\n'
        'target = { kind = "llvm", mcpu = "native" }\nthreads = 1\n'
    )
    p = ekb("eval", tmp_path, "--backend", "my-board", "--no-measure", "--trials", "1", check=True)
    assert "evaluated 1 (1 correct)" in p.stdout
    from edgekernelbench.store import RunStore

    with RunStore(tmp_path) as store:
        assert [r.backend for r in store.results()] == ["my-board"]
    assert_one_line_error(ekb("eval", tmp_path, "--backend", "other-board"), "unknown backend")
