"""The Level-1 suite: every problem passes its self-check, and the self-check can fail."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from edgekernelbench.checks import selfcheck
from edgekernelbench.checks.selfcheck import check_problem
from edgekernelbench.oracle import Oracle
from edgekernelbench.problems import Problem, get_problem
from edgekernelbench.problems import level1 as l1
from edgekernelbench.problems.docs import level1_markdown, suite_table_markdown

CATEGORIES = {
    "conv2d",
    "depthwise",
    "pointwise",
    "dense",
    "batch_matmul",
    "pool",
    "softmax",
    "norm",
    "activation",
    "elementwise",
    "resize",
    "int8",
}
DOMAINS = {"vision", "wakeword", "kws", "anomaly", "nlp", "sensors", "audio"}
DOCS = Path(__file__).resolve().parents[1] / "docs" / "problems_l1.md"


@pytest.mark.parametrize("problem", l1.PROBLEMS, ids=lambda p: p.name)
def test_problem_selfcheck(problem):
    res = check_problem(problem, trials=2)
    assert res.ok, "\n".join(res.failures)


# ---------------------------------------------------------------- the suite as a whole
def test_suite_size_and_ids():
    ids = [p.id for p in l1.PROBLEMS]
    assert len(ids) >= 30
    assert len(set(ids)) == len(ids)
    assert all(i.startswith("L1/") for i in ids)
    assert all(get_problem(i) is p for i, p in zip(ids, l1.PROBLEMS, strict=True))
    assert all(p.level == 1 for p in l1.PROBLEMS)


def test_suite_categories_and_domains():
    cats = Counter(p.category for p in l1.PROBLEMS)
    assert set(cats) == CATEGORIES, f"missing {CATEGORIES - set(cats)}, unknown {set(cats) - CATEGORIES}"
    assert {p.domain for p in l1.PROBLEMS} <= DOMAINS
    for p in l1.PROBLEMS:
        assert len(p.source) > 20, p.id  # names the model and the layer
        assert p.tags, p.id


def test_required_layers_present():
    """The brief's anchor layers, by their ONNX op and shape."""

    def ops(p):
        return {n.op_type for n in p.model.graph.node}

    stem = get_problem("L1/conv2d_kws_stem")
    assert stem.inputs[0].shape == (1, 1, 49, 10)
    out = stem.model.graph.output[0].type.tensor_type.shape
    assert [d.dim_value for d in out.dim] == [1, 64, 25, 5]
    assert "LayerNormalization" in ops(get_problem("L1/layernorm_mobilebert_512"))
    assert "Erf" in ops(get_problem("L1/gelu_mobilebert_ffn"))
    assert "ConvInteger" not in set().union(*(ops(p) for p in l1.PROBLEMS))  # not importable by TVM 0.27
    int8 = [p for p in l1.PROBLEMS if p.category == "int8"]
    assert any("MatMulInteger" in ops(p) for p in int8)
    assert any({"QuantizeLinear", "DequantizeLinear", "Conv"} <= ops(p) for p in int8)
    for p in int8:
        if p.model.graph.output[0].type.tensor_type.elem_type == 6:  # int32 outputs are exact
            assert p.atol == 0 and p.rtol == 0, p.id


@pytest.mark.parametrize(
    "pid, args",
    [
        ("L1/convint_kws_stem", (1, 1, 49, 10, 64, (10, 4), 2, [4, 1, 5, 1])),
        ("L1/convint_vww_pw_32x64", (1, 32, 12, 12, 64, 1, 1, [0, 0, 0, 0])),
    ],
)
def test_convinteger_rewrite_equals_native_convinteger(pid, args):
    """The im2col + MatMulInteger graphs compute exactly ONNX ConvInteger (in ONNX Runtime)."""
    problem = get_problem(pid)
    native = Problem(
        id="L1/native",
        level=1,
        domain="kws",
        category="int8",
        source="test",
        graph=l1._conv_integer(*args, native=True),
    )
    assert {n.op_type for n in native.model.graph.node} == {"ConvInteger"}
    for seed in (1, 2):
        inputs = problem.sample_inputs(seed)
        got, want = Oracle(problem).run(inputs)[0], Oracle(native).run(inputs)[0]
        assert got.dtype == want.dtype == np.int32
        np.testing.assert_array_equal(got, want)


def test_docs_table_is_current():
    text = suite_table_markdown(l1.PROBLEMS)
    for p in l1.PROBLEMS:
        assert f"`{p.id}`" in text
    assert DOCS.read_text() == level1_markdown(), (
        "docs/problems_l1.md is stale: run `python -m edgekernelbench.problems.docs`"
    )


# ---------------------------------------------------------------- the self-check can fail
def _bad(name, graph, **kw):
    return Problem(
        id=f"L1/bad_{name}",
        level=1,
        domain="sensors",
        category="elementwise",
        source="test",
        graph=graph,
        **kw,
    )


def res_model(graph):
    return _bad("model", graph).model


def _constant_output(g):
    # global pool over a softmax: every output is 1/16 whatever the input
    x = g.input("x", (1, 4, 16))
    g.output(g.node("ReduceMean", [g.node("Softmax", [x], axis=-1)], axes=[-1], keepdims=0))


