"""Models as exporters write them work through add-model, eval, agent and deploy (issue 48, part 1).

Two small conv nets generated here, each in the habits of real exporters:
- names: TensorFlow's `model/conv2d/BiasAdd:0`, PyTorch's `onnx::Conv_123` and `/features/0/Conv_output_0`,
  Caffe2's `gpu_0/data_0`, a leading digit, non-ASCII letters, a Python keyword, TVMScript's own `T`, and
  two names that collide once made identifiers (`a/b` and `a_b`);
- an old exporter: opset 9, initializers also listed as graph inputs, a weight made by a Constant node and
  one by ConstantOfShape, Dropout and Identity left in, BatchNormalization not folded.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_add_model import ekb

from edgekernelbench.problems.names import identifier, identifier_names, is_identifier


def exporter_names_model(path):
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype("float32"), "onnx::Conv_123")
    b = numpy_helper.from_array((rng.standard_normal(4) * 0.1).astype("float32"), "model/conv2d/BiasAdd:0")
    s = numpy_helper.from_array(np.full((1, 4, 1, 1), 0.5, "float32"), "a/b")
    t = numpy_helper.from_array(np.full((1, 4, 1, 1), 0.25, "float32"), "a_b")
    nodes = [
        helper.make_node(
            "Conv",
            ["gpu_0/data_0", "onnx::Conv_123", "model/conv2d/BiasAdd:0"],
            ["/features/0/Conv_output_0"],
            pads=[1, 1, 1, 1],
            name="/features/0/Conv",
        ),
        helper.make_node("Relu", ["/features/0/Conv_output_0"], ["0"], name="0"),
        helper.make_node("Mul", ["0", "a/b"], ["lambda"], name="mul:0"),
        helper.make_node("Add", ["lambda", "a_b"], ["T"], name="T"),
        helper.make_node("Sigmoid", ["T"], ["sortie_é"], name="sigmoïde"),
    ]
    g = helper.make_graph(
        nodes,
        "tf2onnx/exported",
        [helper.make_tensor_value_info("gpu_0/data_0", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("sortie_é", TensorProto.FLOAT, [1, 4, 8, 8])],
        initializer=[w, b, s, t],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def old_exporter_model(path):
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype("float32"), "conv1_w_0")
    scale = numpy_helper.from_array((1 + 0.1 * rng.standard_normal(4)).astype("float32"), "bn_scale")
    bias = numpy_helper.from_array((0.1 * rng.standard_normal(4)).astype("float32"), "bn_bias")
    mean = numpy_helper.from_array((0.1 * rng.standard_normal(4)).astype("float32"), "bn_mean")
    var = numpy_helper.from_array((1 + 0.1 * rng.random(4)).astype("float32"), "bn_var")
    inits = [w, scale, bias, mean, var]
    nodes = [
        helper.make_node(
            "Constant",
            [],
            ["conv1_b_0"],
            value=numpy_helper.from_array((0.05 * rng.standard_normal(4)).astype("float32")),
        ),
        helper.make_node(
            "Constant", [], ["fc_shape"], value=numpy_helper.from_array(np.array([1, 4], "int64"))
        ),
        helper.make_node(
            "ConstantOfShape",
            ["fc_shape"],
            ["fc_b_0"],
            value=numpy_helper.from_array(np.array([0.125], "float32")),
        ),
        helper.make_node("Conv", ["data_0", "conv1_w_0", "conv1_b_0"], ["conv1_1"], pads=[1, 1, 1, 1]),
        helper.make_node(
            "BatchNormalization",
            ["conv1_1", "bn_scale", "bn_bias", "bn_mean", "bn_var"],
            ["bn_1"],
            epsilon=1e-5,
        ),
        helper.make_node("Relu", ["bn_1"], ["relu_1"]),
        helper.make_node("Dropout", ["relu_1"], ["drop_1"], ratio=0.5),
        helper.make_node("Identity", ["drop_1"], ["id_1"]),
        helper.make_node("GlobalAveragePool", ["id_1"], ["pool_1"]),
        helper.make_node("Flatten", ["pool_1"], ["flat_1"], axis=1),
        helper.make_node("Add", ["flat_1", "fc_b_0"], ["prob_1"]),
    ]
    value_inputs = [helper.make_tensor_value_info("data_0", TensorProto.FLOAT, [1, 3, 8, 8])]
    value_inputs += [helper.make_tensor_value_info(i.name, TensorProto.FLOAT, list(i.dims)) for i in inits]
    g = helper.make_graph(
        nodes,
        "old_caffe2_export",
        value_inputs,  # initializers listed as graph inputs too, as exporters before IR version 4 did
        [helper.make_tensor_value_info("prob_1", TensorProto.FLOAT, [1, 4])],
        initializer=inits,
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 3
    onnx.save(model, str(path))
    return path


def test_names_become_distinct_identifiers_and_map_back():
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        model = onnx.load(str(exporter_names_model(Path(d) / "m.onnx")))
    renamed, renaming = identifier_names(model)
    g = renamed.graph
    names = [v.name for v in (*g.input, *g.output)] + [t.name for t in g.initializer]
    names += [x for n in g.node for x in (*n.input, *n.output)]
    assert all(is_identifier(n) for n in names), names
    assert len({t.name for t in g.initializer}) == 4  # a/b and a_b stay two tensors
    assert renaming.name(g.input[0].name) == "gpu_0/data_0" and renaming.name(g.output[0].name) == "sortie_é"
    assert identifier("0") == "t_0" and identifier("lambda") == "lambda_" and identifier("T") == "T_"
    onnx.checker.check_model(renamed, full_check=True)
    same, none = identifier_names(renamed)  # identifiers stay as they are
    assert same is renamed and not none.original


@pytest.mark.parametrize(
    "make", [exporter_names_model, old_exporter_model], ids=["exporter names", "opset 9"]
)
def test_an_exported_model_goes_through_add_model_eval_agent_and_deploy(tmp_path, make):
    suite = tmp_path / "suite"
    src = make(tmp_path / "net.onnx")
    p = ekb(suite, "add-model", src, "--id", "exported", "--domain", "vision")
    assert p.returncode == 0, p.stderr
    run = tmp_path / "run"
    assert ekb(suite, "generate", "--out", run, "--problem", "L3/exported", "--level", "3").returncode == 0
    ev = ekb(suite, "eval", run, "--no-measure", "--trials", "2")
    assert ev.returncode == 0 and "evaluated 2 (2 correct)" in ev.stdout, ev.stdout + ev.stderr
    if (
        make is exporter_names_model
    ):  # the search on names as exporters write them (opset 9's are identifiers)
        _search(suite, tmp_path)
    out = tmp_path / "artifact"
    dep = ekb(suite, "deploy", "L3/exported", "--out", out, "--no-db", "--no-measure")
    assert dep.returncode == 0 and "verified: 3/3" in dep.stdout, dep.stdout + dep.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    original = onnx.load(str(src)).graph
    assert [i.get("onnx_name", i["name"]) for i in manifest["inputs"]] == [original.input[0].name]
    assert [o.get("onnx_name", o["name"]) for o in manifest["outputs"]] == [original.output[0].name]


def _search(suite, tmp_path):
    """LEKA on the added model, briefly: it runs to the end."""
    agent = ekb(
        suite,
        "agent",
        "--problem",
        "L3/exported",
        "--methods",
        "leka",
        "--budget",
        "3",
        "--quick",
        "--no-reuse",
        "--level",
        "3",
        "--out",
        tmp_path / "agent",
        "--kernel-db",
        tmp_path / "db.sqlite",
    )
    assert agent.returncode == 0 and "Traceback" not in agent.stderr, agent.stdout + agent.stderr
