"""The SQLite run store: round trips, upserts, resume, crash safety, refusal of foreign files."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from edgekernelbench.errors import RunDirError
from edgekernelbench.records import (
    Correctness,
    KernelTime,
    Plausibility,
    Result,
    Roofline,
    StatelessTiming,
    Timing,
    TimingEnv,
)
from edgekernelbench.store import SCHEMA_VERSION, RunStore


def full_result(problem="L1/dwconv3x3_kws", sample=0, backend="llvm") -> Result:
    t = Timing(median=1.5e-5, iqr=1e-7, min=1.4e-5, max=1.9e-5, count=10, number=100)
    return Result(
        problem=problem,
        sample=sample,
        backend=backend,
        compiled=True,
        correct=True,
        correctness=Correctness(
            correct=True, trials=3, max_abs_err=[1e-6, 2e-7], max_rel_err=[1e-5, 0.0], reason=None
        ),
        runtime=t,
        baselines={"onnxruntime": Timing(3e-5, 2e-7, 2.9e-5, 3.5e-5, 10, 100)},
        speedups={"onnxruntime": 2.0, "tvm-default": 1.25},
        timing_status="measured",
        flops=123456,
        bytes=7890,
        compile_seconds=1.25,
        eval_seconds=0.5,
        candidate="cands/a.py",
        spec_hash="abc123",
        method="test",
        oracle="onnx-reference",
        roofline=Roofline(1e9, 2e9, 0.5, 3e9, 0.31, "memory", "L2", 4e9),
        plausibility=Plausibility("plausible", 1.5e-5, stateless_ratio=0.9, bound_s=1e-6),
        timing_env=TimingEnv(cpus=[1], other_cpus_busy=0.02, preemptions=3, seconds=0.4, pinned_cpu=1),
        stateless=StatelessTiming(0.9, 1.3e-5, 1.5e-5, 15, [KernelTime("k", 1.3e-5)]),
        kernels=[KernelTime("k", 1.4e-5, flops=123456, iqr=1e-7, share=1.0)],
        baseline_kernels={"tvm-default": [KernelTime("k", 2e-5, share=1.0)]},
        extra={
            "notes": ["x", 1],
            "onnxruntime_output": {"matches_oracle": False, "max_abs_err": 98304.0},
        },
    )


def test_round_trip(tmp_path):
    run = tmp_path / "run"  # created on demand
    r = full_result()
    with RunStore(run) as st:
        assert not st.has(r.problem, r.sample, r.backend)
        st.put(r)
        assert st.has(r.problem, r.sample, r.backend)
        assert not st.has(r.problem, r.sample, "cuda")
        got = st.results()
    assert (run / "results.db").is_file()
    assert got == [r]
    assert isinstance(got[0].runtime, Timing) and isinstance(got[0].correctness, Correctness)
    assert isinstance(got[0].baselines["onnxruntime"], Timing)

    with RunStore(run) as st:  # reopened
        assert st.results("llvm") == [r]
        assert st.results("cuda") == []
        assert st.results(problems=["L1/other"]) == []
        assert st.get_meta("schema_version") == SCHEMA_VERSION


def test_record_from_before_the_oracle_field_loads(tmp_path):
    """A store written before Result.oracle existed still loads (oracle "": unknown); the row edited by
    hand here no longer authenticates, so only a trusting read returns it."""
    with RunStore(tmp_path) as st:
        st.put(full_result())
    record = full_result().to_dict()
    del record["oracle"]
    con = sqlite3.connect(tmp_path / "results.db")
    con.execute("UPDATE results SET record = ?", (json.dumps(record),))
    con.commit()
    con.close()
    with RunStore(tmp_path) as st:
        assert st.results() == []
        (got,) = st.results(trust_unauthenticated=True)
    assert got.oracle == "" and got == Result.from_dict(record)
    assert got.extra["onnxruntime_output"]["matches_oracle"] is False


def test_a_record_from_before_the_typed_fields_reads_them_from_extra():
    """Before roofline, plausibility, timing_env, the stateless timing and the kernel profiles were fields
    of Result, a record kept them in `extra` (a baseline's profile as "kernels:<name>"): read back into the
    fields, the rest of extra kept; malformed profile rows (a runner's reply is hostile) are left out."""
    new = full_result()
    old = new.to_dict()
    old["extra"] = {
        **old["extra"],
        "roofline": old.pop("roofline"),
        "plausibility": old.pop("plausibility"),
        "timing_env": old.pop("timing_env"),
        "stateless_timing": old.pop("stateless"),
        "kernels": old.pop("kernels"),
        "kernels:tvm-default": old.pop("baseline_kernels")["tvm-default"] + [{"kernel": 3}, "junk"],
    }
    got = Result.from_dict(json.loads(json.dumps(old)))
    assert got == new
    assert got.implausible is False and got.roofline.level == "L2" and got.stateless.kernels[0].kernel == "k"
    assert Result.from_dict(
        {"problem": "p", "sample": 0, "backend": "b", "roofline": {"fraction": 2.0}}
    ).roofline
    assert Result.from_dict({"problem": "p", "sample": 0, "backend": "b"}).roofline is None


def test_wal_mode(tmp_path):
    with RunStore(tmp_path):
        pass
    con = sqlite3.connect(tmp_path / "results.db")
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.close()


def test_upsert_and_status(tmp_path):
    with RunStore(tmp_path) as st:
        r = full_result()
        st.put(r)
        bad = full_result().failure("wrong_output", "mismatch at [0, 3]")
        st.put(bad)
        got = st.results()
        assert len(got) == 1 and got[0].reason == "wrong_output" and not got[0].correct
        assert st.statuses() == {(r.problem, 0, "llvm"): "wrong_output"}


def test_done_keys_and_filters(tmp_path):
    with RunStore(tmp_path) as st:
        for p in ("L1/a", "L2/b"):
            for s in range(3):
                st.put(full_result(p, s, "llvm"))
        st.put(full_result("L1/a", 0, "cuda"))
        assert st.done_keys("llvm") == {(p, s) for p in ("L1/a", "L2/b") for s in range(3)}
        assert st.done_keys("cuda") == {("L1/a", 0)}
        assert st.done_keys("vulkan") == set()
        assert [(r.problem, r.sample) for r in st.results("llvm", problems=["L2/b"])] == [
            ("L2/b", 0),
            ("L2/b", 1),
            ("L2/b", 2),
        ]
        assert len(st.results()) == 7


def test_baselines_and_meta(tmp_path):
    t = Timing(3e-5, 2e-7, 2.9e-5, 3.5e-5, 10, 100)
    with RunStore(tmp_path) as st:
        st.put_baseline("L1/a", "llvm", "onnxruntime", t, {"threads": 1})
        st.put_baseline("L1/a", "llvm", "tvm-default", {"median": 1.0}, {})
        st.put_baseline("L1/a", "cuda", "tvm-default", {"median": 2.0}, {})
        st.put_baseline("L1/a", "llvm", "tvm-default", {"median": 0.5}, {"again": True})  # upsert
        bl = st.baselines("llvm")
        assert set(bl) == {("L1/a", "llvm", "onnxruntime"), ("L1/a", "llvm", "tvm-default")}
        assert Timing(**bl[("L1/a", "llvm", "onnxruntime")]["timing"]) == t
        assert bl[("L1/a", "llvm", "onnxruntime")]["extra"] == {"threads": 1}
        assert bl[("L1/a", "llvm", "tvm-default")]["timing"] == {"median": 0.5}
        assert len(st.baselines()) == 3
        assert st.get_baseline("L1/a", "cuda", "tvm-default")["timing"] == {"median": 2.0}
        assert st.get_baseline("L1/z", "cuda", "tvm-default") is None

        st.set_meta("spec", {"target": "llvm", "problems": ["L1/a"]})
        st.set_meta("spec", {"target": "llvm -mcpu=native"})
        assert st.get_meta("spec") == {"target": "llvm -mcpu=native"}
        assert st.get_meta("missing", 42) == 42
        with pytest.raises(ValueError):
            st.set_meta("schema_version", 99)


def test_closed_store_raises(tmp_path):
    st = RunStore(tmp_path)
    st.close()
    st.close()  # idempotent
    with pytest.raises(RunDirError):
        st.results()


WRITER = textwrap.dedent(
    """
    import os, signal, sys
    from edgekernelbench.records import Result, Timing
    from edgekernelbench.store import RunStore

    st = RunStore(sys.argv[1])
    for i in range(20):
        if i == int(sys.argv[2]):
            os.kill(os.getpid(), signal.SIGKILL)
        st.put(Result(problem="L1/a", sample=i, backend="llvm", compiled=True, correct=True,
                      runtime=Timing(1e-5, 0.0, 1e-5, 1e-5, 1, 1), speedups={"onnxruntime": 1.5}))
    print("not killed")
    """
)


def test_survives_sigkill(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-c", WRITER, str(run), "7"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "not killed" not in proc.stdout
    with RunStore(run) as st:
        assert st.done_keys("llvm") == {("L1/a", i) for i in range(7)}
        rs = st.results()
        assert [r.sample for r in rs] == list(range(7))
        assert all(r.runtime == Timing(1e-5, 0.0, 1e-5, 1e-5, 1, 1) for r in rs)
        st.put(full_result("L1/a", 7))  # still writable: the resumed run carries on
        assert len(st.results()) == 8


def test_not_sqlite(tmp_path):
    (tmp_path / "results.db").write_text("this is not a database\n" * 10)
    with pytest.raises(RunDirError, match="not an SQLite database"):
        RunStore(tmp_path)


def test_foreign_sqlite_db(tmp_path):
    con = sqlite3.connect(tmp_path / "results.db")
    con.execute("CREATE TABLE other (x)")
    con.commit()
    con.close()
    with pytest.raises(RunDirError, match="not an EdgeKernelBench run store"):
        RunStore(tmp_path)


def test_newer_schema_refused(tmp_path):
    with RunStore(tmp_path):
        pass
    con = sqlite3.connect(tmp_path / "results.db")
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (json.dumps(SCHEMA_VERSION + 1),))
    con.commit()
    con.close()
    with pytest.raises(RunDirError, match="newer"):
        RunStore(tmp_path)


def test_run_dir_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(RunDirError):
        RunStore(f)


def test_every_reader_returns_authenticated_rows_unless_told_to_trust(tmp_path):
    """Each table's rows carry a MAC (store.py); a row edited by hand is left out of every reader's answer
    by default, returned with trust_unauthenticated=True, and listed by unauthenticated()."""
    with RunStore(tmp_path) as st:
        st.put(full_result("L1/a", 0))
        st.put_baseline("L1/a", "llvm", "tvm-default", {"median": 1.0}, {})
        st.set_meta("spec", {"x": 1})
        st.put_generation("L1/a", 0, {"model": "m"})
        st.put_agent_step("L1/a", "leka", 0, {"verdict": "ok"})
        st.put_agent_run("L1/a", "leka", {"status": "done"})
        assert st.unauthenticated() == {}
    con = sqlite3.connect(tmp_path / "results.db")
    for table, column in (
        ("results", "record"),
        ("baselines", "record"),
        ("meta", "value"),
        ("generations", "record"),
        ("agent_steps", "record"),
        ("agent_runs", "record"),
    ):
        con.execute(
            f"UPDATE {table} SET {column} = {column} || ' '"
            + (" WHERE key = 'spec'" if table == "meta" else "")
        )
    con.commit()
    con.close()
    with RunStore(tmp_path) as st:
        assert st.unauthenticated() == {
            "results": [("L1/a", 0, "llvm")],
            "baselines": [("L1/a", "llvm", "tvm-default")],
            "meta": [("spec",)],
            "generations": [("L1/a", 0)],
            "agent_steps": [("L1/a", "leka", 0)],
            "agent_runs": [("L1/a", "leka")],
        }
        assert st.results() == [] and st.statuses() == {} and not st.has("L1/a", 0, "llvm")
        assert st.done_keys("llvm") == set() and st.created_range() is None
        assert st.baselines() == {} and st.get_baseline("L1/a", "llvm", "tvm-default") is None
        assert st.get_meta("spec") is None and st.meta_keys() == ["schema_version"]
        assert st.generations() == [] and st.agent_steps() == [] and st.agent_runs() == {}
        trust = {"trust_unauthenticated": True}
        assert st.results(**trust) == [full_result("L1/a", 0)] and st.has("L1/a", 0, "llvm", **trust)
        assert st.statuses(**trust) == {("L1/a", 0, "llvm"): "correct"} and st.created_range(**trust)
        assert st.baselines(**trust)[("L1/a", "llvm", "tvm-default")]["timing"] == {"median": 1.0}
        assert st.get_meta("spec", **trust) == {"x": 1} and st.meta_keys(**trust) == [
            "schema_version",
            "spec",
        ]
        assert st.generations(**trust) == [{"model": "m"}] and st.agent_runs(**trust)
        assert st.agent_steps(**trust)[0]["verdict"] == "ok"
        st.set_meta("spec", {"x": 2})  # written again: authenticated again
        assert st.get_meta("spec") == {"x": 2} and "meta" not in st.unauthenticated()
