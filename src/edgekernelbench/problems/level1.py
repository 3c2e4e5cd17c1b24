"""Level 1: single operators at shapes taken from real edge models.

Every problem builds its ONNX graph in code with random weights from a fixed seed.
Shapes cite the model and layer they come from (MLPerf Tiny DS-CNN / MobileNetV1-0.25 VWW /
ResNet-8 / FC autoencoder, MobileNetV2/V3, MobileBERT, YAMNet, TF speech-commands CNN).

Layer shapes (NCHW), as the models are defined:

* MLPerf Tiny KWS DS-CNN: input 1x1x49x10; conv 10x4 s2 'same' -> 64ch 25x5; 4 x (depthwise 3x3 +
  pointwise 64->64) at 25x5; global average pool; dense 64->12.
* MLPerf Tiny VWW, Keras MobileNetV1 alpha=0.25 at 96x96x3: stem 3x3 s2 3->8 -> 48x48; dw/pw blocks
  8->16 @48, (dw s2) 16->32 @24, 32->32 @24, (dw s2) 32->64 @12, 64->64 @12, (dw s2) 64->128 @6,
  5 x 128->128 @6, (dw s2) 128->256 @3, 256->256 @3; global pool; dense 256->2.
  Keras pads stride-2 3x3 convs with ZeroPadding2D(((0, 1), (0, 1))), i.e. ONNX pads [0, 0, 1, 1].
  Every conv is followed by BN (folded) + ReLU6.
* MLPerf Tiny IC ResNet-8 at 32x32x3: conv 3->16; stack 16ch @32x32; stack 32ch (s2) @16x16 with a
  1x1 s2 shortcut; stack 64ch (s2) @8x8; 8x8 average pool; dense 64->10.
* MLPerf Tiny AD FC autoencoder: 640 -> 128 -> 128 -> 128 -> 128 -> 8 -> 128 x 4 -> 640.
* MobileBERT: seq 128, intra-block hidden 128, inter-block hidden 512, 4 heads (head dim 32),
  FFN 128 -> 512 -> 128. The shipped MobileBERT uses NoNorm + ReLU; the LayerNorm + GELU problems
  are the paper's variant without the "operational optimizations" (same shapes).
"""

from __future__ import annotations

import math

import numpy as np

from .base import Problem
from .graph import GraphBuilder
from .suite import suite

PROBLEMS: list[Problem] = []  # the problems this module registers, in definition order


_p = suite(1, PROBLEMS)


def _act(g: GraphBuilder, y: str, act: str | None) -> str:
    if act == "relu":
        return g.node("Relu", [y])
    if act == "relu6":
        return g.node("Clip", [y, g.const(0.0), g.const(6.0)])
    return y


