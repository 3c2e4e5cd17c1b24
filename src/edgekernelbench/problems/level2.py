"""Level 2: fused subgraphs (blocks) at shapes taken from real edge models.

Every problem builds its ONNX graph in code with random weights from a fixed seed (nothing is
downloaded). Batch norms are folded into the convolution weights and biases, as deployed models
have them. Blocks, as the models define them (NCHW):

* MLPerf Tiny KWS DS-CNN: depthwise 3x3 + BN + ReLU -> pointwise 64->64 + BN + ReLU at 64ch 25x5;
  head: global average pool -> dense 64->12 -> softmax.
* MLPerf Tiny VWW MobileNetV1-0.25 (Keras, 96x96x3): stem 3x3 s2 3->8 @48x48; dw/pw blocks 8->16
  @48, (dw s2) 16->32 @24, 32->32 @24, (dw s2) 32->64 @12, 64->64 @12, (dw s2) 64->128 @6,
  5 x 128->128 @6, ...; every conv + BN + ReLU6; stride-2 convs pad ((0, 1), (0, 1)) (ONNX
  pads [0, 0, 1, 1]).
* MobileNetV2-1.0 (torchvision, 224): stem 3x3 s2 3->32 + ReLU6, block t=1 (dw 32 + project 32->16);
  inverted residuals (t=6): 24ch @56, 32ch @28, 64ch @14, 96ch @14, 160ch @7 (residual when the
  stride is 1 and cin == cout); head 1x1 320->1280 + ReLU6, pool, dense 1280->1000.
* MobileNetV3-Small (torchvision, 224): bneck 1 = dw 3x3 s2 16ch 112->56 + ReLU, SE 16->8->16,
  project 16->16; bneck 5/6 = expand 40->240 + hard-swish, dw 5x5 + hard-swish, SE 240->64->240,
  project 240->40, residual. SE = global pool -> 1x1 conv -> ReLU -> 1x1 conv -> hard-sigmoid -> scale.
* MLPerf Tiny IC ResNet-8 (Keras, 32x32x3): stacks of 16ch @32, 32ch (s2) @16, 64ch (s2) @8; each
  stack conv 3x3 + BN + ReLU, conv 3x3 + BN, (1x1 s2 shortcut), add, ReLU.
* MLPerf Tiny AD FC autoencoder: 640 -> 128 x 4 -> 8 -> 128 x 4 -> 640, dense + BN + ReLU except the
  last (linear) layer.
* MobileBERT: seq 128, 4 heads of dim 32, bottleneck hidden 128, inter-block hidden 512, FFN
  128 -> 512 -> 128 (shipped: ReLU + residual + NoNorm; paper variant: GELU / LayerNorm).
* UCI-HAR 1D-CNN (9 inertial channels x 128 samples): Conv1D(64, 3) + ReLU, Conv1D(64, 3) + ReLU,
  MaxPool1D(2), flatten, dense 3968->100 + ReLU, dense 100->6, softmax.
* Audio front ends: MLPerf Tiny KWS (16 kHz, frame 640 = 40 ms, hop 320 = 20 ms, 49 frames, FFT
  1024, 40 mel bins 20-4000 Hz) and YAMNet (frame 400 = 25 ms, hop 160 = 10 ms, FFT 512, 64 mel
  bins 125-7500 Hz, log(mel + 0.001), 96-frame patch).

ONNX ops that TVM 0.27's Relax ONNX frontend does not import are written another way: there is no
converter for DFT / STFT / MelWeightMatrix (the front ends use MatMul with cos/sin and mel
constants) or ConvInteger (the int8 blocks use the QDQ form: QuantizeLinear/DequantizeLinear
around a float Conv). Opset 17 has no Gelu op: GELU is written in its erf form.
"""

from __future__ import annotations

import math

import numpy as np

from .base import Problem
from .graph import GraphBuilder
from .suite import suite

PROBLEMS: list[Problem] = []  # the problems this module registers, in definition order


_p = suite(2, PROBLEMS)


