"""ekb add-model: a user's ONNX model becomes a problem in the user suite; bad files get one clear line."""

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def small_model(path, batch="N", op="Relu"):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((16, 8)) * 0.3).astype("float32"), "w")
    b = numpy_helper.from_array((rng.standard_normal(16) * 0.1).astype("float32"), "b")
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1), helper.make_node(op, ["h"], ["y"])]
    g = helper.make_graph(
        nodes,
        "user_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 16])],
        initializer=[w, b],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def ekb(suite, *args):
    env = {**os.environ, "EKB_USER_SUITE": str(suite)}
    return subprocess.run(
        [sys.executable, "-m", "edgekernelbench.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def one_line_error(p, needle):
    assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], p.stderr


def test_add_model_registers_and_evaluates(tmp_path):
    suite = tmp_path / "suite"
    model = small_model(tmp_path / "net.onnx")
    p = ekb(suite, "add-model", model, "--id", "my_net", "--domain", "sensors", "--input", "x=2x8")
    assert p.returncode == 0, p.stderr
    meta = json.loads((suite / "my_net" / "problem.json").read_text())
    assert meta["id"] == "L3/my_net" and meta["domain"] == "sensors"
    listed = json.loads(ekb(suite, "list", "--level", "3", "--json").stdout)
    assert "L3/my_net" in [x["id"] for x in listed]
    # the built-in suite is untouched: without the user suite the problem does not exist
    assert "L3/my_net" not in [x["id"] for x in json.loads(ekb(tmp_path / "empty", "list", "--json").stdout)]
    # and it can be judged like any problem (the worker sees the user suite)
    run = tmp_path / "run"
    assert ekb(suite, "generate", "--out", run, "--problem", "L3/my_net", "--level", "3").returncode == 0
    ev = ekb(suite, "eval", run, "--no-measure", "--trials", "2")
    assert ev.returncode == 0 and "evaluated 2 (2 correct)" in ev.stdout, ev.stdout + ev.stderr
    one_line_error(ekb(suite, "add-model", model, "--id", "my_net", "--input", "x=2x8"), "exists already")


@pytest.mark.parametrize(
    "setup, args, needle",
    [
        ("dynamic", [], "dynamic dimension"),
        ("notonnx", [], "not an ONNX model"),
        ("missing", [], "no such file"),
        ("unsupported", ["--input", "x=1x8"], "cannot import"),
        ("dynamic", ["--input", "y=1x8"], "not model inputs"),
        ("dynamic", ["--input", "x=1x8x3"], "rank"),
        ("dynamic", ["--input", "x=abc"], "expected NAME=D1xD2"),
    ],
)
def test_add_model_bad_input(tmp_path, setup, args, needle):
    path = tmp_path / "m.onnx"
    if setup == "dynamic":
        small_model(path)
    elif setup == "notonnx":
        path.write_text("this is not a protobuf")
    elif setup == "unsupported":
        small_model(path, batch=1, op="Celu")
    p = ekb(tmp_path / "suite", "add-model", path, "--id", "bad_net", *args)
    one_line_error(p, needle)
    assert not (tmp_path / "suite" / "bad_net").exists()
