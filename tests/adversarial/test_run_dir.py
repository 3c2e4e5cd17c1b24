"""A run directory cannot lie (issue 47, part 7).

Whoever works in a run directory -- a coding agent, say -- can write all of it: the candidates, results.db
and profiles.toml. The attacks: a row inserted into results.db by hand ("correct, 42x" for a kernel that
writes nothing), a candidate file changed after it was judged, a profiles.toml that replaces the built-in
host-cpu profile (a fake huge peak turns the plausibility check off), a forged cached peak in meta. The
defences: every row is authenticated with a key kept outside the run directory (store.py), `ekb report`
marks and leaves out what does not authenticate, `ekb eval` judges it again, a run directory's profiles may
only add names (backends/profiles.py). The tests use the key file conftest.py names in $EKB_STORE_KEY.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_cli import TINY, write_candidates
from test_harness import CORRECT, prim

from edgekernelbench.backends.profiles import OVERRIDE_FLAG, ProfileError, load_profiles
from edgekernelbench.cli import main
from edgekernelbench.errors import RunDirError
from edgekernelbench.files import sha256_hex
from edgekernelbench.harness.job import judge_version
from edgekernelbench.records import Result, Timing
from edgekernelbench.rundir import candidate_path
from edgekernelbench.runs import CandidateRef, backend_peak, pending
from edgekernelbench.store import (
    SCHEMA_VERSION,
    RunStore,
    StoreKeyError,
    load_store_key,
    result_status,
    store_key_path,
)

NOTHING = prim("T.evaluate(0)")  # writes no output at all
FAST = ["--no-measure", "--trials", "1"]  # the cheapest judgment: correctness only, one trial


def forge(run_dir: Path, result: Result, mac: str | None = None) -> None:
    """What an agent with write access to the run directory can do: insert or replace a row of results.db
    with raw SQL (it cannot compute a MAC without the key outside the run directory)."""
    with RunStore(run_dir):
        pass  # the tables exist
    con = sqlite3.connect(run_dir / "results.db")
    con.execute(
        "INSERT OR REPLACE INTO results (problem, sample, backend, status, record, created, mac) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            result.problem,
            result.sample,
            result.backend,
            result_status(result),
            json.dumps(result.to_dict()),
            time.time(),
            mac,
        ),
    )
    con.commit()
    con.close()


def forty_two_x(sample: int, candidate: Path | None = None) -> Result:
    """The forged verdict: correct, 42x faster than both baselines (and the bytes of the candidate file,
    which anyone can hash)."""
    t = Timing(median=1e-6, iqr=0.0, min=1e-6, max=1e-6, count=10, number=100)
    return Result(
        problem=TINY,
        sample=sample,
        backend="host-cpu",
        compiled=True,
        correct=True,
        runtime=t,
        speedups={"tvm-default": 42.0, "onnxruntime": 42.0},
        speedup_ci={"tvm-default": [41.0, 43.0], "onnxruntime": [41.0, 43.0]},
        timing_status="measured",
        method="forged",
        candidate_sha256=sha256_hex(candidate.read_bytes()) if candidate else "",
    )


def honest(sample: int, correct: bool = True) -> Result:
    r = Result(problem=TINY, sample=sample, backend="host-cpu", compiled=True, correct=correct)
    r.judge_version = judge_version()
    return r if correct else r.failure("wrong_output", "mismatch")


def ekb(capsys, *args) -> tuple[int, str, str]:
    """`ekb ARGS` in this process: (exit status, stdout, stderr)."""
    capsys.readouterr()
    rc = main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    return lines[0]


# ------------------------------------------------------------------------------------- the report
def test_a_forged_row_is_marked_and_left_out_of_the_report(tmp_path, capsys):
    write_candidates(tmp_path, {0: CORRECT, 1: NOTHING})
    with RunStore(tmp_path) as store:
        store.put(honest(0, correct=False))  # a genuine verdict: wrong
    forge(tmp_path, forty_two_x(1, candidate_path(tmp_path, TINY, 1, ".py")))

    rc, out, _ = ekb(
        capsys,
        "report",
        tmp_path,
        "--per-problem",
        "--json",
        tmp_path / "r.json",
        "--csv",
        tmp_path / "r.csv",
    )
    assert rc == 0
    flat = " ".join(out.split())
    assert (
        "1 row of results.db failed authentication (results: 1) and is left out of the metrics; "
        "--trust-unauthenticated counts them" in flat
    )
    assert "(unauthenticated)" in flat  # the forged sample's row in the per-sample table
    data = json.loads((tmp_path / "r.json").read_text())
    level = data["backends"][0]["levels"][-1]
    assert level["samples"] == 1 and level["correct_at_1"] == 0.0
    assert level["geomean_speedup"]["tvm-default"] is None  # the 42x counts nowhere
    assert data["authentication"] == {
        "trust_unauthenticated": False,
        "unauthenticated": {"results": [[TINY, 1, "host-cpu"]]},
    }

    rc, out, _ = ekb(
        capsys,
        "report",
        tmp_path,
        "--trust-unauthenticated",
        "--json",
        tmp_path / "t.json",
        "--csv",
        tmp_path / "t.csv",
    )
    assert rc == 0
    assert "counted in the metrics as --trust-unauthenticated asks" in " ".join(out.split())
    level = json.loads((tmp_path / "t.json").read_text())["backends"][0]["levels"][-1]
    assert level["samples"] == 2 and level["correct_at_1"] == 0.5 and level["unauthenticated"] == 1
    assert level["geomean_speedup"]["tvm-default"] == pytest.approx(42.0)
    rows = list(csv.DictReader(io.StringIO((tmp_path / "t.csv").read_text())))
    assert {r["unauthenticated"] for r in rows} == {"1"}


def test_the_html_report_marks_the_forged_row(tmp_path):
    from edgekernelbench.report.html import build_html

    write_candidates(tmp_path, {0: CORRECT, 1: NOTHING})
    with RunStore(tmp_path) as store:
        store.put(honest(0))
    forge(tmp_path, forty_two_x(1))
    page = build_html([tmp_path])
    assert "failed authentication (results: 1) and is left out of the metrics" in page
    assert 'class="st-unauth">correct (unauthenticated)' in page
    summaries, samples = page.split('id="filter"')  # the per-sample table comes after the summaries
    assert "42.00x" not in summaries and "42.00x" in samples  # only its own (marked) row shows its claim
    assert "42.00x" in build_html([tmp_path], trust=True).split('id="filter"')[0]  # trusted: counted


def test_a_report_of_forged_rows_only_is_one_line(tmp_path, capsys):
    write_candidates(tmp_path, {0: NOTHING})
    forge(tmp_path, forty_two_x(0))
    rc, _, err = ekb(capsys, "report", tmp_path)
    assert rc == 2
    assert "no results to count" in one_line(err) and "failed authentication" in err
    assert ekb(capsys, "report", tmp_path, "--trust-unauthenticated")[0] == 0


# ----------------------------------------------------------------------------------- judging again
def test_pending_judges_again_what_does_not_authenticate_or_changed(tmp_path):
    write_candidates(tmp_path, {k: CORRECT for k in range(8)})
    refs = [CandidateRef(TINY, k, candidate_path(tmp_path, TINY, k, ".py")) for k in range(8)]
    digest = sha256_hex(CORRECT.encode())
    with RunStore(tmp_path) as store:
        for k, sha in ((0, digest), (1, ""), (2, "0" * 64), (4, digest), (7, digest)):
            r = honest(k)
            r.candidate_sha256 = sha  # 1: recorded before candidate_sha256 existed; 2: other bytes
            if k == 7:
                r.judge_version = "judge-1 (edgekernelbench 0.1.0)"  # judged by an older judge's rules
            store.put(r)
        infra = honest(5, correct=False).failure("infra", "the harness failed")
        infra.candidate_sha256 = digest
        store.put(infra)
    r = honest(3)
    r.candidate_sha256 = digest
    forge(tmp_path, r, mac="0" * 64)  # a valid-looking verdict with a made-up MAC
    with RunStore(tmp_path) as store:
        assert [ref.sample for ref in pending(store, refs, "host-cpu", retry_infra=True)] == [
            1,
            2,
            3,
            5,
            6,
            7,
        ]
        assert [ref.sample for ref in pending(store, refs, "host-cpu", retry_infra=False)] == [1, 2, 3, 6, 7]


def test_eval_judges_a_forged_row_again(tmp_path, capsys):
    write_candidates(tmp_path, {0: NOTHING})
    forge(tmp_path, forty_two_x(0, candidate_path(tmp_path, TINY, 0, ".py")))
    rc, out, _ = ekb(capsys, "eval", tmp_path, *FAST)
    assert rc == 0 and "evaluated 1 (0 correct), skipped 0" in out
    with RunStore(tmp_path) as store:
        (r,) = store.results()
        assert store.unauthenticated() == {}
    assert not r.correct and r.method != "forged" and r.judge_version and r.profile_sha256


def test_a_candidate_changed_after_it_was_judged_is_judged_again(tmp_path, capsys):
    write_candidates(tmp_path, {0: CORRECT})
    assert ekb(capsys, "eval", tmp_path, *FAST)[0] == 0
    with RunStore(tmp_path) as store:
        (before,) = store.results()
    assert before.correct and before.candidate_sha256 == sha256_hex(CORRECT.encode())
    assert "evaluated 0 (0 correct), skipped 1" in ekb(capsys, "eval", tmp_path, *FAST)[1]  # unchanged
    write_candidates(tmp_path, {0: NOTHING})  # swapped after the verdict
    rc, out, _ = ekb(capsys, "eval", tmp_path, *FAST)
    assert rc == 0 and "evaluated 1 (0 correct), skipped 0" in out
    with RunStore(tmp_path) as store:
        (after,) = store.results()
    assert not after.correct and after.candidate_sha256 == sha256_hex(NOTHING.encode())


def test_a_candidate_that_does_not_parse_is_not_judged_again_until_it_changes(tmp_path, capsys):
    write_candidates(tmp_path, {0: "{not json"})
    assert "evaluated 1 (0 correct)" in ekb(capsys, "eval", tmp_path, *FAST)[1]
    with RunStore(tmp_path) as store:
        (r,) = store.results()
    assert r.reason == "parse_error" and r.candidate_sha256 == sha256_hex(b"{not json") and r.judge_version
    assert "evaluated 0 (0 correct), skipped 1" in ekb(capsys, "eval", tmp_path, *FAST)[1]


# ---------------------------------------------------------------------------------------- profiles
FAKE_PEAK = '[host-cpu]\npeak_flops = 1e30\npeak_bandwidth = 1e30\npeak_source = "measured: 1 thread"\n'
MY_BOARD = (
    '[my-board]\ndescription = "this CPU under another name"\nkind = "host"\nrun = "local"\n'
    'target = { kind = "llvm", mcpu = "native" }\nthreads = 1\n'
)


def test_a_run_dir_profile_cannot_replace_a_builtin(tmp_path, capsys):
    write_candidates(tmp_path, {0: CORRECT})
    (tmp_path / "profiles.toml").write_text(FAKE_PEAK)
    rc, _, err = ekb(capsys, "eval", tmp_path, *FAST)
    assert rc == 2
    line = one_line(err)
    assert (
        line.startswith("ekb: error: ")
        and "redefines [host-cpu] (built-in)" in line
        and OVERRIDE_FLAG in line
    )
    assert not (tmp_path / "results.db").exists()  # nothing was judged

    rc, out, _ = ekb(capsys, "eval", tmp_path, *FAST, OVERRIDE_FLAG)  # asked for explicitly: it runs
    assert rc == 0 and "evaluated 1 (1 correct)" in out
    from edgekernelbench.harness.api import profile_digest

    overridden = load_profiles(tmp_path, run_dir_override=True)["host-cpu"]
    assert overridden.peak_flops == 1e30
    with RunStore(tmp_path) as store:
        (r,) = store.results()
    from edgekernelbench.backends.hostinfo import resolve_host

    # what it was judged on: the run directory's profile, resolved against this machine (hostinfo.py)
    assert r.profile_sha256 == profile_digest(resolve_host(overridden.with_threads(1)))
    assert r.profile_sha256 != profile_digest(resolve_host(load_profiles()["host-cpu"].with_threads(1)))


def test_a_run_dir_profile_with_a_new_name_works(tmp_path, capsys):
    write_candidates(tmp_path, {0: CORRECT})
    (tmp_path / "profiles.toml").write_text(MY_BOARD)
    rc, out, _ = ekb(capsys, "eval", tmp_path, "--backend", "my-board", *FAST)
    assert rc == 0 and "evaluated 1 (1 correct)" in out
    with RunStore(tmp_path) as store:
        assert [r.backend for r in store.results()] == ["my-board"]
    assert load_profiles(tmp_path)["my-board"].source == str(tmp_path / "profiles.toml")
    assert "my-board" not in load_profiles()  # it is this run directory's only


def test_run_dir_profiles_are_checked_against_the_users_too(tmp_path, monkeypatch):
    user = tmp_path / "mine.toml"
    user.write_text(MY_BOARD + FAKE_PEAK.replace("1e30", "2e11"))  # the user may override a built-in
    monkeypatch.setenv("EKB_PROFILES", str(user))
    assert load_profiles()["host-cpu"].peak_flops == 2e11
    run = tmp_path / "run"
    run.mkdir()
    (run / "profiles.toml").write_text(MY_BOARD)
    with pytest.raises(ProfileError, match=rf"redefines \[my-board\] \({user}\)"):
        load_profiles(run)
    assert load_profiles(run, run_dir_override=True)["my-board"].source == str(run / "profiles.toml")
    monkeypatch.setenv("EKB_PROFILES", str(run / "profiles.toml"))  # the user names that file: theirs
    assert load_profiles(run)["my-board"].source == str(run / "profiles.toml")


def test_a_run_dir_profiles_file_is_read_as_untrusted(tmp_path):
    target = tmp_path / "elsewhere.toml"
    target.write_text(MY_BOARD)
    run = tmp_path / "run"
    run.mkdir()
    (run / "profiles.toml").symlink_to(target)
    with pytest.raises(ProfileError, match="not opened as a plain file"):
        load_profiles(run)
    (run / "profiles.toml").unlink()
    os.mkfifo(run / "profiles.toml")  # a read that would never end
    with pytest.raises(ProfileError, match="not a regular file"):
        load_profiles(run)


# ------------------------------------------------------------------------------------------- peaks
def test_a_forged_cached_peak_is_ignored(tmp_path, monkeypatch):
    import edgekernelbench.runs as runs
    from edgekernelbench.backends.registry import get_profile

    measured = {"flops": 1e11, "bandwidth": 1e10, "threads": 1, "source": "measured here"}
    calls = []
    monkeypatch.setattr(runs, "profile_peak", lambda profile, threads: None)  # no `ekb peak` figures
    monkeypatch.setattr(runs, "measure_peak_isolated", lambda profile, threads: calls.append(1) or measured)
    with RunStore(tmp_path):
        pass
    huge = {"flops": 1e30, "bandwidth": 1e30, "threads": 1, "source": "forged"}
    con = sqlite3.connect(tmp_path / "results.db")
    con.execute(
        "INSERT INTO meta (key, value, mac) VALUES (?, ?, ?)",
        ("peak:host-cpu:1", json.dumps(huge), "ab" * 32),
    )
    con.commit()
    con.close()
    profile = get_profile("host-cpu", 1)
    with RunStore(tmp_path) as store:
        assert backend_peak(store, profile, 1) == measured and calls == [1]
        assert store.get_meta("peak:host-cpu:1") == measured  # replaced, authenticated
        assert backend_peak(store, profile, 1) == measured and calls == [1]  # an authentic one serves


# ------------------------------------------------------------------------------------------- store
V1_SCHEMA = (
    "CREATE TABLE results (problem TEXT NOT NULL, sample INTEGER NOT NULL, backend TEXT NOT NULL, "
    "status TEXT NOT NULL, record TEXT NOT NULL, created REAL NOT NULL, PRIMARY KEY (problem, sample, backend))",
    "CREATE TABLE baselines (problem TEXT NOT NULL, backend TEXT NOT NULL, baseline TEXT NOT NULL, "
    "record TEXT NOT NULL, created REAL NOT NULL, PRIMARY KEY (problem, backend, baseline))",
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE INDEX results_backend ON results (backend)",
    "CREATE TABLE generations (problem TEXT NOT NULL, sample INTEGER NOT NULL, record TEXT NOT NULL, "
    "created REAL NOT NULL, PRIMARY KEY (problem, sample))",
    "CREATE TABLE agent_steps (problem TEXT NOT NULL, method TEXT NOT NULL, step INTEGER NOT NULL, "
    "record TEXT NOT NULL, created REAL NOT NULL, PRIMARY KEY (problem, method, step))",
    "CREATE TABLE agent_runs (problem TEXT NOT NULL, method TEXT NOT NULL, record TEXT NOT NULL, "
    "created REAL NOT NULL, PRIMARY KEY (problem, method))",
)


def test_a_version_1_store_opens_migrated_with_its_rows_unauthenticated(tmp_path):
    con = sqlite3.connect(tmp_path / "results.db")
    for stmt in V1_SCHEMA:
        con.execute(stmt)
    con.execute("INSERT INTO meta VALUES ('schema_version', '1'), ('eval_config', '{\"threads\": 1}')")
    old = honest(0)
    con.execute(
        "INSERT INTO results VALUES (?, ?, ?, ?, ?, ?)",
        (old.problem, 0, old.backend, "correct", json.dumps(old.to_dict()), 1.0),
    )
    con.commit()
    con.close()
    with RunStore(tmp_path) as store:
        assert store.get_meta("schema_version") == SCHEMA_VERSION == 2
        assert store.results() == [] and store.get_meta("eval_config") is None
        assert store.results(trust_unauthenticated=True) == [old]
        assert store.get_meta("eval_config", trust_unauthenticated=True) == {"threads": 1}
        assert store.unauthenticated() == {"results": [(TINY, 0, "host-cpu")], "meta": [("eval_config",)]}
        store.put(honest(1))  # written now: authenticated
        assert [r.sample for r in store.results()] == [1]
    with RunStore(tmp_path) as store:  # opens again as version 2, nothing migrated twice
        assert store.unauthenticated() == {"results": [(TINY, 0, "host-cpu")], "meta": [("eval_config",)]}


def test_rows_copied_edited_or_written_under_another_key_do_not_authenticate(tmp_path, monkeypatch):
    with RunStore(tmp_path) as store:
        store.put(honest(0))
        store.put(honest(1, correct=False))
    con = sqlite3.connect(tmp_path / "results.db")
    # sample 1's row takes sample 0's verdict, MAC and all: the MAC covers the key columns
    status, record, created, mac = con.execute(
        "SELECT status, record, created, mac FROM results WHERE sample = 0"
    ).fetchone()
    record = json.loads(record)
    record["sample"] = 1
    con.execute(
        "UPDATE results SET status = ?, record = ?, created = ?, mac = ? WHERE sample = 1",
        (status, json.dumps(record), created, mac),
    )
    con.execute("UPDATE results SET status = 'infra' WHERE sample = 0")  # the status column is covered too
    con.commit()
    con.close()
    with RunStore(tmp_path) as store:
        assert store.results() == [] and store.statuses() == {}
        assert store.unauthenticated() == {"results": [(TINY, 0, "host-cpu"), (TINY, 1, "host-cpu")]}

    good = tmp_path / "good"
    with RunStore(good) as store:
        store.put(honest(0))
        store.set_meta("eval_config", {"threads": 1})
    monkeypatch.setenv("EKB_STORE_KEY", str(tmp_path / "another-machine.key"))
    with RunStore(good) as store:  # another key: the same as no MAC
        assert store.results() == [] and store.get_meta("eval_config") is None
        assert set(store.unauthenticated()) == {"results", "meta"}


def test_a_row_that_is_not_even_text_or_json_does_not_break_the_store(tmp_path):
    with RunStore(tmp_path) as store:
        store.put(honest(0))
    con = sqlite3.connect(tmp_path / "results.db")
    con.execute(
        "INSERT INTO results VALUES (?, 1, 'host-cpu', 'correct', CAST(? AS TEXT), 'yesterday', NULL)",
        (TINY, b"\xff\xfe not utf-8, not json"),
    )
    con.commit()
    con.close()
    with RunStore(tmp_path) as store:
        assert [r.sample for r in store.results()] == [0] and store.created_range()
        assert store.unauthenticated() == {"results": [(TINY, 1, "host-cpu")]}
        with pytest.raises(RunDirError, match="is not a JSON record"):  # one line when told to trust it
            store.results(trust_unauthenticated=True)


# --------------------------------------------------------------------------------------------- key
def test_the_key_lives_outside_the_run_directory_and_is_made_once(tmp_path, monkeypatch):
    monkeypatch.delenv("EKB_STORE_KEY")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    path = store_key_path()
    assert path == tmp_path / "config" / "edgekernelbench" / "store.key"
    key = load_store_key()
    assert len(key) == 32 and path.read_bytes() == key
    assert path.stat().st_mode & 0o777 == 0o600
    assert load_store_key() == key
    assert not list(path.parent.glob(".store.key.*"))  # no temporary file left
    path.write_bytes(b"short")
    with pytest.raises(StoreKeyError, match="not a run-store key"):
        RunStore(tmp_path / "run")


RACE = textwrap.dedent(
    """
    import sys, time
    from edgekernelbench.store import load_store_key
    while time.time() < float(sys.argv[2]):
        pass
    print(load_store_key(__import__("pathlib").Path(sys.argv[1])).hex())
    """
)


def test_processes_racing_to_create_the_key_end_with_one(tmp_path):
    path = tmp_path / "keys" / "store.key"
    start = time.time() + 2.0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACE, str(path), str(start)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(6)
    ]
    keys = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert keys == {path.read_bytes().hex()}