class _Net:
    """Layer helpers on a GraphBuilder. Clip bounds and other scalars are shared per graph.

    Weights are N(0, gain^2 / (fan_in * m2)), so a pre-activation has a standard deviation of about
    `gain` when the layer's input has second moment `m2` (about 0.5 after a ReLU of unit-variance
    values); biases are N(shift, 0.1^2): a small positive `shift` before a ReLU keeps outputs from
    being mostly zero. ReLU6 layers use gain 3 so that both clip bounds are hit, as with BN-folded
    MobileNet weights."""

    def __init__(self, g: GraphBuilder):
        self.g = g
        self._scalars: dict[float, str] = {}

    def scalar(self, value: float) -> str:
        if value not in self._scalars:
            self._scalars[value] = self.g.const(value)
        return self._scalars[value]

    def bias(self, n: int, shift: float = 0.0) -> str:
        return self.g.tensor((shift + 0.1 * self.g.rng.standard_normal(n)).astype("float32"), "b")

    def act(self, y: str, act: str | None) -> str:
        g = self.g
        if act is None:
            return y
        if act == "relu":
            return g.node("Relu", [y])
        if act == "relu6":
            return g.node("Clip", [y, self.scalar(0.0), self.scalar(6.0)])
        if act == "hswish":
            return g.node("HardSwish", [y])
        if act == "hsigmoid":  # PyTorch's relu6(x + 3) / 6
            return g.node("HardSigmoid", [y], alpha=1.0 / 6, beta=0.5)
        if act == "sigmoid":
            return g.node("Sigmoid", [y])
        if act == "gelu":  # opset 17 has no Gelu op: the exact (erf) form 0.5 * x * (1 + erf(x / sqrt(2)))
            e = g.node("Erf", [g.node("Div", [y, self.scalar(math.sqrt(2.0))])])
            return g.node("Mul", [g.node("Mul", [y, self.scalar(0.5)]), g.node("Add", [e, self.scalar(1.0)])])
        raise ValueError(f"unknown activation {act!r}")

    def conv(
        self,
        x: str,
        cin: int,
        cout: int,
        k,
        stride: int = 1,
        pads=None,
        group: int = 1,
        act: str | None = None,
        gain: float = 1.0,
        m2: float = 1.0,
        shift: float = 0.0,
        dims: int = 2,
        bias: bool = True,
    ) -> str:
        """Conv (BN folded into weights and bias) + activation. pads: ONNX [begins..., ends...]."""
        ks = [k] * dims if isinstance(k, int) else list(k)
        if pads is None:  # symmetric "same" padding for odd kernels (torchvision)
            pads = [kk // 2 for kk in ks] * 2
        fan_in = cin // group * math.prod(ks)
        w = self.g.weight((cout, cin // group, *ks), scale=gain / math.sqrt(fan_in * m2))
        ins = [x, w, self.bias(cout, shift)] if bias else [x, w]
        y = self.g.node("Conv", ins, group=group, kernel_shape=ks, pads=list(pads), strides=[stride] * dims)
        return self.act(y, act)

    def dense(self, x: str, k: int, n: int, act=None, gain=1.0, m2=1.0, shift=0.0) -> str:
        """Gemm with a (n, k) weight (transB, as Keras/PyTorch exports write Dense/Linear) + bias."""
        w = self.g.weight((n, k), scale=gain / math.sqrt(k * m2))
        return self.act(self.g.node("Gemm", [x, w, self.bias(n, shift)], transB=1), act)

    def linear(self, x: str, k: int, n: int, act=None, gain=1.0, m2=1.0, shift=0.0) -> str:
        """MatMul with a (k, n) weight + bias Add, as transformer exports write a Linear."""
        w = self.g.weight((k, n), scale=gain / math.sqrt(k * m2))
        return self.act(self.g.node("Add", [self.g.node("MatMul", [x, w]), self.bias(n, shift)]), act)

    def affine(self, x: str, n: int) -> str:
        """Per-channel gamma * x + beta on the last axis (MobileBERT's NoNorm)."""
        gamma = self.g.tensor((1.0 + 0.1 * self.g.rng.standard_normal(n)).astype("float32"), "gamma")
        return self.g.node("Add", [self.g.node("Mul", [x, gamma]), self.bias(n)])

    def layernorm(self, x: str, n: int, eps: float = 1e-12) -> str:
        gamma = self.g.tensor((1.0 + 0.1 * self.g.rng.standard_normal(n)).astype("float32"), "gamma")
        return self.g.node("LayerNormalization", [x, gamma, self.bias(n)], axis=-1, epsilon=eps)


# the input distributions of blocks whose input is the output of an activation
POST_RELU6 = dict(dist="uniform", low=0.0, high=6.0)  # second moment 12
POST_RELU = dict(dist="uniform", low=0.0, high=2.0)  # second moment 4/3
POST_HSWISH = dict(dist="uniform", low=-0.375, high=3.0)  # hard-swish range; second moment ~2.7


# ---------------------------------------------------------------- depthwise-separable blocks
def _ds_block(c, cout, h, w, stride=1, pads=None, act="relu", in_kw=None, m2=1.0):
    """Depthwise 3x3 (+ folded BN) + act -> pointwise 1x1 c->cout (+ folded BN) + act."""

    def graph(g: GraphBuilder):
        n = _Net(g)
        x = g.input("x", (1, c, h, w), **(in_kw or {}))
        gain = 3.0 if act == "relu6" else 1.0
        y = n.conv(x, c, c, 3, stride, pads, group=c, act=act, gain=gain, m2=m2, shift=0.1)
        m2_mid = 5.0 if act == "relu6" else 0.5  # second moment of the depthwise output
        g.output(n.conv(y, c, cout, 1, pads=[0, 0, 0, 0], act=act, gain=gain, m2=m2_mid, shift=0.1))

    return graph


_p(
    "ds_block_kws",
    "kws",
    "ds_block",
    "MLPerf Tiny DS-CNN (KWS), depthwise-separable block 1: dw 3x3 64ch + ReLU -> pw 64->64 + ReLU at 25x5",
    _ds_block(64, 64, 25, 5, in_kw=POST_RELU, m2=4 / 3),
    tags=["conv", "depthwise", "mlperf-tiny"],
)
_p(
    "ds_block_vww_8x16",
    "wakeword",
    "ds_block",
    "MLPerf Tiny VWW MobileNetV1-0.25, block 1: dw 3x3 8ch + ReLU6 -> pw 8->16 + ReLU6 at 48x48",
    _ds_block(8, 16, 48, 48, act="relu6", in_kw=POST_RELU6, m2=12.0),
    tags=["conv", "depthwise", "mlperf-tiny"],
)
_p(
    "ds_block_s2_vww_16x32",
    "wakeword",
    "ds_block",
    "MLPerf Tiny VWW MobileNetV1-0.25, block 2: dw 3x3 s2 16ch 48x48 -> 24x24 + ReLU6 -> pw 16->32 + ReLU6",
    _ds_block(16, 32, 48, 48, stride=2, pads=[0, 0, 1, 1], act="relu6", in_kw=POST_RELU6, m2=12.0),
    tags=["conv", "depthwise", "mlperf-tiny", "strided", "asymmetric-pad"],
)
_p(
    "ds_block_vww_128",
    "wakeword",
    "ds_block",
    "MLPerf Tiny VWW MobileNetV1-0.25, blocks 7-11: dw 3x3 128ch + ReLU6 -> pw 128->128 + ReLU6 at 6x6",
    _ds_block(128, 128, 6, 6, act="relu6", in_kw=POST_RELU6, m2=12.0),
    tags=["conv", "depthwise", "mlperf-tiny"],
)


# ---------------------------------------------------------------- MobileNetV2 inverted residuals
def _inverted_residual(cin, cout, h, w, t=6, stride=1, k=3):
    """Expand 1x1 + ReLU6 -> depthwise kxk + ReLU6 -> linear project 1x1 (-> + x when the shapes allow).
    The block input is the previous block's linear projection (plus skip): about unit variance."""
    exp = cin * t

    def graph(g: GraphBuilder):
        n = _Net(g)
        x = g.input("x", (1, cin, h, w))
        y = n.conv(x, cin, exp, 1, pads=[0, 0, 0, 0], act="relu6", gain=3.0, shift=0.3)
        y = n.conv(y, exp, exp, k, stride, group=exp, act="relu6", gain=3.0, m2=4.0, shift=0.3)
        y = n.conv(y, exp, cout, 1, pads=[0, 0, 0, 0], m2=6.0)
        g.output(g.node("Add", [x, y]) if stride == 1 and cin == cout else y)

    return graph


_p(
    "inverted_residual_mbv2_24ch",
    "vision",
    "inverted_residual",
    "MobileNetV2-1.0 (224), stage 2 block 2: expand 24->144 + ReLU6, dw 3x3 + ReLU6, project "
    "144->24, + residual, at 56x56",
    _inverted_residual(24, 24, 56, 56),
    tags=["conv", "depthwise", "residual", "relu6"],
)
_p(
    "inverted_residual_mbv2_32ch",
    "vision",
    "inverted_residual",
    "MobileNetV2-1.0 (224), stage 3 blocks 2-3: expand 32->192 + ReLU6, dw 3x3 + ReLU6, project "
    "192->32, + residual, at 28x28",
    _inverted_residual(32, 32, 28, 28),
    tags=["conv", "depthwise", "residual", "relu6"],
)
_p(
    "inverted_residual_mbv2_96ch",
    "vision",
    "inverted_residual",
    "MobileNetV2-1.0 (224), stage 5 blocks 2-3: expand 96->576 + ReLU6, dw 3x3 + ReLU6, project "
    "576->96, + residual, at 14x14",
    _inverted_residual(96, 96, 14, 14),
    tags=["conv", "depthwise", "residual", "relu6"],
)
_p(
    "inverted_residual_s2_mbv2_24x32",
    "vision",
    "inverted_residual",
    "MobileNetV2-1.0 (224), stage 3 block 1: expand 24->144 + ReLU6, dw 3x3 s2 56x56 -> 28x28 + "
    "ReLU6, project 144->32 (no residual)",
    _inverted_residual(24, 32, 56, 56, stride=2),
    tags=["conv", "depthwise", "strided", "relu6"],
)


# ---------------------------------------------------------------- MobileNetV3 squeeze-excite bottlenecks
def _se(n: _Net, y: str, c: int, squeeze: int, m2: float) -> str:
    """Squeeze-excite: global pool -> 1x1 conv c->squeeze + ReLU -> 1x1 conv squeeze->c ->
    hard-sigmoid -> channel scale. The gate's pre-activation has a std of about 2 (gates spread
    over (0, 1), some saturated)."""
    s = n.g.node("GlobalAveragePool", [y])
    s = n.conv(s, c, squeeze, 1, pads=[0, 0, 0, 0], act="relu", gain=1.5, m2=m2, shift=0.5)
    s = n.conv(s, squeeze, c, 1, pads=[0, 0, 0, 0], act="hsigmoid", gain=3.0, m2=1.0)
    return n.g.node("Mul", [y, s])


def _mbv3_bneck(cin, exp, cout, h, w, k, stride, squeeze, act, in_kw=None, m2=1.0):
    """(Expand 1x1 + act) -> depthwise kxk + act -> SE -> project 1x1 (-> + x at stride 1)."""

    def graph(g: GraphBuilder):
        n = _Net(g)
        x = g.input("x", (1, cin, h, w), **(in_kw or {}))
        y, m2_ = x, m2
        if exp != cin:
            y = n.conv(x, cin, exp, 1, pads=[0, 0, 0, 0], act=act, gain=2.0, m2=m2, shift=0.2)
            m2_ = 2.0
        y = n.conv(y, exp, exp, k, stride, group=exp, act=act, gain=2.0, m2=m2_, shift=0.2)
        y = _se(n, y, exp, squeeze, m2=2.0)
        y = n.conv(y, exp, cout, 1, pads=[0, 0, 0, 0], m2=1.0)
        g.output(g.node("Add", [x, y]) if stride == 1 and cin == cout else y)

    return graph


_p(
    "se_bottleneck_mbv3s_16ch_s2",
    "vision",
    "se_bottleneck",
    "MobileNetV3-Small (224), bneck 1: dw 3x3 s2 16ch 112x112 -> 56x56 + ReLU, SE 16->8->16 "
    "(hard-sigmoid), project 16->16 (no expansion, no residual)",
    _mbv3_bneck(16, 16, 16, 112, 112, 3, 2, 8, "relu", in_kw=POST_HSWISH, m2=2.7),
    tags=["conv", "depthwise", "squeeze-excite", "strided"],
)
_p(
    "se_bottleneck_mbv3s_40ch",
    "vision",
    "se_bottleneck",
    "MobileNetV3-Small (224), bneck 5-6: expand 40->240 + hard-swish, dw 5x5 + hard-swish, SE "
    "240->64->240 (hard-sigmoid), project 240->40, + residual, at 14x14",
    _mbv3_bneck(40, 240, 40, 14, 14, 5, 1, 64, "hswish"),
    tags=["conv", "depthwise", "squeeze-excite", "residual", "hard-swish", "5x5"],
)


# ---------------------------------------------------------------- ResNet-8 basic blocks
def _resnet_block(cin, cout, h, w, stride=1):
    """conv 3x3 (s) + ReLU -> conv 3x3 -> + shortcut (x, or 1x1 s2 conv of x) -> ReLU.
    The input is the previous stack's ReLU output; Keras 'same' pads stride-2 convs (0, 1)."""
    pads = [0, 0, 1, 1] if stride == 2 else None

    def graph(g: GraphBuilder):
        n = _Net(g)
        x = g.input("x", (1, cin, h, w), **POST_RELU)
        y = n.conv(x, cin, cout, 3, stride, pads, act="relu", m2=4 / 3, shift=0.1)
        y = n.conv(y, cout, cout, 3, m2=0.5)
        sc = x if stride == 1 else n.conv(x, cin, cout, 1, stride, [0, 0, 0, 0], m2=4 / 3)
        g.output(n.act(g.node("Add", [y, sc]), "relu"))

    return graph


_p(
    "residual_block_resnet8_16ch",
    "vision",
    "residual_block",
    "MLPerf Tiny IC ResNet-8, stack 1: conv 3x3 16->16 + ReLU, conv 3x3 16->16, + x, ReLU at 32x32",
    _resnet_block(16, 16, 32, 32),
    tags=["conv", "residual", "mlperf-tiny"],
)
_p(
    "residual_block_s2_resnet8_16x32",
    "vision",
    "residual_block",
    "MLPerf Tiny IC ResNet-8, stack 2: conv 3x3 s2 16->32 + ReLU, conv 3x3 32->32, + 1x1 s2 shortcut "
    "16->32, ReLU; 32x32 -> 16x16",
    _resnet_block(16, 32, 32, 32, stride=2),
    tags=["conv", "residual", "mlperf-tiny", "strided", "asymmetric-pad"],
)
_p(
    "residual_block_s2_resnet8_32x64",
    "vision",
    "residual_block",
    "MLPerf Tiny IC ResNet-8, stack 3: conv 3x3 s2 32->64 + ReLU, conv 3x3 64->64, + 1x1 s2 shortcut "
    "32->64, ReLU; 16x16 -> 8x8",
    _resnet_block(32, 64, 16, 16, stride=2),
    tags=["conv", "residual", "mlperf-tiny", "strided", "asymmetric-pad"],
)


# ---------------------------------------------------------------- MLP (FC autoencoder)
def _mlp(dims, acts, in_kw=None, m2=1.0):
    def graph(g: GraphBuilder):
        n = _Net(g)
        y, m2_ = g.input("x", (1, dims[0]), **(in_kw or {})), m2
        for k, m, act in zip(dims[:-1], dims[1:], acts, strict=True):
            y = n.dense(y, k, m, act=act, m2=m2_, shift=0.1 if act else 0.0)
            m2_ = 0.5
        g.output(y)

    return graph


_p(
    "mlp_ae_encoder",
    "anomaly",
    "mlp",
    "MLPerf Tiny FC autoencoder (anomaly detection), encoder layers 1-2: dense 640->128 + ReLU -> "
    "dense 128->128 + ReLU (BN folded)",
    _mlp([640, 128, 128], ["relu", "relu"]),
    tags=["gemv", "mlperf-tiny"],
)
_p(
    "mlp_ae_decoder",
    "anomaly",
    "mlp",
    "MLPerf Tiny FC autoencoder (anomaly detection), decoder layers 9-10: dense 128->128 + ReLU -> "
    "dense 128->640 (linear reconstruction)",
    _mlp([128, 128, 640], ["relu", None], in_kw=POST_RELU, m2=4 / 3),
    tags=["gemv", "mlperf-tiny"],
)


# ---------------------------------------------------------------- MobileBERT
SEQ, HEADS, HEAD_DIM = 128, 4, 32


def _attention(g: GraphBuilder):
    """softmax(Q K^T / sqrt(d)) V over 4 heads; Q, K, V are inputs (the projections are dense problems).
    Q and K have std 1.5, so the scaled scores have a std of about 2: peaked but not one-hot rows."""
    shape = (1, HEADS, SEQ, HEAD_DIM)
    q = g.input("q", shape, scale=1.5)
    k = g.input("k", shape, scale=1.5)
    v = g.input("v", shape)
    kt = g.node("Transpose", [k], perm=[0, 1, 3, 2])
    s = g.node("Mul", [g.node("MatMul", [q, kt]), g.const(1.0 / math.sqrt(HEAD_DIM))])
    g.output(g.node("MatMul", [g.node("Softmax", [s], axis=-1), v]))


_p(
    "attention_mobilebert",
    "nlp",
    "attention",
    "MobileBERT self-attention core: softmax(Q K^T / sqrt(32)) V, 4 heads x seq 128 x head dim 32",
    _attention,
    tags=["transformer", "batch-matmul", "softmax"],
)


def _ffn(act, residual_nonorm):
    def graph(g: GraphBuilder):
        n = _Net(g)
        x = g.input("x", (1, SEQ, 128))
        y = n.linear(x, 128, 512, act=act, shift=0.1)
        y = n.linear(y, 512, 128, m2=0.5)
        if residual_nonorm:
            y = n.affine(g.node("Add", [y, x]), 128)
        g.output(y)

    return graph


_p(
    "ffn_mobilebert",
    "nlp",
    "ffn",
    "MobileBERT (shipped), one of the 4 stacked FFNs: matmul 128->512 + bias + ReLU -> matmul 512->128 "
    "+ bias, + residual, NoNorm (gamma * x + beta), seq 128",
    _ffn("relu", True),
    tags=["transformer", "gemm", "residual"],
)
_p(
    "ffn_gelu_mobilebert",
    "nlp",
    "ffn",
    "MobileBERT (GELU variant of the paper), FFN: matmul 128->512 + bias + GELU (erf) -> matmul "
    "512->128 + bias, seq 128",
    _ffn("gelu", False),
    tags=["transformer", "gemm", "erf"],
)


def _ln_matmul(d_in, d_out):
    def graph(g: GraphBuilder):
        n = _Net(g)
        x = g.input("x", (1, SEQ, d_in), scale=2.0)  # a residual sum: not normalized yet
        g.output(n.linear(n.layernorm(x, d_in), d_in, d_out))

    return graph


_p(
    "ln_matmul_mobilebert_512",
    "nlp",
    "norm_matmul",
    "MobileBERT (LayerNorm variant), layer-output LayerNorm over the inter-block hidden 512 -> next "
    "layer's input bottleneck matmul 512->128 + bias, seq 128",
    _ln_matmul(512, 128),
    tags=["transformer", "gemm", "reduction"],
)
_p(
    "ln_matmul_mobilebert_128",
    "nlp",
    "norm_matmul",
    "MobileBERT (LayerNorm variant), attention-output LayerNorm over the bottleneck hidden 128 -> FFN "
    "intermediate matmul 128->512 + bias, seq 128",
    _ln_matmul(128, 512),
    tags=["transformer", "gemm", "reduction"],
)


# ---------------------------------------------------------------- int8 (QDQ) blocks
def _qdq_ds_block(c, cout, h, w, stride, pads, dtype, act_max=6.0):
    """A depthwise-separable block quantized in QDQ form, as ONNX Runtime's static quantizer writes
    it: 8-bit activations (per-tensor scale and zero point), int8 symmetric per-output-channel
    weights, int32 biases (scale x_scale * w_scale, zero point 0), all DequantizeLinear'd around float
    Convs; each Conv + ReLU is QuantizeLinear'd to 8 bits. The input and the output are 8-bit tensors.

    Activations are post-ReLU with range [0, act_max]: int8 with zero point -128 or uint8 with zero
    point 0, scale act_max / 255. The quantization range then also clips at act_max (TFLite's fused
    ReLU6), so the block needs no Clip. (ConvInteger, the integer-only alternative, does not import
    into TVM 0.27.)"""
    lo, hi = (-128, 127) if dtype == "int8" else (0, 255)
    zero = lo  # real 0.0 maps to the lowest code
    a_scale = act_max / 255

    def graph(g: GraphBuilder):
        n = _Net(g)
        xq = g.input("x", (1, c, h, w), dtype, dist="int", low=lo, high=hi)
        s, z = g.const(a_scale), g.const(zero, dtype)

        def qconv(xf, cin, co, k, stride, pads, group, m2):
            fan_in = cin // group * k * k
            wq = g.int_tensor((co, cin // group, k, k), -127, 127, "int8")
            # float weight std 2 / sqrt(fan_in * m2): pre-activations have std ~2 (int8 codes: std ~73)
            w_scale = ((0.5 + g.rng.random(co)) * 2.0 / math.sqrt(fan_in * m2) / 73).astype("float32")
            wf = g.node(
                "DequantizeLinear", [wq, g.tensor(w_scale, "ws"), g.const(np.zeros(co), "int8")], axis=0
            )
            b_scale = (a_scale * w_scale).astype("float32")
            b_float = 0.5 + 0.5 * g.rng.standard_normal(co)  # positive on average: ReLU outputs not mostly 0
            bq = g.tensor(np.round(b_float / b_scale).astype("int32"), "bq")
            bf = g.node("DequantizeLinear", [bq, g.tensor(b_scale, "bs")], axis=0)
            y = g.node(
                "Conv",
                [xf, wf, bf],
                group=group,
                kernel_shape=[k, k],
                pads=list(pads),
                strides=[stride, stride],
            )
            return g.node("QuantizeLinear", [n.act(y, "relu"), s, z])

        # the input is uniform over the codes: second moment (act_max^2 / 3) in float
        m2_in = act_max**2 / 3
        yq = qconv(g.node("DequantizeLinear", [xq, s, z]), c, c, 3, stride, pads, c, m2_in)
        yq = qconv(g.node("DequantizeLinear", [yq, s, z]), c, cout, 1, 1, [0, 0, 0, 0], 1, 3.0)
        g.output(yq)

    return graph


# TVM and ONNX Runtime sum the float convolutions in different orders, so a pre-quantization value
# that lies within rounding error of a rounding boundary may round to neighbouring codes: outputs
# may differ by one quantization step (1 in the 8-bit output codes). A flipped code of the
# intermediate tensor moves a pointwise output by |w| * scale, far less than a step, so the
# difference stays at one step; the tolerance is exactly that.
_p(
    "int8_ds_block_kws",
    "kws",
    "int8_block",
    "MLPerf Tiny DS-CNN (KWS) int8 (QDQ), depthwise-separable block: dw 3x3 64ch + ReLU -> pw 64->64 "
    "+ ReLU at 25x5; int8 activations (zero point -128), per-channel int8 weights, int32 bias",
    _qdq_ds_block(64, 64, 25, 5, 1, [1, 1, 1, 1], "int8"),
    atol=1.0,
    rtol=0.0,
    tags=["quantized", "qdq", "mlperf-tiny", "conv", "depthwise"],
)
_p(
    "uint8_ds_block_s2_vww",
    "wakeword",
    "int8_block",
    "MLPerf Tiny VWW MobileNetV1-0.25 8-bit (QDQ), block 6: dw 3x3 s2 64ch 12x12 -> 6x6 + ReLU6 -> "
    "pw 64->128 + ReLU6; uint8 activations (scale 6/255, zero point 0), per-channel int8 weights",
    _qdq_ds_block(64, 128, 12, 12, 2, [0, 0, 1, 1], "uint8"),
    atol=1.0,
    rtol=0.0,
    tags=["quantized", "qdq", "mlperf-tiny", "conv", "depthwise", "strided"],
)


# ---------------------------------------------------------------- segmentation heads
def _upsample_conv(c, cout, h, w):
    def graph(g: GraphBuilder):
        n = _Net(g)
        x = g.input("x", (1, c, h, w))
        up = g.node(
            "Resize",
            [x, "", g.constant_node(np.array([1.0, 1.0, 2.0, 2.0], np.float32))],
            mode="linear",
            coordinate_transformation_mode="half_pixel",
        )
        # bilinear interpolation smooths: the upsampled map's second moment is about 0.6
        g.output(n.conv(up, c, cout, 3, act="relu", m2=0.6, shift=0.1))

    return graph


_p(
    "upsample_conv_seg",
    "vision",
    "seg_head",
    "U-Net/FPN-style segmentation decoder on MobileNetV2 at 192x192: 2x bilinear upsample of the "
    "32ch stride-8 feature 24x24 -> 48x48, then conv 3x3 32->24 + ReLU (to meet the stride-4 skip)",
    _upsample_conv(32, 24, 24, 24),
    tags=["conv", "upsample", "segmentation"],
)


def _lraspp(g: GraphBuilder):
    """torchvision LR-ASPP head: cbr = relu(1x1 conv 960->128); gate = sigmoid(1x1 conv 960->128 of the
    pooled input, no bias); bilinear upsample of cbr * gate to the low-level size; classifier 1x1 of
    the low-level 40ch feature + classifier 1x1 of the upsampled 128ch."""
    n = _Net(g)
    high = g.input("high", (1, 960, 14, 14), **POST_HSWISH)
    low = g.input("low", (1, 40, 28, 28))
    cbr = n.conv(high, 960, 128, 1, pads=[0, 0, 0, 0], act="relu", m2=2.7, shift=0.1)
    pooled = g.node("GlobalAveragePool", [high])
    # pooled channels are all near the input mean (~1.3): gain 1.5 spreads the gate over (0, 1)
    gate = n.conv(pooled, 960, 128, 1, pads=[0, 0, 0, 0], act="sigmoid", gain=1.5, m2=1.7, bias=False)
    y = g.node("Mul", [cbr, gate])
    y = g.node(
        "Resize",
        [y, "", "", g.constant_node(np.array([1, 128, 28, 28], np.int64))],
        mode="linear",
        coordinate_transformation_mode="half_pixel",
    )
    logits_low = n.conv(low, 40, 21, 1, pads=[0, 0, 0, 0])
    logits_high = n.conv(y, 128, 21, 1, pads=[0, 0, 0, 0], m2=0.3)
    g.output(g.node("Add", [logits_low, logits_high]))


_p(
    "lraspp_head_mbv3",
    "vision",
    "seg_head",
    "torchvision LR-ASPP MobileNetV3-Large (224, dilated last stage) head: 960ch 14x14 high + 40ch "
    "28x28 low features -> 1x1 conv + ReLU, pooled sigmoid gate, bilinear 2x upsample, 21-class "
    "1x1 classifiers, add",
    _lraspp,
    tags=["conv", "upsample", "segmentation", "sigmoid"],
)


# ---------------------------------------------------------------- sensor time series
def _har_conv1d_block(g: GraphBuilder):
    n = _Net(g)
    x = g.input("x", (1, 9, 128))  # standardized accelerometer / gyroscope channels
    y = n.conv(x, 9, 64, 3, pads=[0, 0], act="relu", dims=1, shift=0.1)  # 'valid': 128 -> 126
    y = n.conv(y, 64, 64, 3, pads=[0, 0], act="relu", dims=1, m2=0.5, shift=0.1)  # 126 -> 124
    g.output(g.node("MaxPool", [y], kernel_shape=[2], strides=[2]))  # 124 -> 62


_p(
    "conv1d_block_har",
    "sensors",
    "conv1d_block",
    "1D-CNN human-activity recognition on UCI-HAR windows (9 inertial channels x 128 samples): "
    "Conv1D 9->64 k3 + ReLU, Conv1D 64->64 k3 + ReLU ('valid'), MaxPool1D 2 -> 64x62",
    _har_conv1d_block,
    tags=["conv", "conv1d", "time-series", "pool"],
)


# ---------------------------------------------------------------- audio front ends
def _hz_to_mel(f):
    return 1127.0 * np.log1p(np.asarray(f, dtype=np.float64) / 700.0)


def mel_filterbank(n_mel: int, n_fft: int, sample_rate: int, f_lo: float, f_hi: float) -> np.ndarray:
    """(n_fft // 2 + 1, n_mel) triangular HTK-mel filters, as tf.signal.linear_to_mel_weight_matrix
    builds them (the DC bin gets no weight)."""
    n_bins = n_fft // 2 + 1
    spec_mel = _hz_to_mel(np.linspace(0.0, sample_rate / 2, n_bins)[1:])[:, None]
    edges = np.linspace(_hz_to_mel(f_lo), _hz_to_mel(f_hi), n_mel + 2)
    lower, center, upper = edges[:-2], edges[1:-1], edges[2:]
    rising = (spec_mel - lower) / (center - lower)
    falling = (upper - spec_mel) / (upper - center)
    w = np.maximum(0.0, np.minimum(rising, falling))
    w = np.concatenate([np.zeros((1, n_mel)), w], axis=0)
    assert np.all(w.sum(axis=0) > 0), "every mel filter must cover a frequency bin"
    return w.astype("float32")


def _log_mel(samples, frame, hop, n_fft, n_mel, sr, f_lo, f_hi, magnitude, eps):
    """Framing -> periodic Hann window -> real DFT as two matmuls (cos, -sin constants; the frame is
    zero-padded to n_fft, so only the frame's rows of the matrices remain) -> power re^2 + im^2
    (or its square root, the magnitude) -> mel filterbank matmul -> log(x + eps).

    TVM 0.27 has no DFT/STFT converter, hence the matmuls. Framing: when the frame is a multiple of
    the hop, slices of the signal reshaped to (frames, hop) are concatenated; otherwise a Gather
    with constant frame indices."""
    n_frames = (samples - frame) // hop + 1
    n_bins = n_fft // 2 + 1

    def graph(g: GraphBuilder):
        x = g.input("audio", (1, samples), scale=0.1)  # speech-level amplitude in [-1, 1] units
        if frame % hop == 0:
            parts = []
            for j in range(frame // hop):
                start = j * hop
                end = start + n_frames * hop
                part = g.node(
                    "Slice",
                    [
                        x,
                        g.constant_node(np.array([start], np.int64)),
                        g.constant_node(np.array([end], np.int64)),
                        g.constant_node(np.array([1], np.int64)),
                    ],
                )
                parts.append(
                    g.node("Reshape", [part, g.constant_node(np.array([1, n_frames, hop], np.int64))])
                )
            frames = g.node("Concat", parts, axis=2)
        else:
            idx = np.arange(n_frames)[:, None] * hop + np.arange(frame)[None, :]
            frames = g.node("Gather", [x, g.constant_node(idx.astype(np.int64))], axis=1)  # 1, frames, frame
        t = np.arange(frame)
        window = (0.5 - 0.5 * np.cos(2 * np.pi * t / frame)).astype("float32")  # periodic Hann
        frames = g.node("Mul", [frames, g.tensor(window, "window")])
        phase = 2 * np.pi * np.outer(t, np.arange(n_bins)) / n_fft
        re = g.node("MatMul", [frames, g.tensor(np.cos(phase).astype("float32"), "dft_cos")])
        im = g.node("MatMul", [frames, g.tensor((-np.sin(phase)).astype("float32"), "dft_sin")])
        spec = g.node("Add", [g.node("Mul", [re, re]), g.node("Mul", [im, im])])
        if magnitude:
            spec = g.node("Sqrt", [spec])
        mel = g.node("MatMul", [spec, g.tensor(mel_filterbank(n_mel, n_fft, sr, f_lo, f_hi), "mel")])
        # eps is a structural constant (a Constant node): it only guards log(0)
        g.output(g.node("Log", [g.node("Add", [mel, g.constant_node(np.float32(eps))])]))

    return graph


_p(
    "logmel_frontend_kws",
    "kws",
    "audio_frontend",
    "MLPerf Tiny KWS front end: 1 s of 16 kHz audio -> 49 frames of 640 (hop 320), periodic Hann, "
    "1024-point DFT (matmul), power, 40 mel bins 20-4000 Hz, log(x + 1e-6) -> 49x40",
    _log_mel(16000, 640, 320, 1024, 40, 16000, 20.0, 4000.0, magnitude=False, eps=1e-6),
    tags=["dft", "matmul", "mlperf-tiny", "spectrogram"],
)
_p(
    "logmel_frontend_yamnet",
    "audio",
    "audio_frontend",
    "YAMNet front end: 15600 samples at 16 kHz -> 96 frames of 400 (25 ms, hop 10 ms, Gather), "
    "periodic Hann, 512-point DFT (matmul), magnitude, 64 mel bins 125-7500 Hz, log(x + 0.001) -> 96x64",
    _log_mel(15600, 400, 160, 512, 64, 16000, 125.0, 7500.0, magnitude=True, eps=1e-3),
    tags=["dft", "matmul", "spectrogram", "gather"],
)


# ---------------------------------------------------------------- stems and classifier heads
def _mbv2_stem(g: GraphBuilder):
    n = _Net(g)
    x = g.input("x", (1, 3, 224, 224))  # normalized RGB
    y = n.conv(x, 3, 32, 3, 2, act="relu6", gain=3.0, shift=0.3)  # 224 -> 112
    y = n.conv(y, 32, 32, 3, group=32, act="relu6", gain=3.0, m2=4.0, shift=0.3)
    g.output(n.conv(y, 32, 16, 1, pads=[0, 0, 0, 0], m2=6.0))


_p(
    "stem_mbv2",
    "vision",
    "stem",
    "MobileNetV2-1.0 (224), stem conv 3x3 s2 3->32 + ReLU6 (224 -> 112) and block 1 (t=1): dw 3x3 "
    "32ch + ReLU6, project 32->16 at 112x112",
    _mbv2_stem,
    tags=["conv", "depthwise", "stem", "relu6"],
)


def _gap_classifier(c, h, w, classes, softmax, in_kw, m2, conv=None):
    """(1x1 conv + ReLU6 ->) global average pool -> flatten -> dense -> (softmax)."""

    def graph(g: GraphBuilder):
        n = _Net(g)
        x = g.input("x", (1, c, h, w), **in_kw)
        feat, m2_ = c, m2
        if conv:
            x = n.conv(x, c, conv, 1, pads=[0, 0, 0, 0], act="relu6", gain=3.0, m2=m2, shift=0.3)
            feat, m2_ = conv, 4.0
        y = g.node("Flatten", [g.node("GlobalAveragePool", [x])])
        # the pooled features are channel means (all near the same value): gain 2 spreads the logits
        y = n.dense(y, feat, classes, gain=2.0, m2=m2_)
        g.output(g.node("Softmax", [y], axis=-1) if softmax else y)

    return graph


_p(
    "head_kws",
    "kws",
    "head",
    "MLPerf Tiny DS-CNN (KWS) head: global average pool of 64ch 25x5 -> dense 64->12 -> softmax",
    _gap_classifier(64, 25, 5, 12, True, POST_RELU, 4 / 3),
    tags=["reduction", "gemv", "softmax", "mlperf-tiny", "classifier"],
)
_p(
    "head_mbv2",
    "vision",
    "head",
    "MobileNetV2-1.0 (224) head: conv 1x1 320->1280 + ReLU6 at 7x7, global average pool, dense "
    "1280->1000 (logits)",
    _gap_classifier(320, 7, 7, 1000, False, {}, 1.0, conv=1280),
    tags=["conv", "reduction", "gemv", "classifier", "relu6"],
)


def _har_head(g: GraphBuilder):
    n = _Net(g)
    x = g.input("x", (1, 64, 62), **POST_RELU)
    y = g.node("Flatten", [x])  # 3968
    y = n.dense(y, 64 * 62, 100, act="relu", m2=4 / 3, shift=0.1)
    y = n.dense(y, 100, 6, gain=2.0, m2=0.5)
    g.output(g.node("Softmax", [y], axis=-1))


_p(
    "head_har",
    "sensors",
    "head",
    "1D-CNN human-activity recognition (UCI-HAR) head: flatten 64x62 -> dense 3968->100 + ReLU -> "
    "dense 100->6 -> softmax",
    _har_head,
    tags=["gemv", "softmax", "classifier", "time-series"],
)
