"""The Level-2 suite: every fused subgraph passes its self-check, and the required blocks are there."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from edgekernelbench.checks.selfcheck import check_problem
from edgekernelbench.oracle import Oracle
from edgekernelbench.problems import get_problem
from edgekernelbench.problems import level2 as l2
from edgekernelbench.problems.docs import level2_markdown

REQUIRED_CATEGORIES = {
    "ds_block",
    "inverted_residual",
    "se_bottleneck",
    "residual_block",
    "mlp",
    "attention",
    "ffn",
    "norm_matmul",
    "int8_block",
    "seg_head",
    "conv1d_block",
    "audio_frontend",
}
DOMAINS = {"vision", "wakeword", "kws", "anomaly", "nlp", "sensors", "audio"}
DOCS = Path(__file__).resolve().parents[1] / "docs" / "problems_l2.md"


@pytest.mark.parametrize("problem", l2.PROBLEMS, ids=lambda p: p.name)
def test_problem_selfcheck(problem):
    res = check_problem(problem, trials=2)
    assert res.ok, "\n".join(res.failures)


# ---------------------------------------------------------------- the suite as a whole
def test_suite_size_and_ids():
    ids = [p.id for p in l2.PROBLEMS]
    assert len(ids) >= 22
    assert len(set(ids)) == len(ids)
    assert all(i.startswith("L2/") for i in ids)
    assert all(get_problem(i) is p for i, p in zip(ids, l2.PROBLEMS, strict=True))
    assert all(p.level == 2 for p in l2.PROBLEMS)


def test_suite_categories_and_domains():
    cats = Counter(p.category for p in l2.PROBLEMS)
    assert set(cats) >= REQUIRED_CATEGORIES, f"missing {REQUIRED_CATEGORIES - set(cats)}"
    assert {p.domain for p in l2.PROBLEMS} <= DOMAINS
    for p in l2.PROBLEMS:
        assert len(p.source) > 20, p.id  # names the model and the block
        assert p.tags, p.id
        assert len({n.op_type for n in p.model.graph.node} - {"Constant"}) >= 2, p.id  # a subgraph


# ---------------------------------------------------------------- the required blocks, by structure
def _ops(p):
    return Counter(n.op_type for n in p.model.graph.node)


def _dims(vi):
    return tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)


def _out_shape(p):
    return _dims(p.model.graph.output[0])


def _convs(p):
    """(group, kernel, stride) of every Conv."""
    out = []
    for n in p.model.graph.node:
        if n.op_type == "Conv":
            a = {x.name: x for x in n.attribute}
            out.append((a["group"].i, tuple(a["kernel_shape"].ints), tuple(a["strides"].ints)))
    return out


def _of(category):
    return [p for p in l2.PROBLEMS if p.category == category]


def test_ds_blocks():
    shapes = {(p.inputs[0].shape, _out_shape(p)) for p in _of("ds_block")}
    assert ((1, 64, 25, 5), (1, 64, 25, 5)) in shapes  # DS-CNN
    assert ((1, 8, 48, 48), (1, 16, 48, 48)) in shapes  # VWW MobileNetV1-0.25 block 1
    assert ((1, 128, 6, 6), (1, 128, 6, 6)) in shapes  # VWW blocks 7-11
    for p in _of("ds_block"):
        (g1, k1, _), (g2, k2, _) = _convs(p)
        assert g1 == p.inputs[0].shape[1] and k1 == (3, 3) and g2 == 1 and k2 == (1, 1), p.id


def test_inverted_residuals():
    blocks = _of("inverted_residual")
    residual = [p for p in blocks if _ops(p)["Add"] and _out_shape(p) == p.inputs[0].shape]
    assert len({p.inputs[0].shape for p in residual}) >= 2  # two or more stages
    strided = [p for p in blocks if any(s == (2, 2) for _, _, s in _convs(p))]
    assert strided and all("Add" not in _ops(p) for p in strided)
    for p in blocks:
        assert _ops(p)["Clip"] == 2 and len(_convs(p)) == 3, p.id  # expand, depthwise, linear project


def test_se_bottleneck_and_hardswish():
    ops = [_ops(p) for p in _of("se_bottleneck")]
    assert all({"GlobalAveragePool", "HardSigmoid", "Mul"} <= set(o) for o in ops)
    assert any("HardSwish" in o and "Add" in o for o in ops)


def test_resnet8_blocks():
    blocks = {(p.inputs[0].shape, _out_shape(p)): p for p in _of("residual_block")}
    assert ((1, 16, 32, 32), (1, 16, 32, 32)) in blocks
    s2 = blocks[((1, 16, 32, 32), (1, 32, 16, 16))]
    assert (1, (1, 1), (2, 2)) in _convs(s2)  # the 1x1 stride-2 shortcut
    assert all(_ops(p)["Add"] == 1 and _ops(p)["Relu"] == 2 for p in blocks.values())


def test_transformer_blocks():
    (att,) = _of("attention")
    assert [s.shape for s in att.inputs] == [(1, 4, 128, 32)] * 3
    assert {"MatMul", "Softmax"} <= set(_ops(att)) and _out_shape(att) == (1, 4, 128, 32)
    for p in _of("ffn"):
        assert _ops(p)["MatMul"] == 2 and p.inputs[0].shape == (1, 128, 128), p.id
    assert {p.inputs[0].shape[-1] for p in _of("norm_matmul")} >= {128, 512}
    assert all("LayerNormalization" in _ops(p) for p in _of("norm_matmul"))
    (enc,) = [p for p in _of("mlp") if p.inputs[0].shape == (1, 640)]
    assert _ops(enc)["Gemm"] == 2 and _ops(enc)["Relu"] == 2 and _out_shape(enc) == (1, 128)


def test_int8_blocks_are_qdq_with_one_step_tolerance():
    for p in _of("int8_block"):
        ops = _ops(p)
        assert {"QuantizeLinear", "DequantizeLinear", "Conv", "Relu"} <= set(ops), p.id
        assert "ConvInteger" not in ops  # not importable by TVM 0.27
        out_type = p.model.graph.output[0].type.tensor_type.elem_type
        assert out_type in (2, 3), p.id  # uint8 / int8 codes
        assert p.atol == 1.0 and p.rtol == 0.0, p.id  # one quantization step


def test_seg_conv1d_heads():
    assert all({"Resize", "Conv"} <= set(_ops(p)) for p in _of("seg_head"))
    (har,) = _of("conv1d_block")
    assert har.inputs[0].shape == (1, 9, 128) and {k for _, k, _ in _convs(har)} == {(3,)}
    assert "MaxPool" in _ops(har) and _out_shape(har) == (1, 64, 62)


# ---------------------------------------------------------------- audio front ends against numpy
@pytest.mark.parametrize(
    "pid, frame, hop, n_fft, n_mel, lo, hi, magnitude, eps",
    [
        ("L2/logmel_frontend_kws", 640, 320, 1024, 40, 20.0, 4000.0, False, 1e-6),
        ("L2/logmel_frontend_yamnet", 400, 160, 512, 64, 125.0, 7500.0, True, 1e-3),
    ],
)
def test_audio_frontend_equals_numpy_rfft(pid, frame, hop, n_fft, n_mel, lo, hi, magnitude, eps):
    """Framing + Hann + DFT-as-matmul + mel + log is the textbook log-mel spectrogram."""
    p = get_problem(pid)
    audio = p.sample_inputs(1)["audio"]
    got = Oracle(p).run({"audio": audio})[0][0]
    n_frames = (audio.shape[1] - frame) // hop + 1
    assert got.shape == (n_frames, n_mel)
    x = audio[0].astype(np.float64)
    frames = np.stack([x[i * hop : i * hop + frame] for i in range(n_frames)])
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(frame) / frame)
    spec = np.abs(np.fft.rfft(frames * window, n=n_fft)) ** 2
    if magnitude:
        spec = np.sqrt(spec)
    mel = l2.mel_filterbank(n_mel, n_fft, 16000, lo, hi).astype(np.float64)
    assert mel.shape == (n_fft // 2 + 1, n_mel) and mel.max() <= 1.0 and not mel[0].any()
    want = np.log(spec @ mel + eps)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


def test_docs_table_is_current():
    text = DOCS.read_text()
    assert all(f"`{p.id}`" in text for p in l2.PROBLEMS)
    assert text == level2_markdown(), (
        "docs/problems_l2.md is stale: run `python -m edgekernelbench.problems.docs`"
    )
