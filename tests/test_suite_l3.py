"""The Level-3 suite (compact edge models): self-checks, published architectures and parameter counts,
input/output shapes, activation scale through depth, the int8 QDQ variants, and the docs page."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import edgekernelbench.problems.level3 as l3
from edgekernelbench.checks.selfcheck import check_problem
from edgekernelbench.onnxrt import ort_session
from edgekernelbench.oracle import Oracle
from edgekernelbench.problems import get_problem
from edgekernelbench.problems.graph import GraphBuilder

DOMAINS = {"vision", "wakeword", "kws", "anomaly", "nlp", "sensors", "audio"}
DOCS = Path(__file__).resolve().parents[1] / "docs" / "problems_l3.md"
FLOAT = [p for p in l3.PROBLEMS if "int8" not in p.tags]
INT8 = [p for p in l3.PROBLEMS if "int8" in p.tags]


def _problem(name: str):
    return get_problem(f"L3/{name}")


def _initializer_elements(model: onnx.ModelProto) -> int:
    return sum(math.prod(i.dims) for i in model.graph.initializer)


@pytest.mark.parametrize("problem", l3.PROBLEMS, ids=lambda p: p.name)
def test_problem_selfcheck(problem):
    res = check_problem(problem, trials=1)
    assert res.ok, "\n".join(res.failures)


# ---------------------------------------------------------------- the suite as a whole
def test_suite_size_ids_and_domains():
    ids = [p.id for p in l3.PROBLEMS]
    assert len(set(ids)) == len(ids)
    assert all(i.startswith("L3/") and get_problem(i) is p for i, p in zip(ids, l3.PROBLEMS, strict=True))
    assert all(p.level == 3 and p.category == "model" and p.tags for p in l3.PROBLEMS)
    assert len(FLOAT) >= 8
    assert {p.domain for p in l3.PROBLEMS} <= DOMAINS
    assert len({p.domain for p in FLOAT}) >= 6
    for p in FLOAT:  # every float model is float32 in and out
        assert all(s.dtype == "float32" for s in p.inputs), p.id
        assert all(o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT for o in p.model.graph.output)
    # the int8 variants are the four MLPerf Tiny models
    assert sorted(p.name for p in INT8) == sorted(f"{m}_int8" for m in l3.MLPERF_TINY)
    assert all("mlperf-tiny" in _problem(m).tags for m in l3.MLPERF_TINY)


IO_SHAPES = {
    # model: (input shape (NCHW / NCW), output shape); Keras' NHWC inputs in brackets
    "dscnn_kws": ((1, 1, 49, 10), (1, 12)),  # (1, 49, 10, 1) MFCC -> 12 keywords
    "mobilenetv1_025_vww": ((1, 3, 96, 96), (1, 2)),  # (1, 96, 96, 3) -> person / no person
    "resnet8_ic": ((1, 3, 32, 32), (1, 10)),  # (1, 32, 32, 3) CIFAR-10 -> 10 classes
    "fc_autoencoder_ad": ((1, 640), (1, 640)),  # 5 x 128 log-mel frames, reconstructed
    "mobilenetv2_035_96": ((1, 3, 96, 96), (1, 1000)),
    "transformer_encoder_2l": ((1, 128, 128), (1, 128, 128)),
    "cnn1d_har": ((1, 9, 128), (1, 6)),  # (1, 128, 9) accelerometer/gyro window -> 6 activities
    "yamnet": ((1, 1, 96, 64), (1, 521)),  # 96 frames x 64 mel bands -> 521 AudioSet classes
}


@pytest.mark.parametrize("problem", l3.PROBLEMS, ids=lambda p: p.name)
def test_input_output_shapes(problem):
    want_in, want_out = IO_SHAPES[problem.name.removesuffix("_int8")]
    assert [s.shape for s in problem.inputs] == [want_in]
    (out,) = problem.model.graph.output
    assert tuple(d.dim_value for d in out.type.tensor_type.shape.dim) == want_out
    y = Oracle(problem).run(problem.sample_inputs(1))[0]
    assert y.shape == want_out and y.dtype == np.float32


# ---------------------------------------------------------------- parameter counts
@pytest.mark.parametrize("model", sorted(l3.PUBLISHED))
def test_keras_parameter_count_matches_published(model):
    """(a) The Keras count of the architecture as defined in level3.py is within 2 % of the published
    figure (sources in level3.PUBLISHED; BN counts 4 per channel, YAMNet's scale=False BN 3)."""
    ours, published = l3.published_params(model), l3.PUBLISHED[model].params
    assert abs(ours - published) <= 0.02 * published, (model, ours, published)


def test_mlperf_tiny_counts_exactly():
    """The MLPerf Tiny models: Keras totals and BN-folded counts, layer by layer."""
    assert {m: l3.published_params(m) for m in l3.MLPERF_TINY} == {
        "dscnn_kws": 24_908,
        "mobilenetv1_025_vww": 221_794,
        "resnet8_ic": 78_666,
        "fc_autoencoder_ad": 269_992,
    }
    assert {m: l3.folded_params(m) for m in l3.MLPERF_TINY} == {
        "dscnn_kws": 22_604,
        "mobilenetv1_025_vww": 210_850,
        "resnet8_ic": 77_706,
        "fc_autoencoder_ad": 265_864,
    }
    # DS-CNN per layer, as its Keras model.summary() prints them (conv/dense, then their BN)
    table = l3.param_table("dscnn_kws")
    assert [(t.weights + t.bias, t.bn * t.bn_per_channel) for t in table] == [(2624, 256)] + [
        (640, 256),
        (4160, 256),
    ] * 4 + [(780, 0)]
    assert sum(t.trainable for t in table) == 23_756  # "Trainable params: 23,756"


@pytest.mark.parametrize("model", [m for m in l3.PUBLISHED if l3.PUBLISHED[m].quoted])
def test_quoted_figures_are_the_folded_counts(model):
    """The issue quotes ~22.6k / 211k / 78k / 266k: the BN-folded counts (not Keras' totals)."""
    folded, quoted = l3.folded_params(model), l3.PUBLISHED[model].quoted
    assert abs(folded - quoted) <= 0.02 * quoted, (model, folded, quoted)


@pytest.mark.parametrize("problem", l3.PROBLEMS, ids=lambda p: p.name)
def test_graph_initializers_are_the_folded_parameters(problem):
    """(b) Folding BN (gamma, beta, mean, variance per channel) into the preceding conv/dense leaves
    its weights plus one bias per channel (replacing the layer's own bias, or added where Keras has
    use_bias=False): folded = Keras total - sum over BN layers of (per-channel BN params) x channels
    + channels of the BN layers that follow a bias-free layer. The ONNX initializers hold exactly
    that; the int8 graphs hold it as int8 weights and int32 biases (scales, zero points: Constants)."""
    model = problem.name.removesuffix("_int8")
    table = l3.param_table(model)
    derived = l3.published_params(model) - sum(
        t.bn * t.bn_per_channel - (t.bn if t.bias == 0 else 0) for t in table if t.bn
    )
    assert derived == l3.folded_params(model)
    assert _initializer_elements(problem.model) == derived
    if "int8" in problem.tags:
        kinds = {numpy_helper.to_array(i).dtype.name for i in problem.model.graph.initializer}
        assert kinds == {"int8", "int32"}


def test_yamnet_multiplies_match_published():
    """YAMNet's README: 69.2M multiplies per 0.96 s patch."""
    macs = l3.graph_macs(_problem("yamnet").model)
    assert abs(macs - l3.PUBLISHED["yamnet"].macs) <= 0.02 * l3.PUBLISHED["yamnet"].macs, macs


def test_architecture_details():
    def convs(problem):
        inits = {i.name: numpy_helper.to_array(i) for i in problem.model.graph.initializer}
        return [
            (inits[n.input[1]].shape, {a.name: helper.get_attribute_value(a) for a in n.attribute})
            for n in problem.model.graph.node
            if n.op_type == "Conv"
        ]

    kws = convs(_problem("dscnn_kws"))
    assert kws[0] == (
        (64, 1, 10, 4),
        {"group": 1, "kernel_shape": [10, 4], "pads": [4, 1, 5, 1], "strides": [2, 2]},
    )
    assert len(kws) == 9 and all(c[1]["group"] == 64 for c in kws[1::2])
    pool = next(n for n in _problem("dscnn_kws").model.graph.node if n.op_type == "AveragePool")
    assert helper.get_attribute_value(pool.attribute[0]) == [24, 5]  # AveragePooling2D((24, 5)), not global
    vww = convs(_problem("mobilenetv1_025_vww"))
    assert len(vww) == 27 and vww[-1][0] == (256, 256, 1, 1)
    assert all(c[1]["pads"] == [0, 0, 1, 1] for c in vww if c[1]["strides"] == [2, 2])  # Keras 'same'
    ops = {n.op_type for n in _problem("mobilenetv1_025_vww").model.graph.node}
    assert "Relu" in ops and "Clip" not in ops  # vww_model.py uses ReLU, not ReLU6
    res = convs(_problem("resnet8_ic"))
    assert [c[0][0] for c in res] == [16, 16, 16, 32, 32, 32, 64, 64, 64]
    assert sum(n.op_type == "Add" for n in _problem("resnet8_ic").model.graph.node) == 3
    mb2 = convs(_problem("mobilenetv2_035_96"))
    assert mb2[0][0] == (16, 3, 3, 3) and mb2[-1][0] == (1280, 112, 1, 1)  # _make_divisible(32*0.35)
    assert sum(n.op_type == "Add" for n in _problem("mobilenetv2_035_96").model.graph.node) == 10
    yam = convs(_problem("yamnet"))
    assert len(yam) == 27 and yam[-1][0] == (1024, 1024, 1, 1)
    enc = {n.op_type for n in _problem("transformer_encoder_2l").model.graph.node}
    assert {"LayerNormalization", "Erf", "Softmax", "MatMul"} <= enc
    ae = [numpy_helper.to_array(i).shape for i in _problem("fc_autoencoder_ad").model.graph.initializer]
    assert [s[0] for s in ae[::2]] == [128] * 4 + [8] + [128] * 4 + [640]


# ---------------------------------------------------------------- activation scale through depth
@pytest.mark.parametrize("problem", FLOAT, ids=lambda p: p.name)
def test_activations_neither_vanish_nor_saturate(problem):
    """Every ReLU/ReLU6/LayerNorm/residual output keeps a sensible scale through the whole depth, and
    ReLUs keep a good share of their inputs."""
    g = GraphBuilder(problem.name, seed=problem.seed)
    problem.graph(g)
    watched = [n for n in g.nodes if n.op_type in ("Relu", "Clip", "LayerNormalization", "Add", "Gemm")]
    outputs = {o.name for o in g.outputs}
    for n in watched:
        if n.output[0] not in outputs:
            g.output(n.output[0])
    sess = ort_session(g.build(), threads=1, optimize=False)
    names = [o.name for o in sess.get_outputs()]
    values = dict(zip(names, sess.run(names, problem.sample_inputs(1)), strict=True))
    for n in watched:
        y = values[n.output[0]].astype(np.float64)
        rms = float(np.sqrt(np.mean(y**2)))
        assert 0.1 < rms < 10, (n.op_type, n.output[0], rms)
        if n.op_type in ("Relu", "Clip"):
            assert 0.3 < np.mean(y > 0) < 0.9, (n.output[0], np.mean(y > 0))
        if n.op_type == "Clip":  # ReLU6 bounds: hit sometimes, not mostly
            assert np.mean(y >= 6.0) < 0.05


@pytest.mark.parametrize(
    "problem", [p for p in l3.PROBLEMS if p.name != "fc_autoencoder_ad"], ids=lambda p: p.name
)
def test_outputs_depend_on_the_input(problem):
    """Classifier outputs change with the input (standardized heads), not only with the weights."""
    oracle = Oracle(problem)
    ys = np.stack([oracle.run(problem.sample_inputs(s))[0].reshape(-1) for s in range(1, 9)])
    if problem.name.startswith("transformer"):
        assert np.std(ys, axis=0).mean() > 0.3
    else:  # probabilities: the top class moves by a lot between inputs, and changes
        assert np.abs(ys - ys.mean(axis=0)).max() > 0.1
        assert len(set(ys.argmax(axis=1))) >= 2


# ---------------------------------------------------------------- int8 variants
@pytest.mark.parametrize("problem", INT8, ids=lambda p: p.name)
def test_int8_qdq_structure(problem):
    m = problem.model
    ops = [n.op_type for n in m.graph.node]
    assert "ConvInteger" not in ops and "MatMulInteger" not in ops  # ConvInteger: no TVM 0.27 importer
    assert ops.count("QuantizeLinear") >= ops.count("Conv") + ops.count("Gemm")
    producers = {n.output[0]: n for n in m.graph.node}
    consts = {
        n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in m.graph.node if n.op_type == "Constant"
    }
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            scale = float(consts[n.input[1]])
            assert scale > 0 and math.log2(scale) == round(math.log2(scale)), scale  # a power of two
            if n.op_type == "QuantizeLinear":
                assert consts[n.input[2]].dtype == np.int8  # int8 activations
        if n.op_type in ("Conv", "Gemm"):
            w = producers[n.input[1]]
            assert w.op_type == "DequantizeLinear" and inits[w.input[0]].dtype == np.int8
            assert int(consts[w.input[2]]) == 0  # symmetric per-tensor weights
            assert consts[w.input[1]].shape == ()
            b = producers[n.input[2]]
            assert b.op_type == "DequantizeLinear" and inits[b.input[0]].dtype == np.int32
            x_scale = float(consts[producers[_through(producers, n.input[0])].input[1]])
            assert float(consts[b.input[1]]) == x_scale * float(consts[w.input[1]])  # bias scale


def _through(producers, name):
    """Back from a Conv/Gemm input through Flatten to the DequantizeLinear that feeds it."""
    while producers[name].op_type != "DequantizeLinear":
        name = producers[name].input[0]
    return name


@pytest.mark.parametrize("model", l3.MLPERF_TINY)
def test_int8_weights_quantize_the_float_weights(model):
    """Same seed, same weights: each int8 layer dequantizes to its float layer within half a step
    (the classifier heads differ: each is standardized on its own model's features)."""

    def weights(problem, dequantize):
        inits = {i.name: numpy_helper.to_array(i) for i in problem.model.graph.initializer}
        producers = {n.output[0]: n for n in problem.model.graph.node}
        consts = {
            n.output[0]: numpy_helper.to_array(n.attribute[0].t)
            for n in problem.model.graph.node
            if n.op_type == "Constant"
        }
        out = []
        for n in problem.model.graph.node:
            if n.op_type in ("Conv", "Gemm"):
                if dequantize:
                    dq = producers[n.input[1]]
                    scale = float(consts[dq.input[1]])
                    out.append((inits[dq.input[0]].astype(np.float64) * scale, scale))
                else:
                    out.append(inits[n.input[1]].astype(np.float64))
        return out

    floats, ints = weights(_problem(model), False), weights(_problem(f"{model}_int8"), True)
    assert len(floats) == len(ints)
    heads = 0 if model == "fc_autoencoder_ad" else 1
    for w, (wq, scale) in zip(floats[: len(floats) - heads], ints[: len(ints) - heads], strict=True):
        assert np.abs(w - wq).max() <= scale / 2 + 1e-12


def test_int8_autoencoder_tracks_the_float_one():
    f, q = _problem("fc_autoencoder_ad"), _problem("fc_autoencoder_ad_int8")
    x = f.sample_inputs(3)
    yf, yq = Oracle(f).run(x)[0].ravel(), Oracle(q).run(x)[0].ravel()
    assert np.corrcoef(yf, yq)[0, 1] > 0.9
    assert np.sqrt(np.mean((yf - yq) ** 2)) < 0.5 * np.std(yf)


def test_int8_graph_is_reproducible():
    """Calibration (ONNX Runtime on the float model) rounds what it measures: a rebuild is identical."""
    p = _problem("dscnn_kws_int8")
    again = dataclasses.replace(p)
    assert again.model.SerializeToString() == p.model.SerializeToString()


# ---------------------------------------------------------------- docs
def test_docs_table_is_current():
    text = l3.level3_markdown()
    for p in l3.PROBLEMS:
        assert f"`{p.id}`" in text
    assert DOCS.read_text() == text, (
        "docs/problems_l3.md is stale: run `python -m edgekernelbench.problems.docs --level 3`"
    )
