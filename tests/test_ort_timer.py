"""ONNX Runtime is timed as a deployed C program runs it: the native timer (a C loop over RunWithBinding)
builds, gives exactly the Python session's outputs, and any failure of it falls back to Python I/O
binding with the reason on record; `ekb baseline` shows each contender's timer floor."""

import json
import shutil
import subprocess

import numpy as np
import pytest
from test_cli import ekb
from test_harness import CORRECT, judge

from edgekernelbench import native
from edgekernelbench.baselines import ort_native
from edgekernelbench.baselines.onnxruntime import NATIVE, PY_IOBINDING, ort_contender
from edgekernelbench.harness.timing import TimingConfig
from edgekernelbench.onnxrt import ort_session
from edgekernelbench.problems import get_problem

PROBLEM = "L1/tiny_scale_add"

needs_cc = pytest.mark.skipif(native.c_compiler() is None, reason="no C compiler (cc, gcc or $CC)")


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    if native.c_compiler() is None:
        pytest.skip("no C compiler (cc, gcc or $CC)")
    return str(ort_native.build_library(tmp_path_factory.mktemp("cache")))


def _problem_and_inputs(pid=PROBLEM):
    p = get_problem(pid)
    return p, p.sample_inputs(3)


@needs_cc
def test_the_library_is_built_once_per_source_and_onnxruntime_version(tmp_path, monkeypatch):
    first = ort_native.build_library(tmp_path)
    assert first.parent == tmp_path and ort_native.library_key() in first.name
    stamp = first.stat().st_mtime_ns
    assert ort_native.build_library(tmp_path) == first and first.stat().st_mtime_ns == stamp  # cached
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temporary file left behind
    monkeypatch.setattr(ort_native, "ort_version", lambda: "0.0.0")  # another onnxruntime: another build
    other = ort_native.build_library(tmp_path)
    assert other != first and sorted(p.name for p in tmp_path.iterdir()) == sorted([first.name, other.name])


def test_native_timer_outputs_equal_the_python_sessions(lib):
    p, inputs = _problem_and_inputs()
    sess = ort_session(p.model, threads=1, optimize=True)
    names = [o.name for o in sess.get_outputs()]
    expected = sess.run(names, inputs)
    outs = {n: np.full_like(e, np.nan) for n, e in zip(names, expected, strict=True)}
    timer = ort_native.NativeORTTimer(lib, p.model.SerializeToString(), inputs, outs, threads=1)
    import onnxruntime

    assert timer.version == onnxruntime.__version__
    timer.run_once()
    for n, e in zip(names, expected, strict=True):
        assert np.array_equal(outs[n], e)
    assert timer.run(20) > 0
    timer.close()


def test_the_contender_is_native_and_returns_positive_seconds(lib):
    p, inputs = _problem_and_inputs()
    run, how = ort_contender(p, inputs, 1, lib)
    assert how == {"timer": NATIVE, "library": lib, "input_sets": 1}
    assert run(1) > 0 and run(50) > 0


def test_a_bad_library_path_falls_back_to_python_iobinding_and_says_why(tmp_path):
    p, inputs = _problem_and_inputs()
    run, how = ort_contender(p, inputs, 1, str(tmp_path / "missing.so"))
    assert how["timer"] == PY_IOBINDING and "cannot load the native ONNX Runtime timer" in how["why"]
    assert run(10) > 0


def test_a_wrong_c_api_slot_is_caught_at_set_up(lib, tmp_path):
    """A variant of the C file that calls BindInput where it means BindOutput: caught, not timed."""
    src = ort_native.SOURCE.read_text()
    assert "S_BIND_OUTPUT = 137" in src
    variant = tmp_path / "variant.c"
    variant.write_text(src.replace("S_BIND_OUTPUT = 137", "S_BIND_OUTPUT = 136"))
    subprocess.run(
        [native.c_compiler(), "-O2", "-shared", "-fPIC", "-o", tmp_path / "v.so", variant], check=True
    )
    p, inputs = _problem_and_inputs()
    run, how = ort_contender(p, inputs, 1, str(tmp_path / "v.so"))
    assert how["timer"] == PY_IOBINDING and "BindOutput" in how["why"]
    assert run(5) > 0


def test_outputs_the_native_run_did_not_write_are_caught(lib, monkeypatch):
    monkeypatch.setattr(ort_native.NativeORTTimer, "run_once", lambda self: None)  # runs nothing
    p, inputs = _problem_and_inputs()
    run, how = ort_contender(p, inputs, 1, lib)
    assert how["timer"] == PY_IOBINDING and "differs from the Python session's" in how["why"]


def test_evaluate_records_the_native_timer(lib, monkeypatch):
    monkeypatch.setenv(ort_native.LIB_ENV, lib)
    r = judge(CORRECT, measure=True, timing=TimingConfig.quick(), trials=1)
    assert r.correct and r.baselines["onnxruntime"].median > 0, r.detail
    assert r.extra["onnxruntime_timer"] == {"timer": NATIVE, "library": lib, "input_sets": 3}


def test_evaluate_falls_back_when_the_parent_cannot_build_it(tmp_path, monkeypatch):
    monkeypatch.delenv(ort_native.LIB_ENV, raising=False)
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    r = judge(CORRECT, measure=True, timing=TimingConfig.quick(), trials=1)
    assert r.correct and r.baselines["onnxruntime"].median > 0, r.detail
    how = r.extra["onnxruntime_timer"]
    assert how["timer"] == PY_IOBINDING and "could not build the native ONNX Runtime timer" in how["why"]


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")
def test_baseline_shows_the_timer_floors(tmp_path):
    out = json.loads(
        ekb("baseline", "--problem", PROBLEM, "--out", tmp_path, "--quick", "--json", check=True).stdout
    )
    floors = out["floors"]
    assert set(floors["seconds"]) == {
        "tvm",
        "onnxruntime",
        "onnxruntime-python-iobinding",
        "onnxruntime-python-run",
    }
    assert all(s > 0 for s in floors["seconds"].values())
    assert floors["onnxruntime_timer"]["timer"] == NATIVE and floors["threads"] == 1
    assert out["baselines"][PROBLEM]["onnxruntime"] > 0
    from edgekernelbench.store import RunStore

    with RunStore(tmp_path) as store:
        assert store.get_meta("floors:host-cpu:1") == floors
    text = ekb("baseline", "--problem", PROBLEM, "--out", tmp_path, "--quick", check=True).stdout  # stored
    assert "timer floors" in text and "C loop over RunWithBinding" in text
    for name in floors["seconds"]:
        assert name in text
