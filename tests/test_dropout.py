"""Dropout left in a model (old exporters, Caffe2's SqueezeNet and Inception v1) does not keep the search
from channels last (ir/dropout.py): Relax imports it as a tuple (output, mask), on which ConvertLayout
fails for the whole graph."""

from __future__ import annotations

import pytest

from edgekernelbench.errors import EKBError

PID = "L1/tiny_conv_concat_dropout"


def test_channels_last_takes_dropout_as_the_identity_and_the_judge_finds_it_correct():
    from edgekernelbench.agents.leka import Whole, build_spec
    from edgekernelbench.harness.api import evaluate
    from edgekernelbench.problems import get_problem
    from edgekernelbench.search.graph import DROPOUT_AS_IDENTITY, NHWC, graph_alternatives, graph_key
    from edgekernelbench.search.kernels import kernels

    problem = get_problem(PID)
    (label, passes), *_ = graph_alternatives(problem, "host-cpu")
    assert passes == DROPOUT_AS_IDENTITY + NHWC and "Dropout as the identity" in label
    ks = kernels(PID, graph_key(passes))
    names = " ".join(k.name for k in ks)
    # no dropout kernel, and the concatenation stays channels last (no transposes out of it and back)
    assert "dropout" not in names and "transpose" not in next(k.name for k in ks if "concat" in k.name)
    with pytest.raises(EKBError, match="Expected nested to match tuple"):  # TVM 0.27 without the pass
        kernels(PID, graph_key(NHWC))
    workloads = {k.name: k.workload for k in ks}
    spec = build_spec(problem, {}, "test", None, workloads, Whole(list(passes)))
    res = evaluate(PID, spec, "host-cpu", trials=2, measure=False)
    assert res.correct, res.detail


def test_a_dropout_whose_mask_is_used_keeps_its_values():
    """The mask output of an inference Dropout is every element kept: ones where the pass removes the call."""
    import numpy as np
    import onnx
    import tvm
    from onnx import TensorProto, helper
    from tvm import relax

    from edgekernelbench.ir.dropout import dropout_pass
    from edgekernelbench.reference import relax_from_onnx

    nodes = [
        helper.make_node("Dropout", ["x"], ["y", "mask"], ratio=0.5),
        helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["y", "m"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    onnx.checker.check_model(model)
    mod = dropout_pass()(relax_from_onnx(model))
    assert "dropout" not in mod.script()
    ex = tvm.compile(mod, "llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    x = np.arange(6, dtype="float32").reshape(2, 3)
    np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(x)).numpy(), x + 1)
