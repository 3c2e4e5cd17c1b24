"""The held-out zoo (problems/zoo.py): at least 10 edge models outside the suite, never in a level's default
selection, each a valid problem (its graph checks, the oracle runs it, TVM imports it, the IR verifier
passes its reference), in exporters' habits the suite does not have."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_cli import ekb

from edgekernelbench.problems import get_problem, select

ZOO = [p.id for p in select(suite="zoo")]


def test_the_zoo_is_held_out_of_every_default_selection():
    assert len(ZOO) >= 10
    everything = {p.id for p in select()}
    assert not set(ZOO) & everything  # `ekb agent --level 3` and friends never see it
    assert not set(ZOO) & {p.id for p in select(level=3)}
    assert set(ZOO) == {p.id for p in select(suite="zoo", level=3)}
    assert all(get_problem(z).suite == "zoo" and "zoo" in get_problem(z).tags for z in ZOO)
    listed = json.loads(ekb("list", "--suite", "zoo", "--json").stdout)
    assert [x["id"] for x in listed] == ZOO
    assert not set(ZOO) & {x["id"] for x in json.loads(ekb("list", "--json").stdout)}


@pytest.mark.parametrize("pid", ZOO)
def test_a_zoo_model_is_a_valid_problem(pid):
    from edgekernelbench.harness.verify import verify_module
    from edgekernelbench.oracle import Oracle
    from edgekernelbench.reference import build_reference

    p = get_problem(pid)
    oracle = Oracle(p)
    outs = [oracle.run(p.sample_inputs(s))[0].astype(np.float64) for s in range(3)]
    assert all(np.isfinite(o).all() for o in outs)
    # not degenerate: its outputs move with its inputs by far more than the tolerance
    assert float(np.std(np.stack(outs), axis=0).mean()) > 10 * max(p.atol, 1e-4), pid
    ref = build_reference(p)
    verify_module(ref.module, ref.module)
    assert p.flops > 0 and ref.kernel_calls()


def test_the_zoo_keeps_its_exporters_habits():
    squeeze = get_problem("L3/zoo_squeezenet")
    assert squeeze.model.opset_import[0].version == 9
    assert any(v.startswith("fire2/") for v in squeeze.renaming.original.values())  # Caffe2's names
    assert "Dropout" in {n.op_type for n in squeeze.model.graph.node}
    assert "LRN" in {n.op_type for n in get_problem("L3/zoo_inception_v1").model.graph.node}
    resnet = get_problem("L3/zoo_resnet18_bn")
    assert sum(n.op_type == "BatchNormalization" for n in resnet.model.graph.node) == 20
    assert any(v.startswith("onnx::") for v in resnet.renaming.original.values())  # PyTorch's names
    tf = get_problem("L3/zoo_efficientnet_lite0")
    assert any(v.startswith("efficientnet-lite0/model/") and ":0" in v for v in tf.renaming.original.values())
    ops = {n.op_type for n in get_problem("L3/zoo_unet_small").model.graph.node}
    assert {"Resize", "Concat"} <= ops


# the int8 model's oracle (onnx.reference, exact) takes minutes per judgment: its build, IR and oracle are
# checked above, and the suite's int8 models are judged through the same QDQ path (test_suite_l3)
@pytest.mark.parametrize("pid", ["L3/zoo_tcresnet8_kws", "L3/zoo_mlp_autoencoder_bn"])
def test_a_zoo_models_reference_is_judged_correct(pid):
    from edgekernelbench.generators.reference_candidates import reference_spec
    from edgekernelbench.harness.api import evaluate

    p = get_problem(pid)
    r = evaluate(pid, reference_spec(p), trials=2, measure=False)
    assert r.correct, r.detail