def _ignored_weight(g):
    # y = x @ W1 + relu(x @ W2 - 1000): the second branch is always 0, so W2 does not matter
    x = g.input("x", (4, 16))
    y1 = g.node("MatMul", [x, g.weight((16, 8), fan_in=16)])
    dead = g.node(
        "Relu", [g.node("Sub", [g.node("MatMul", [x, g.weight((16, 8), fan_in=16)]), g.const(1000.0)])]
    )
    g.output(g.node("Add", [y1, dead]))


def _ignored_input(g):
    x = g.input("x", (4, 16))
    u = g.input("u", (4, 16))
    g.output(g.node("Add", [x, g.node("Relu", [g.node("Sub", [u, g.const(100.0)])])]))


def _mostly_zero(g):
    # a ReLU after a large negative shift: >99 % zeros
    x = g.input("x", (1, 64, 8, 8))
    g.output(g.node("Relu", [g.node("Sub", [x, g.const(3.0)])]))


def _near_zero(g):
    x = g.input("x", (8, 8))
    g.output(g.node("Mul", [x, g.const(1e-5)]))


def test_selfcheck_fails_constant_output():
    res = check_problem(_bad("constant", _constant_output))
    assert not res.ok
    assert any("constant" in f for f in res.failures), res.failures
    assert any("input x does not affect" in f for f in res.failures), res.failures


def test_selfcheck_fails_ignored_weight():
    res = check_problem(_bad("ignored_weight", _ignored_weight))
    assert not res.ok
    # W1 and the output statistics are fine; the dead branch's weight and constant are not
    assert not any(f.startswith("output") for f in res.failures), res.failures
    nodes = {n.output[0]: n for n in res_model(_ignored_weight).graph.node}
    sub = next(n for n in nodes.values() if n.op_type == "Sub")
    dead = [nodes[sub.input[0]].input[1], sub.input[1]]  # the dead MatMul's weight, the 1000 constant
    assert [f.split()[1] for f in res.failures] == dead, res.failures


def test_selfcheck_fails_ignored_input():
    res = check_problem(_bad("ignored_input", _ignored_input))
    assert not res.ok
    assert any("input u does not affect" in f for f in res.failures), res.failures
    assert not any("input x" in f for f in res.failures), res.failures


def test_selfcheck_fails_mostly_zero_and_near_zero():
    res = check_problem(_bad("mostly_zero", _mostly_zero))
    assert not res.ok and any("share one value" in f for f in res.failures), res.failures
    res = check_problem(_bad("near_zero", _near_zero, atol=1e-7, rtol=1e-7))
    assert not res.ok and any("near zero" in f for f in res.failures), res.failures


def test_selfcheck_fails_tvm_mismatch(monkeypatch):
    """A TVM result off by more than the tolerance is reported."""
    problem = get_problem("L1/softmax_kws_classifier")
    run = selfcheck.TVMReferenceRunner.run
    monkeypatch.setattr(
        selfcheck.TVMReferenceRunner, "run", lambda self, inputs: [y + 1e-3 for y in run(self, inputs)]
    )
    res = check_problem(problem)
    assert not res.ok
    assert any("differs from ONNX Runtime" in f for f in res.failures), res.failures


def test_selfcheck_reports_unimportable_model():
    def graph(g):
        x = g.input("x", (1, 1, 8, 8), "uint8", dist="int", low=0, high=255)
        w = g.int_tensor((2, 1, 3, 3), 0, 255, "uint8")
        g.output(
            g.node("ConvInteger", [x, w, g.const(128, "uint8"), g.const(127, "uint8")], kernel_shape=[3, 3])
        )

    res = check_problem(_bad("convinteger", graph, atol=0.0, rtol=0.0))
    assert not res.ok
    assert any("TVM reference does not import" in f and "ConvInteger" in f for f in res.failures), (
        res.failures
    )


def test_perturbations_change_every_weight_kind():
    rng = np.random.default_rng(0)
    for arr in [
        np.zeros((3,), np.float32),
        np.float32(6.0) * np.ones(()),
        np.array(128, np.uint8),
        np.array(255, np.uint8),
        np.array(0, np.int8),
        np.zeros((8,), np.int32),
        np.array([1, 21, 257, 257], np.int64),
    ]:
        new = selfcheck.perturb_initializer(np.asarray(arr), rng)
        assert new.dtype == np.asarray(arr).dtype and new.shape == np.shape(arr)
        assert not np.array_equal(new, arr), arr


def test_the_suite_page_lists_every_problem():
    from pathlib import Path

    from edgekernelbench.problems.docs import SUITE_END, SUITE_PAGE, SUITE_START, suite_list_markdown

    page = (Path(__file__).parent.parent / SUITE_PAGE).read_text()
    section = page[page.index(SUITE_START) + len(SUITE_START) : page.index(SUITE_END)]
    assert section.strip() == suite_list_markdown().strip(), (
        f"{SUITE_PAGE}'s list of problems is stale: run python -m edgekernelbench.problems.docs --suite-page"
    )