# ---------------------------------------------------------------- convolution
def _conv(shape, cout, k, stride=1, pads=None, act="relu", group=1, gain=1.0):
    """Conv (+ bias, + activation) on an NCHW (or NCW) input. pads: ONNX [begins..., ends...].

    Weights are N(0, gain^2 / fan_in), so outputs have about unit variance times `gain`; ReLU6
    problems use gain 3 so that both clip bounds are hit (as with BN-folded MobileNet weights)."""
    n, cin, *spatial = shape
    ks = [k] * len(spatial) if isinstance(k, int) else list(k)
    if pads is None:  # symmetric "same" padding for odd kernels
        pads = [kk // 2 for kk in ks] * 2

    def graph(g: GraphBuilder):
        x = g.input("x", shape)
        w = g.weight((cout, cin // group, *ks), scale=gain / math.sqrt(cin // group * math.prod(ks)))
        y = g.node(
            "Conv",
            [x, w, g.bias(cout)],
            group=group,
            kernel_shape=ks,
            pads=list(pads),
            strides=[stride] * len(spatial),
        )
        g.output(_act(g, y, act))

    return graph


def _dwconv(n, c, h, w, k, stride, relu=True, pads=None, act=None):
    act = act or ("relu" if relu else None)
    gain = 3.0 if act == "relu6" else 1.0
    return _conv((n, c, h, w), c, k, stride, pads, act, group=c, gain=gain)


_p(
    "conv2d_kws_stem",
    "kws",
    "conv2d",
    "MLPerf Tiny DS-CNN (KWS), stem conv 10x4 s2 'same', 1->64ch: 1x1x49x10 -> 1x64x25x5, + ReLU",
    # TF 'same': pad H 9 = 4 top + 5 bottom, pad W 2 = 1 + 1 -> 25x5
    _conv((1, 1, 49, 10), 64, (10, 4), 2, pads=[4, 1, 5, 1]),
    tags=["conv", "mlperf-tiny", "stem", "asymmetric-pad"],
)
_p(
    "conv2d_vww_stem",
    "wakeword",
    "conv2d",
    "MLPerf Tiny VWW MobileNetV1-0.25, stem conv 3x3 s2 3->8ch: 1x3x96x96 -> 1x8x48x48, + ReLU6",
    _conv((1, 3, 96, 96), 8, 3, 2, pads=[0, 0, 1, 1], act="relu6", gain=3.0),
    tags=["conv", "mlperf-tiny", "stem", "asymmetric-pad"],
)
_p(
    "conv2d_resnet8_16ch",
    "vision",
    "conv2d",
    "MLPerf Tiny IC ResNet-8, stack 1 conv 3x3 16->16ch at 32x32, + ReLU",
    _conv((1, 16, 32, 32), 16, 3, 1),
    tags=["conv", "mlperf-tiny"],
)
_p(
    "conv2d_resnet8_32ch_s2",
    "vision",
    "conv2d",
    "MLPerf Tiny IC ResNet-8, stack 2 first conv 3x3 s2 16->32ch: 32x32 -> 16x16, + ReLU",
    _conv((1, 16, 32, 32), 32, 3, 2, pads=[0, 0, 1, 1]),
    tags=["conv", "mlperf-tiny", "strided"],
)
_p(
    "conv2d_resnet8_64ch_s2",
    "vision",
    "conv2d",
    "MLPerf Tiny IC ResNet-8, stack 3 first conv 3x3 s2 32->64ch: 16x16 -> 8x8, + ReLU",
    _conv((1, 32, 16, 16), 64, 3, 2, pads=[0, 0, 1, 1]),
    tags=["conv", "mlperf-tiny", "strided"],
)
_p(
    "conv2d_yamnet_stem",
    "audio",
    "conv2d",
    "YAMNet (MobileNetV1 on 96x64 log-mel patches), stem conv 3x3 s2 1->32ch: 96x64 -> 48x32, + ReLU",
    _conv((1, 1, 96, 64), 32, 3, 2, pads=[0, 0, 1, 1]),
    tags=["conv", "stem"],
)
_p(
    "conv1d_har",
    "sensors",
    "conv2d",
    "1D-CNN human-activity recognition on UCI-HAR windows (9 inertial channels x 128 samples), "
    "first Conv1D k=5 'same' 9->32ch, + ReLU",
    _conv((1, 9, 128), 32, 5, 1),
    tags=["conv", "conv1d", "time-series"],
)

# ---------------------------------------------------------------- depthwise convolution
_p(
    "dwconv3x3_kws",
    "kws",
    "depthwise",
    "MLPerf Tiny DS-CNN (KWS), depthwise block 1: 64ch 25x5",
    _dwconv(1, 64, 25, 5, 3, 1),
    tags=["conv", "mlperf-tiny"],
)
_p(
    "dwconv3x3_s2_vww_16ch",
    "wakeword",
    "depthwise",
    "MLPerf Tiny VWW MobileNetV1-0.25, block 2 depthwise 3x3 s2: 16ch 48x48 -> 24x24, + ReLU6",
    _dwconv(1, 16, 48, 48, 3, 2, pads=[0, 0, 1, 1], act="relu6"),
    tags=["conv", "mlperf-tiny", "strided"],
)
_p(
    "dwconv3x3_s2_vww_32ch",
    "wakeword",
    "depthwise",
    "MLPerf Tiny VWW MobileNetV1-0.25, block 4 depthwise 3x3 s2: 32ch 24x24 -> 12x12, + ReLU6",
    _dwconv(1, 32, 24, 24, 3, 2, pads=[0, 0, 1, 1], act="relu6"),
    tags=["conv", "mlperf-tiny", "strided"],
)
_p(
    "dwconv3x3_vww_128ch",
    "wakeword",
    "depthwise",
    "MLPerf Tiny VWW MobileNetV1-0.25, blocks 7-11 depthwise 3x3 s1: 128ch 6x6, + ReLU6",
    _dwconv(1, 128, 6, 6, 3, 1, act="relu6"),
    tags=["conv", "mlperf-tiny"],
)
_p(
    "dwconv5x5_s2_mobilenetv3",
    "vision",
    "depthwise",
    "MobileNetV3-Small (224), bneck 4 depthwise 5x5 s2 on the 96ch expansion: 28x28 -> 14x14",
    _dwconv(1, 96, 28, 28, 5, 2, relu=False),
    tags=["conv", "strided", "5x5"],
)
_p(
    "dwconv5x5_mobilenetv3",
    "vision",
    "depthwise",
    "MobileNetV3-Small (224), bneck 5 depthwise 5x5 s1 on the 240ch expansion at 14x14",
    _dwconv(1, 240, 14, 14, 5, 1, relu=False),
    tags=["conv", "5x5"],
)


# ---------------------------------------------------------------- pointwise (1x1) convolution
def _pwconv(n, cin, cout, h, w, act="relu", stride=1):
    gain = 3.0 if act == "relu6" else 1.0
    return _conv((n, cin, h, w), cout, 1, stride, pads=[0, 0, 0, 0], act=act, gain=gain)


_p(
    "pwconv_kws",
    "kws",
    "pointwise",
    "MLPerf Tiny DS-CNN (KWS), pointwise block 1: 64->64ch at 25x5, + ReLU",
    _pwconv(1, 64, 64, 25, 5),
    tags=["conv", "mlperf-tiny", "1x1"],
)
_p(
    "pwconv_vww_16x32",
    "wakeword",
    "pointwise",
    "MLPerf Tiny VWW MobileNetV1-0.25, block 2 pointwise 16->32ch at 24x24, + ReLU6",
    _pwconv(1, 16, 32, 24, 24, act="relu6"),
    tags=["conv", "mlperf-tiny", "1x1"],
)
_p(
    "pwconv_vww_64x128",
    "wakeword",
    "pointwise",
    "MLPerf Tiny VWW MobileNetV1-0.25, block 6 pointwise 64->128ch at 6x6, + ReLU6",
    _pwconv(1, 64, 128, 6, 6, act="relu6"),
    tags=["conv", "mlperf-tiny", "1x1"],
)
_p(
    "pwconv_mobilenetv2_expand",
    "vision",
    "pointwise",
    "MobileNetV2-1.0 (224), 32ch stage expansion 1x1 32->192ch at 28x28, + ReLU6",
    _pwconv(1, 32, 192, 28, 28, act="relu6"),
    tags=["conv", "1x1", "inverted-residual"],
)
_p(
    "pwconv_mobilenetv2_project",
    "vision",
    "pointwise",
    "MobileNetV2-1.0 (224), 32ch stage linear projection 1x1 192->32ch at 28x28 (no activation)",
    _pwconv(1, 192, 32, 28, 28, act=None),
    tags=["conv", "1x1", "inverted-residual"],
)
_p(
    "pwconv_s2_resnet8_shortcut",
    "vision",
    "pointwise",
    "MLPerf Tiny IC ResNet-8, stack 2 shortcut 1x1 s2 16->32ch: 32x32 -> 16x16 (no activation)",
    _pwconv(1, 16, 32, 32, 32, act=None, stride=2),
    tags=["conv", "mlperf-tiny", "1x1", "strided"],
)
_p(
    "pwconv_yamnet_64x128",
    "audio",
    "pointwise",
    "YAMNet (MobileNetV1 on 96x64 log-mel patches), layer 3 pointwise 64->128ch at 24x16, + ReLU",
    _pwconv(1, 64, 128, 24, 16),
    tags=["conv", "1x1"],
)


# ---------------------------------------------------------------- dense / GEMV / matmul
def _dense(m, k, n, relu=False):
    def graph(g: GraphBuilder):
        x = g.input("x", (m, k))
        y = g.node("Gemm", [x, g.weight((n, k)), g.bias(n)], transB=1)
        g.output(g.node("Relu", [y]) if relu else y)

    return graph


def _matmul(shape, n):
    """x @ W with W (K, N) a weight, as transformer exports write a Linear without its bias."""

    def graph(g: GraphBuilder):
        x = g.input("x", shape)
        g.output(g.node("MatMul", [x, g.weight((shape[-1], n), fan_in=shape[-1])]))

    return graph


_p(
    "dense_ae_640x128",
    "anomaly",
    "dense",
    "MLPerf Tiny FC autoencoder (anomaly detection), layer 1 640->128",
    _dense(1, 640, 128, relu=True),
    tags=["gemv", "mlperf-tiny"],
)
_p(
    "dense_ae_128x128",
    "anomaly",
    "dense",
    "MLPerf Tiny FC autoencoder (anomaly detection), encoder layer 2 128->128, + ReLU",
    _dense(1, 128, 128, relu=True),
    tags=["gemv", "mlperf-tiny"],
)
_p(
    "dense_ae_128x8",
    "anomaly",
    "dense",
    "MLPerf Tiny FC autoencoder (anomaly detection), bottleneck layer 128->8 (pre-activation)",
    _dense(1, 128, 8),
    tags=["gemv", "mlperf-tiny"],
)
_p(
    "dense_ae_128x640",
    "anomaly",
    "dense",
    "MLPerf Tiny FC autoencoder (anomaly detection), output layer 128->640 (linear)",
    _dense(1, 128, 640),
    tags=["gemv", "mlperf-tiny"],
)
_p(
    "dense_kws_classifier",
    "kws",
    "dense",
    "MLPerf Tiny DS-CNN (KWS), classifier head dense 64->12 (logits)",
    _dense(1, 64, 12),
    tags=["gemv", "mlperf-tiny", "classifier"],
)
_p(
    "dense_vww_classifier",
    "wakeword",
    "dense",
    "MLPerf Tiny VWW MobileNetV1-0.25, classifier head dense 256->2 (logits)",
    _dense(1, 256, 2),
    tags=["gemv", "mlperf-tiny", "classifier"],
)
_p(
    "matmul_mobilebert_ffn_in",
    "nlp",
    "dense",
    "MobileBERT, FFN intermediate dense: seq 128 x hidden 128 @ 128x512",
    _matmul((1, 128, 128), 512),
    tags=["gemm", "transformer"],
)
_p(
    "matmul_mobilebert_bottleneck_in",
    "nlp",
    "dense",
    "MobileBERT, input bottleneck dense: seq 128 x inter-block hidden 512 @ 512x128",
    _matmul((1, 128, 512), 128),
    tags=["gemm", "transformer"],
)


# ---------------------------------------------------------------- batched matmul (attention)
def _bmm(a_shape, b_shape, a_kw=None, b_kw=None):
    def graph(g: GraphBuilder):
        a = g.input("a", a_shape, **(a_kw or {}))
        b = g.input("b", b_shape, **(b_kw or {}))
        g.output(g.node("MatMul", [a, b]))

    return graph


_p(
    "bmm_mobilebert_qk",
    "nlp",
    "batch_matmul",
    "MobileBERT self-attention scores Q @ K^T: 4 heads x (128x32 @ 32x128)",
    _bmm((1, 4, 128, 32), (1, 4, 32, 128)),
    tags=["attention", "transformer"],
)
_p(
    "bmm_mobilebert_pv",
    "nlp",
    "batch_matmul",
    "MobileBERT self-attention context probs @ V: 4 heads x (128x128 @ 128x32)",
    # attention probabilities: non-negative, mean 1/128 like a softmax row
    _bmm((1, 4, 128, 128), (1, 4, 128, 32), a_kw=dict(dist="uniform", low=0.0, high=2.0 / 128)),
    tags=["attention", "transformer"],
)


# ---------------------------------------------------------------- pooling
def _pool(op, shape, **attrs):
    def graph(g: GraphBuilder):
        x = g.input("x", shape)
        g.output(g.node(op, [x], **attrs))

    return graph


_p(
    "gap_kws",
    "kws",
    "pool",
    "MLPerf Tiny DS-CNN (KWS), global average pool over 25x5 of 64ch before the classifier",
    _pool("GlobalAveragePool", (1, 64, 25, 5)),
    tags=["reduction", "mlperf-tiny"],
)
_p(
    "avgpool8x8_resnet8",
    "vision",
    "pool",
    "MLPerf Tiny IC ResNet-8, AveragePooling2D(8x8) over the 64ch 8x8 final feature map",
    _pool("AveragePool", (1, 64, 8, 8), kernel_shape=[8, 8]),
    tags=["reduction", "mlperf-tiny"],
)
_p(
    "gap_mobilenetv2",
    "vision",
    "pool",
    "MobileNetV2-1.0 (224), global average pool of the 1280ch 7x7 last feature map",
    _pool("GlobalAveragePool", (1, 1280, 7, 7)),
    tags=["reduction"],
)
_p(
    "maxpool2x2_kws_cnn",
    "kws",
    "pool",
    "TF speech-commands 'conv' KWS model (cnn-trad-fpool3 style), max pool 2x2 s2 'same' after "
    "conv1: 64ch 49x40 -> 25x20",
    _pool("MaxPool", (1, 64, 49, 40), kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 0]),
    tags=["asymmetric-pad"],
)


# ---------------------------------------------------------------- softmax
def _softmax(shape, axis=-1):
    def graph(g: GraphBuilder):
        x = g.input("x", shape, scale=2.0)
        g.output(g.node("Softmax", [x], axis=axis))

    return graph


_p(
    "softmax_mobilebert_attn",
    "nlp",
    "softmax",
    "MobileBERT attention probabilities: 4 heads x 128 x 128",
    _softmax((1, 4, 128, 128)),
    tags=["reduction", "attention"],
)
_p(
    "softmax_kws_classifier",
    "kws",
    "softmax",
    "MLPerf Tiny DS-CNN (KWS), output softmax over 12 keyword classes",
    _softmax((1, 12)),
    tags=["reduction", "mlperf-tiny", "classifier"],
)


# ---------------------------------------------------------------- layer normalization
def _layernorm(shape, eps=1e-12):
    def graph(g: GraphBuilder):
        x = g.input("x", shape)
        d = shape[-1]
        gamma = g.tensor((1.0 + 0.1 * g.rng.standard_normal(d)).astype("float32"), "gamma")
        g.output(g.node("LayerNormalization", [x, gamma, g.bias(d)], axis=-1, epsilon=eps))

    return graph


_p(
    "layernorm_mobilebert_128",
    "nlp",
    "norm",
    "MobileBERT (LayerNorm variant), intra-block LayerNorm: seq 128 x hidden 128",
    _layernorm((1, 128, 128)),
    tags=["reduction", "transformer"],
)
_p(
    "layernorm_mobilebert_512",
    "nlp",
    "norm",
    "MobileBERT (LayerNorm variant), inter-block LayerNorm: seq 128 x hidden 512",
    _layernorm((1, 128, 512)),
    tags=["reduction", "transformer"],
)


# ---------------------------------------------------------------- activations
def _unary(shape, build, **input_kw):
    def graph(g: GraphBuilder):
        x = g.input("x", shape, **input_kw)
        g.output(build(g, x))

    return graph


def _gelu(g: GraphBuilder, x: str) -> str:
    # opset 17 has no Gelu op: the exact (erf) form 0.5 * x * (1 + erf(x / sqrt(2)))
    e = g.node("Erf", [g.node("Div", [x, g.const(math.sqrt(2.0))])])
    return g.node("Mul", [g.node("Mul", [x, g.const(0.5)]), g.node("Add", [e, g.const(1.0)])])


_p(
    "relu6_mobilenetv2",
    "vision",
    "activation",
    "MobileNetV2-1.0 (224), ReLU6 (Clip 0..6) on the 24ch-stage 1x1 expansion: 144ch 56x56",
    # pre-activations spread over both clip bounds
    _unary((1, 144, 56, 56), lambda g, x: _act(g, x, "relu6"), dist="uniform", low=-2.0, high=8.0),
    tags=["elementwise", "clip"],
)
_p(
    "hardswish_mobilenetv3",
    "vision",
    "activation",
    "MobileNetV3-Small (224), hard-swish on the bneck 5 expansion: 240ch 14x14",
    _unary((1, 240, 14, 14), lambda g, x: g.node("HardSwish", [x]), scale=3.0),
    tags=["elementwise"],
)
_p(
    "hardsigmoid_mobilenetv3_se",
    "vision",
    "activation",
    "MobileNetV3-Small (224), squeeze-excite gate hard-sigmoid (relu6(x+3)/6) over 576ch",
    _unary((1, 576, 1, 1), lambda g, x: g.node("HardSigmoid", [x], alpha=1.0 / 6, beta=0.5), scale=4.0),
    tags=["elementwise", "squeeze-excite"],
)
_p(
    "gelu_mobilebert_ffn",
    "nlp",
    "activation",
    "MobileBERT (GELU variant), FFN intermediate activation: seq 128 x 512 (erf form)",
    _unary((1, 128, 512), _gelu),
    tags=["elementwise", "transformer", "erf"],
)


# ---------------------------------------------------------------- broadcast elementwise
def _binary(op, a_shape, b_shape):
    def graph(g: GraphBuilder):
        a = g.input("a", a_shape)
        b = g.input("b", b_shape)
        g.output(g.node(op, [a, b]))

    return graph


_p(
    "add_residual_mobilenetv2",
    "vision",
    "elementwise",
    "MobileNetV2-1.0 (224), inverted-residual skip add: 32ch 28x28 + 32ch 28x28",
    _binary("Add", (1, 32, 28, 28), (1, 32, 28, 28)),
    tags=["residual"],
)
_p(
    "add_residual_resnet8",
    "vision",
    "elementwise",
    "MLPerf Tiny IC ResNet-8, stack 2 residual add (conv path + 1x1 shortcut): 32ch 16x16",
    _binary("Add", (1, 32, 16, 16), (1, 32, 16, 16)),
    tags=["residual", "mlperf-tiny"],
)
_p(
    "mul_se_mobilenetv3",
    "vision",
    "elementwise",
    "MobileNetV3-Small (224), squeeze-excite channel scale: (1,240,14,14) * (1,240,1,1)",
    _binary("Mul", (1, 240, 14, 14), (1, 240, 1, 1)),
    tags=["broadcast", "squeeze-excite"],
)


# ---------------------------------------------------------------- resize
def _resize(shape, scales=None, sizes=None, ctm="half_pixel"):
    def graph(g: GraphBuilder):
        x = g.input("x", shape)
        if sizes is not None:
            ins = [x, "", "", g.const(np.asarray(sizes), "int64")]
        else:
            ins = [x, "", g.const(np.asarray(scales), "float32")]
        g.output(g.node("Resize", ins, mode="linear", coordinate_transformation_mode=ctm))

    return graph


_p(
    "resize_bilinear2x_seg",
    "vision",
    "resize",
    "LR-ASPP-style segmentation head (MobileNetV3, 192x192 input): 2x bilinear upsample of the "
    "32ch stride-8 feature, 24x24 -> 48x48",
    _resize((1, 32, 24, 24), scales=[1.0, 1.0, 2.0, 2.0]),
    tags=["upsample", "segmentation"],
)
_p(
    "resize_bilinear_deeplabv3",
    "vision",
    "resize",
    "DeepLabV3 MobileNetV2 (TFLite, 257x257): final bilinear upsample (align_corners) of the 21-class "
    "logits 33x33 -> 257x257",
    _resize((1, 21, 33, 33), sizes=[1, 21, 257, 257], ctm="align_corners"),
    tags=["upsample", "segmentation", "align-corners"],
)


# ---------------------------------------------------------------- int8 (int32 accumulation)
def _matmul_int(m, k, n, a_dtype="uint8", a_zero=128):
    """MatMulInteger: 8-bit activations with a zero point, int8 symmetric weights, int32 output."""

    def graph(g: GraphBuilder):
        lo, hi = (0, 255) if a_dtype == "uint8" else (-128, 127)
        a = g.input("a", m if isinstance(m, tuple) else (m, k), a_dtype, dist="int", low=lo, high=hi)
        w = g.int_tensor((k, n), -127, 127, "int8")
        g.output(g.node("MatMulInteger", [a, w, g.const(a_zero, a_dtype), g.const(0, "int8")]))

    return graph


def _conv_integer(n, c, h, w, o, k, stride, pads, native=False):
    """ConvInteger (uint8 activations and weights, both with zero points, int32 output).

    TVM 0.27's Relax ONNX frontend has no ConvInteger converter ("operators are not supported for
    frontend ONNX: ConvInteger"), so the graph writes the same computation as im2col + MatMulInteger:
    Pad with the activation zero point (a padded element then contributes 0, as in ConvInteger),
    Gather the KxK patches with constant indices, MatMulInteger with the reshaped weights. It is
    exactly ConvInteger (tests/test_suite_l1.py checks it against `native=True` in ONNX Runtime),
    and TVM imports it with int32 accumulation. Pointwise (1x1, stride 1) convs need no Gather.
    """
    kh, kw = (k, k) if isinstance(k, int) else k
    pt, pl, pb, pr = pads
    hp, wp = h + pt + pb, w + pl + pr
    ho, wo = (hp - kh) // stride + 1, (wp - kw) // stride + 1

    def graph(g: GraphBuilder):
        x = g.input("x", (n, c, h, w), "uint8", dist="int", low=0, high=255)
        wq = g.int_tensor((o, c, kh, kw), 0, 255, "uint8")
        x_zero, w_zero = g.const(128, "uint8"), g.const(127, "uint8")
        if native:
            y = g.node(
                "ConvInteger",
                [x, wq, x_zero, w_zero],
                kernel_shape=[kh, kw],
                strides=[stride, stride],
                pads=list(pads),
            )
            g.output(y)
            return
        if (kh, kw, stride) == (1, 1, 1) and not any(pads):
            cols = g.node("Reshape", [x, g.constant_node(np.array([n, c, h * w], np.int64))])
            cols = g.node("Transpose", [cols], perm=[0, 2, 1])  # n, h*w, c
        else:
            xp = g.node("Pad", [x, g.constant_node(np.array([0, 0, pt, pl, 0, 0, pb, pr], np.int64)), x_zero])
            flat = g.node("Reshape", [xp, g.constant_node(np.array([n, c, hp * wp], np.int64))])
            rows = np.arange(ho)[:, None, None, None] * stride + np.arange(kh)[None, None, :, None]
            colx = np.arange(wo)[None, :, None, None] * stride + np.arange(kw)[None, None, None, :]
            idx = (rows * wp + colx).reshape(ho * wo, kh * kw).astype(np.int64)
            cols = g.node("Gather", [flat, g.constant_node(idx)], axis=2)  # n, c, ho*wo, kh*kw
            cols = g.node("Transpose", [cols], perm=[0, 2, 1, 3])  # n, ho*wo, c, kh*kw
            cols = g.node("Reshape", [cols, g.constant_node(np.array([n, ho * wo, c * kh * kw], np.int64))])
        wm = g.node("Reshape", [wq, g.constant_node(np.array([o, c * kh * kw], np.int64))])
        wm = g.node("Transpose", [wm], perm=[1, 0])  # c*kh*kw, o
        y = g.node("MatMulInteger", [cols, wm, x_zero, w_zero])  # n, ho*wo, o
        y = g.node("Transpose", [y], perm=[0, 2, 1])
        g.output(g.node("Reshape", [y, g.constant_node(np.array([n, o, ho, wo], np.int64))]))

    return graph


def _qdq_conv(shape, cout, k, stride, pads, x_scale=1 / 64, y_scale=0.04):
    """QDQ format (as ONNX Runtime's static quantizer writes it): int8 per-tensor activations,
    int8 per-output-channel weights, int32 bias, all DequantizeLinear'd around a float Conv whose
    output is QuantizeLinear'd to int8 and dequantized again. The scales clip the tails (inputs beyond
    +-2 sigma, outputs beyond about +-3 sigma), as calibrated ranges do."""

    def graph(g: GraphBuilder):
        x = g.input("x", shape)
        xs, xz = g.const(x_scale), g.const(0, "int8")
        xq = g.node("DequantizeLinear", [g.node("QuantizeLinear", [x, xs, xz]), xs, xz])
        cin = shape[1]
        w_scale = (0.5 + g.rng.random(cout)).astype("float32") * (3.0 / math.sqrt(cin * k * k)) / 127
        wq = g.int_tensor((cout, cin, k, k), -127, 127, "int8")
        w = g.node("DequantizeLinear", [wq, g.tensor(w_scale, "ws"), g.const(np.zeros(cout), "int8")], axis=0)
        b_scale = (x_scale * w_scale).astype("float32")
        bq = g.int_tensor((cout,), -10000, 10000, "int32")  # about +-0.7 in float
        # int32 bias: no zero point (the spec requires it to be 0 for int32)
        b = g.node("DequantizeLinear", [bq, g.tensor(b_scale, "bs")], axis=0)
        y = g.node("Conv", [xq, w, b], kernel_shape=[k, k], strides=[stride, stride], pads=list(pads))
        ys, yz = g.const(y_scale), g.const(0, "int8")
        g.output(g.node("DequantizeLinear", [g.node("QuantizeLinear", [y, ys, yz]), ys, yz]))

    return graph


_p(
    "matmulint_kws_pw",
    "kws",
    "int8",
    "MLPerf Tiny DS-CNN (KWS) int8, pointwise 64->64 at 25x5 as MatMulInteger: "
    "int8 (125x64, zero point -3) @ int8 (64x64) -> int32",
    _matmul_int(125, 64, 64, a_dtype="int8", a_zero=-3),
    atol=0.0,
    rtol=0.0,
    tags=["quantized", "mlperf-tiny", "gemm"],
)
_p(
    "matmulint_ae_640x128",
    "anomaly",
    "int8",
    "MLPerf Tiny FC autoencoder int8, layer 1 640->128 as MatMulInteger: uint8 (1x640) @ int8 -> int32",
    _matmul_int(1, 640, 128),
    atol=0.0,
    rtol=0.0,
    tags=["quantized", "mlperf-tiny", "gemv"],
)
_p(
    "matmulint_mobilebert_ffn",
    "nlp",
    "int8",
    "MobileBERT dynamically quantized, FFN intermediate MatMulInteger: uint8 (1x128x128) @ int8 "
    "(128x512) -> int32",
    _matmul_int((1, 128, 128), 128, 512),
    atol=0.0,
    rtol=0.0,
    tags=["quantized", "transformer", "gemm"],
)
_p(
    "convint_kws_stem",
    "kws",
    "int8",
    "MLPerf Tiny DS-CNN (KWS) int8, stem ConvInteger 10x4 s2 1->64ch: uint8 1x1x49x10 -> int32 "
    "1x64x25x5 (written as im2col + MatMulInteger)",
    _conv_integer(1, 1, 49, 10, 64, (10, 4), 2, [4, 1, 5, 1]),
    atol=0.0,
    rtol=0.0,
    tags=["quantized", "mlperf-tiny", "conv", "im2col"],
)
_p(
    "convint_vww_pw_32x64",
    "wakeword",
    "int8",
    "MLPerf Tiny VWW MobileNetV1-0.25 int8, block 4 pointwise ConvInteger 32->64ch at 12x12 "
    "(written as MatMulInteger)",
    _conv_integer(1, 32, 12, 12, 64, 1, 1, [0, 0, 0, 0]),
    atol=0.0,
    rtol=0.0,
    tags=["quantized", "mlperf-tiny", "conv", "1x1"],
)
_p(
    "qdq_conv_vww_stem",
    "wakeword",
    "int8",
    "MLPerf Tiny VWW MobileNetV1-0.25 int8 (QDQ), stem conv 3x3 s2 3->8ch on 96x96, per-channel weights",
    _qdq_conv((1, 3, 96, 96), 8, 3, 2, [0, 0, 1, 1]),
    # the float conv may land on the other side of a rounding boundary in TVM and ONNX Runtime
    # (different summation order), moving an output by one quantization step (y_scale = 0.04)
    atol=0.0401,
    rtol=0.0,
    tags=["quantized", "mlperf-tiny", "conv", "qdq"],
)
