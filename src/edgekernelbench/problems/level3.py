"""Level 3: compact edge models, end to end, float32 and (for MLPerf Tiny) int8 QDQ.

Every model is written layer by layer as its published definition writes it, with random weights from
a fixed seed (nothing is downloaded). BatchNormalization is folded: each conv/dense that Keras follows
with BN has, in the ONNX graph, its weights and one bias per output channel. Dropout is an identity at
inference and does not appear.

The four MLPerf Tiny v0.5+ reference models (github.com/mlcommons/tiny, benchmark/training/):

* KWS DS-CNN, keyword_spotting/keras_model.py (`model_architecture='ds_cnn'`): input 49x10x1 MFCC;
  Conv2D(64, (10,4), s2, 'same') + BN + ReLU; 4 x [DepthwiseConv2D(3x3, 'same') + BN + ReLU,
  Conv2D(64, 1x1) + BN + ReLU]; AveragePooling2D((49//2, 10//2) = (24, 5)) over the 25x5 map (it reads
  rows 0..23 only: a 1x1 output, not a global pool); Dense(12, softmax). All convs have biases.
* VWW MobileNetV1 alpha 0.25, visual_wake_words/vww_model.py: input 96x96x3; Conv2D(8, 3x3, s2,
  'same') + BN + ReLU, then 13 depthwise-separable blocks (DepthwiseConv2D + BN + ReLU, Conv2D 1x1 +
  BN + ReLU) 8->16, 16->32 (s2), 32->32, 32->64 (s2), 64->64, 64->128 (s2), 5 x 128->128,
  128->256 (s2), 256->256; AveragePooling2D(3x3); Dense(2, softmax). Plain ReLU (not ReLU6) and
  biases on every conv, as that file writes it.
* IC ResNet-8, image_classification/keras_model.py `resnet_v1_eembc` (filters 16/32/64; newer
  versions of that file default to 26/52/104 filters, "200k params"): input 32x32x3; Conv2D 3x3 +
  BN + ReLU; three stacks of [Conv2D 3x3 (stride 1, 2, 2) + BN + ReLU, Conv2D 3x3 + BN] added to
  the shortcut (identity in stack 1, Conv2D 1x1 s2 without BN in stacks 2 and 3), then ReLU;
  AveragePooling2D(8); Dense(10, softmax).
* AD FC autoencoder, anomaly_detection/keras_model.py: 640 -> 4 x [Dense(128) + BN + ReLU] ->
  Dense(8) + BN + ReLU -> 4 x [Dense(128) + BN + ReLU] -> Dense(640) (linear).

Keras 'same' padding is asymmetric for stride 2 on even sizes (ONNX pads [0, 0, 1, 1]), and the KWS
stem pads H by 4 + 5 and W by 1 + 1.

Parameter counts (Keras `model.summary()` "Total params": BN counts 4 per channel, gamma, beta,
moving mean, moving variance; 2 of them trainable) vs the BN-folded count in the ONNX graph:

=============  ===========  ==========  ======================================================
model          Keras total  folded      the folded graph drops 4 per BN channel (kept bias)
=============  ===========  ==========  ======================================================
DS-CNN          24,908        22,604    9 BN x 64 ch
MobileNetV1     221,794      210,850    2,736 BN channels
ResNet-8         78,666       77,706    240 BN channels
FC-AE           269,992      265,864    1,032 BN channels
=============  ===========  ==========  ======================================================

The figures often quoted for these models, about 22.6k, 211k, 78k and 266k, are the folded counts
(what a deployed TFLite/ONNX file holds), not Keras' totals. `PUBLISHED` cites a source for each.

Further models (float32 only): Keras MobileNetV2 alpha 0.35 at 96x96 with the 1000-class ImageNet
head; a 2-layer BERT-style encoder at MobileBERT's intra-block sizes (seq 128, hidden 128, 4 heads,
FFN 512, post-LayerNorm, GELU); a 1-D CNN for UCI-HAR windows (this suite's own design); YAMNet
(MobileNetV1 on 96x64 log-mel patches, 521 sigmoid outputs; tensorflow/models research/audioset/yamnet).

Weights: He-style N(0, 2/fan_in) before ReLU, N(0, 1/fan_in) before linear outputs, BN-folded biases
N(0.05, 0.1^2) (slightly positive, so ReLUs keep about half their inputs), so activations keep about
unit scale through the whole depth. Classifier heads are *standardized*: random weights on the pooled
features of random inputs give logits that hardly depend on the input (every input shares the
features' means, which dominate their variation after pooling), so the head is drawn on standardized
features, W' = W * logit_std / sd and b' = b - W' mu, with mu and sd the per-feature mean and
spread over 16 calibration inputs (ONNX Runtime on the graph being built, same seed; rounded to 3
significant digits). The logits then vary by about logit_std between inputs and the argmax changes.

int8 variants (QDQ, as ONNX Runtime's static quantizer writes it; the MLPerf Tiny references are
deployed full int8): per-tensor symmetric int8 weights (zero point 0), int32 biases with scale =
input scale x weight scale, per-tensor int8 activations (ReLU outputs: zero point -128), every scale
a power of two (as fixed-point and NPU quantizers use), which makes every Conv/Gemm/Add exact in
float32 and TVM and ONNX Runtime agree bit for bit (see QDQ_ATOL). Activation ranges are the min/max
over the 16 calibration inputs of the float model (same weights), rounded to 3 significant digits;
the head is standardized on the int8 model's own pooled features. The softmax runs in float on the
dequantized int8 logits. Scales and zero points are Constant nodes: the graph's initializers are the
int8 weights and int32 biases, exactly the folded parameters (a Q/DQ pair's zero point only moves
its clipping window, which well-calibrated ranges rarely reach, so as a weight it would "not affect
the output"). TVM 0.27 imports QDQ around float Conv/Gemm (not ConvInteger).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from onnx import numpy_helper

from .base import Problem
from .graph import GraphBuilder
from .suite import suite

PROBLEMS: list[Problem] = []  # the problems this module registers, in definition order


# ---------------------------------------------------------------- parameter accounting
@dataclass(frozen=True)
class LayerCount:
    """Parameters of one layer as Keras counts them, and what the BN-folded ONNX graph keeps."""

    layer: str
    weights: int  # kernel elements
    bias: int = 0  # the layer's own bias (use_bias=True), 0 without
    bn: int = 0  # channels of the BatchNormalization that follows, 0 without
    bn_per_channel: int = 4  # Keras: gamma, beta, moving mean, moving variance (3 with scale=False)
    norm: int = 0  # LayerNormalization gamma + beta (kept as they are)

    @property
    def keras(self) -> int:
        return self.weights + self.bias + self.bn * self.bn_per_channel + self.norm

    @property
    def trainable(self) -> int:  # BN's moving mean and variance are not trainable
        return self.weights + self.bias + self.bn * (self.bn_per_channel - 2) + self.norm

    @property
    def folded(self) -> int:
        # BN folds into the kernel (scale) and one bias per channel, which absorbs the layer's own bias
        return self.weights + (self.bn if self.bn else self.bias) + self.norm


@dataclass(frozen=True)
class Published:
    params: int  # the Keras "Total params" of the published definition
    source: str
    quoted: int | None = None  # the figure the issue quotes (the folded count, see the module doc)
    macs: int | None = None  # multiply-accumulates per inference, where the source gives them


PUBLISHED: dict[str, Published] = {
    "dscnn_kws": Published(
        24_908,
        "Keras model.summary() of the MLPerf Tiny KWS reference model kws_ref_model (mlcommons/tiny "
        "benchmark/training/keyword_spotting/keras_model.py, ds_cnn): 'Total params: 24,908, Trainable "
        "params: 23,756', as printed in github.com/dmorn/mlperf-jetson README.md",
        quoted=22_600,
    ),
    # 216 + 8 (stem) + 9*1240 + 1240 (depthwise) + 196,224 + 1488 (pointwise) + 4*2736 (BN) + 514 (dense)
    "mobilenetv1_025_vww": Published(
        221_794,
        "Keras count of mlcommons/tiny benchmark/training/visual_wake_words/vww_model.py mobilenet_v1() "
        "(from SiliconLabs/platform_ml_models eembc/Person_detection, MobileNet_v1_0.25_96)",
        quoted=211_000,
    ),
    # 448 + 2*2320 + 4640 + 9248 + 544 + 18,496 + 36,928 + 2112 (convs) + 4*240 (BN) + 650 (dense)
    "resnet8_ic": Published(
        78_666,
        "Keras count of mlcommons/tiny benchmark/training/image_classification/keras_model.py "
        "resnet_v1_eembc() with num_filters 16 (v0.5/v1.0 reference, trained model pretrainedResnet)",
        quoted=78_000,
    ),
    # 82,048 + 3*16,512 + 1032 + 1152 + 3*16,512 + 82,560 (dense) + 4*1032 (BN)
    "fc_autoencoder_ad": Published(
        269_992,
        "Keras count of mlcommons/tiny benchmark/training/anomaly_detection/keras_model.py get_model(640) "
        "(Hitachi DCASE 2020 task 2 baseline)",
        quoted=266_000,
    ),
    "mobilenetv2_035_96": Published(
        1_660_000,
        "Keras applications mobilenet_v2.py docstring table (ImageNet checkpoints): mobilenet_v2_0.35_96, "
        "11 M MACs, 1.66 M parameters (this graph: 11.93 M MACs, 10.65 M without the 1280x1000 classifier)",
    ),
    "yamnet": Published(
        3_700_000,
        "tensorflow/models research/audioset/yamnet/README.md: 'the classifier has 3.7M weights and "
        "performs 69.2M multiplies for each 960ms input frame'",
        macs=69_200_000,
    ),
}


# ---------------------------------------------------------------- quantization helpers
def _round_sig(x: float, digits: int = 3) -> float:
    return float(f"{x:.{digits}g}")


def _pow2_at_least(x: float) -> float:
    """The smallest power of two >= x: quantization scales are powers of two (see the module doc)."""
    return float(2.0 ** math.ceil(math.log2(x)))


def _act_qparams(lo: float, hi: float) -> tuple[float, int]:
    """int8 scale (a power of two) and zero point covering [lo, hi] (and 0); a ReLU output (lo = 0)
    gets zero point -128."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    scale = _pow2_at_least(max(hi - lo, 1e-6) / 255.0)
    zero = int(np.clip(round(-128 - lo / scale), -128, 127))
    return scale, zero


def _quantize_weight(w: np.ndarray) -> tuple[np.ndarray, np.float32]:
    """Per-tensor symmetric int8 (zero point 0), the scale the smallest power of two that fits."""
    scale = np.float32(_pow2_at_least(float(np.abs(w).max()) / 127.0))
    return np.clip(np.round(w / scale), -127, 127).astype("int8"), scale


def _same_pads(spatial, kernel, stride) -> list[int]:
    """TF/Keras 'same' padding as ONNX pads (begins..., ends...): the extra pixel goes at the end."""
    begins, ends = [], []
    for n, k in zip(spatial, kernel, strict=True):
        out = -(-n // stride)
        total = max((out - 1) * stride + k - n, 0)
        begins.append(total // 2)
        ends.append(total - total // 2)
    return begins + ends


# ---------------------------------------------------------------- the model writer
class Net:
    """Writes a Keras-style model into a GraphBuilder as float32 ONNX, or as int8 QDQ ONNX
    (`ranges` given: one calibrated (min, max) per quantized activation, in the order the float
    model records them in `probes`), and keeps the per-layer parameter table.

    Tensors are NCHW (NCW for 1-D). Structural constants (shapes, clip bounds, GELU constants, and
    the int8 graphs' scales and zero points) are Constant nodes, so the graph's initializers are
    exactly the model's (folded) parameters: float32, or int8 weights and int32 biases."""

    def __init__(
        self,
        g: GraphBuilder,
        ranges: list[tuple[float, float]] | None = None,
        feature_stats: list[tuple[np.ndarray, np.ndarray]] | None = None,
    ):
        self.g = g
        self.ranges = ranges
        self.feature_stats = feature_stats
        self.table: list[LayerCount] = []
        self.probes: list[str] = []
        self.feature_probes: list[str] = []  # inputs of the standardized classifier heads
        self.shapes: dict[str, tuple[int, ...]] = {}
        self._q: dict[str, tuple[float, int]] = {}  # dequantized tensor -> (scale, zero point)

    @property
    def quantized(self) -> bool:
        return self.ranges is not None

    # ---- helpers
    def constant(self, array) -> str:
        return self.g.node("Constant", [], value=numpy_helper.from_array(np.asarray(array)))

    def _out(self, name: str, shape) -> str:
        self.shapes[name] = tuple(int(s) for s in shape)
        return name

    def _normal(self, shape, std: float, mean: float = 0.0) -> np.ndarray:
        return (mean + std * self.g.rng.standard_normal(shape)).astype("float32")

    def _point(self, y: str) -> str:
        """An activation the int8 graph quantizes (calibrated range)."""
        k = len(self.probes)
        self.probes.append(y)
        if not self.quantized:
            return y
        return self._qdq(y, *_act_qparams(*self.ranges[k]))

    def _qdq(self, y: str, scale: float, zero: int) -> str:
        s, z = self.constant(np.float32(scale)), self.constant(np.int8(zero))
        out = self.g.node("DequantizeLinear", [self.g.node("QuantizeLinear", [y, s, z]), s, z])
        self._q[out] = (scale, zero)
        return self._out(out, self.shapes[y])

    def _keep_q(self, src: str, dst: str) -> str:
        if src in self._q:
            self._q[dst] = self._q[src]
        return dst

    def _params(self, w: np.ndarray, b: np.ndarray | None, x: str) -> list[str]:
        """Weight (and bias) inputs of a Conv/Gemm: float initializers, or int8/int32 + DequantizeLinear."""
        if not self.quantized:
            return [self.g.tensor(w, "w")] + ([self.g.tensor(b, "b")] if b is not None else [])
        wq, w_scale = _quantize_weight(w)
        ins = [
            self.g.node(
                "DequantizeLinear",
                [self.g.tensor(wq, "wq"), self.constant(w_scale), self.constant(np.int8(0))],
            )
        ]
        if b is not None:
            b_scale = np.float32(self._q[x][0] * w_scale)
            bq = np.round(b / b_scale).astype("int32")
            ins.append(self.g.node("DequantizeLinear", [self.g.tensor(bq, "bq"), self.constant(b_scale)]))
        return ins

    def _act(self, y: str, act: str | None) -> str:
        shape = self.shapes[y]
        if act == "relu":
            y = self.g.node("Relu", [y])
        elif act == "relu6":
            y = self.g.node("Clip", [y, self.constant(np.float32(0.0)), self.constant(np.float32(6.0))])
        elif act == "gelu":  # exact (erf) form; opset 17 has no Gelu op
            e = self.g.node("Erf", [self.g.node("Mul", [y, self.constant(np.float32(1 / math.sqrt(2)))])])
            half = self.g.node("Mul", [y, self.constant(np.float32(0.5))])
            y = self.g.node("Mul", [half, self.g.node("Add", [e, self.constant(np.float32(1.0))])])
        elif act is not None:
            raise ValueError(f"unknown activation {act!r}")
        return self._out(y, shape)

    # ---- layers
    def input(self, name: str, shape, **kw) -> str:
        x = self._out(self.g.input(name, shape, **kw), shape)
        return self._point(x)

    def conv(
        self,
        x: str,
        cout: int,
        kernel,
        stride: int = 1,
        padding: str = "same",
        depthwise: bool = False,
        bias: bool = True,
        bn: bool = True,
        bn_per_channel: int = 4,
        act: str | None = "relu",
        name: str = "conv",
    ) -> str:
        """Conv1D/Conv2D/DepthwiseConv2D (+ folded BN) (+ activation)."""
        n, cin, *spatial = self.shapes[x]
        ks = [kernel] * len(spatial) if isinstance(kernel, int) else list(kernel)
        group = cin if depthwise else 1
        cout = cin if depthwise else cout
        pads = _same_pads(spatial, ks, stride) if padding == "same" else [0] * (2 * len(spatial))
        fan_in = cin // group * math.prod(ks)
        gain = 2.0 if act in ("relu", "relu6", "gelu") else 1.0
        w = self._normal((cout, cin // group, *ks), math.sqrt(gain / fan_in))
        has_bias = bias or bn
        b = self._normal((cout,), 0.1, 0.05) if has_bias else None
        self.table.append(LayerCount(name, w.size, cout if bias else 0, cout if bn else 0, bn_per_channel))
        y = self.g.node(
            "Conv",
            [x, *self._params(w, b, x)],
            group=group,
            kernel_shape=ks,
            pads=pads,
            strides=[stride] * len(spatial),
        )
        out_sp = [
            (s + pads[i] + pads[i + len(spatial)] - k) // stride + 1
            for i, (s, k) in enumerate(zip(spatial, ks, strict=True))
        ]
        self._out(y, (n, cout, *out_sp))
        return self._point(self._act(y, act))

    def dense(
        self,
        x: str,
        units: int,
        bias: bool = True,
        bn: bool = False,
        act: str | None = None,
        logit_std: float | None = None,
        name="dense",
    ) -> str:
        """Dense (+ folded BN) (+ activation). `logit_std`: a classifier head whose outputs are
        standardized over the input distribution (see `feature_stats`)."""
        n, k = self.shapes[x]
        gain = 2.0 if act in ("relu", "relu6", "gelu") else 1.0
        w = self._normal((units, k), math.sqrt(gain / k))
        b = self._normal((units,), 0.1, 0.05) if bias or bn else None
        if logit_std is not None:
            # Random weights on pooled features of random inputs give logits that hardly depend on
            # the input: the features' means (the same for every input) dominate their variation.
            # A trained head responds to the features that vary, so this one is drawn on the
            # standardized features: W' = W * logit_std / sd, b' = b - W' mu, with mu and sd the
            # per-feature mean and spread over the calibration inputs (feature_stats).
            self.feature_probes.append(x)
            if self.feature_stats is not None:
                mu, sd = self.feature_stats[len(self.feature_probes) - 1]
                w = (w * logit_std / sd[None, :]).astype("float32")
                if self.quantized:  # center on the int8 weights, or their rounding errors times mu add up
                    wq, w_scale = _quantize_weight(w)
                    w = wq.astype("float32") * w_scale
                b = (b - w @ mu).astype("float32")
        self.table.append(LayerCount(name, w.size, units if bias else 0, units if bn else 0))
        y = self._out(self.g.node("Gemm", [x, *self._params(w, b, x)], transB=1), (n, units))
        return self._point(self._act(y, act))

    def add(self, a: str, b: str, act: str | None = None) -> str:
        y = self._out(self.g.node("Add", [a, b]), self.shapes[a])
        return self._point(self._act(y, act))

    def pool(self, x: str, op: str, kernel, stride=None) -> str:
        n, c, *spatial = self.shapes[x]
        ks = [kernel] * len(spatial) if isinstance(kernel, int) else list(kernel)
        st = ks if stride is None else ([stride] * len(spatial) if isinstance(stride, int) else list(stride))
        y = self.g.node(op, [x], kernel_shape=ks, strides=st)
        out_sp = [(s - k) // t + 1 for s, k, t in zip(spatial, ks, st, strict=True)]
        self._out(y, (n, c, *out_sp))
        if op == "AveragePool":  # its own calibrated range, as ONNX Runtime's quantizer gives it
            return self._point(y)
        return self._keep_q(x, y)  # max pooling commutes with quantization

    def global_avgpool(self, x: str) -> str:
        n, c, *spatial = self.shapes[x]
        y = self._out(self.g.node("GlobalAveragePool", [x]), (n, c, *[1] * len(spatial)))
        return self._point(y)

    def flatten(self, x: str) -> str:
        n, *rest = self.shapes[x]
        y = self._out(self.g.node("Flatten", [x], axis=1), (n, math.prod(rest)))
        return self._keep_q(x, y)

    def probabilities(self, x: str, op: str = "Softmax") -> str:
        """Softmax/Sigmoid of the logits; in the int8 graph, in float on the dequantized int8 logits."""
        y = self.g.node(op, [x], axis=-1) if op == "Softmax" else self.g.node(op, [x])
        return self._out(y, self.shapes[x])

    def output(self, y: str, name: str) -> str:
        return self.g.output(y, rename=name)

    # ---- transformer pieces (float only)
    def linear(
        self, x: str, units: int, act: str | None = None, bias: bool = True, name: str = "dense"
    ) -> str:
        """Keras Dense on the last axis of a (batch, seq, features) tensor: MatMul (+ Add)."""
        *lead, k = self.shapes[x]
        gain = 2.0 if act == "gelu" else 1.0
        w = self._normal((k, units), math.sqrt(gain / k))
        self.table.append(LayerCount(name, w.size, units if bias else 0))
        y = self.g.node("MatMul", [x, self.g.tensor(w, "w")])
        if bias:
            y = self.g.node("Add", [y, self.g.tensor(self._normal((units,), 0.1), "b")])
        return self._act(self._out(y, (*lead, units)), act)

    def layernorm(self, x: str, eps: float = 1e-12) -> str:
        d = self.shapes[x][-1]
        gamma = self.g.tensor((1.0 + 0.1 * self.g.rng.standard_normal(d)).astype("float32"), "gamma")
        beta = self.g.tensor((0.1 * self.g.rng.standard_normal(d)).astype("float32"), "beta")
        self.table.append(LayerCount("layer_norm", 0, norm=2 * d))
        y = self.g.node("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=eps)
        return self._out(y, self.shapes[x])

    def reshape(self, x: str, shape) -> str:
        return self._out(self.g.node("Reshape", [x, self.constant(np.array(shape, np.int64))]), shape)

    def transpose(self, x: str, perm) -> str:
        shape = [self.shapes[x][p] for p in perm]
        return self._out(self.g.node("Transpose", [x], perm=list(perm)), shape)


# ---------------------------------------------------------------- the models
def dscnn_kws(net: Net) -> None:
    x = net.input("mfcc", (1, 1, 49, 10))  # Keras (1, 49, 10, 1), NCHW here
    x = net.conv(x, 64, (10, 4), stride=2, name="conv2d 10x4 s2")  # -> 25x5, pads H 4+5, W 1+1
    for i in range(4):
        x = net.conv(x, 64, 3, depthwise=True, name=f"depthwise_conv2d_{i}")
        x = net.conv(x, 64, 1, name=f"conv2d_{i + 1} 1x1")
    x = net.pool(x, "AveragePool", (24, 5))  # AveragePooling2D((int(49/2), int(10/2))) -> 1x1
    x = net.dense(net.flatten(x), 12, logit_std=2.0, name="dense 12")
    net.output(net.probabilities(x), "probs")


def mobilenetv1_025_vww(net: Net) -> None:
    x = net.input("image", (1, 3, 96, 96), dist="uniform", low=0.0, high=1.0)
    x = net.conv(x, 8, 3, stride=2, name="conv2d 3x3 s2")  # -> 48x48
    blocks = [(16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2)] + [(128, 1)] * 5 + [(256, 2), (256, 1)]
    for i, (cout, stride) in enumerate(blocks):
        x = net.conv(x, 0, 3, stride=stride, depthwise=True, name=f"depthwise_{i + 1}")
        x = net.conv(x, cout, 1, name=f"pointwise_{i + 1}")
    x = net.pool(x, "AveragePool", 3)  # AveragePooling2D(pool_size=x.shape[1:3]) on 3x3
    x = net.dense(net.flatten(x), 2, logit_std=2.0, name="dense 2")
    net.output(net.probabilities(x), "probs")


def resnet8_ic(net: Net) -> None:
    x = net.input("image", (1, 3, 32, 32), dist="uniform", low=0.0, high=1.0)
    x = net.conv(x, 16, 3, name="conv2d 3x3")
    for stack, filters in enumerate((16, 32, 64)):
        stride = 1 if stack == 0 else 2
        y = net.conv(x, filters, 3, stride=stride, name=f"stack{stack + 1} conv a")
        y = net.conv(y, filters, 3, act=None, name=f"stack{stack + 1} conv b")
        if stack:  # 1x1 s2 projection of the identity path, no BN
            x = net.conv(x, filters, 1, stride=2, bn=False, act=None, name=f"stack{stack + 1} shortcut")
        x = net.add(x, y, act="relu")
    x = net.pool(x, "AveragePool", 8)
    x = net.dense(net.flatten(x), 10, logit_std=2.0, name="dense 10")
    net.output(net.probabilities(x), "probs")


def fc_autoencoder_ad(net: Net) -> None:
    x = net.input("features", (1, 640))  # 5 frames x 128 log-mel bands
    for i, units in enumerate([128] * 4 + [8] + [128] * 4):
        x = net.dense(x, units, bn=True, act="relu", name=f"Dense_{i + 1}")
    net.output(net.dense(x, 640, name="Dense_10"), "reconstruction")


def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def mobilenetv2_035_96(net: Net, alpha: float = 0.35, classes: int = 1000) -> None:
    x = net.input("image", (1, 3, 96, 96), dist="uniform", low=-1.0, high=1.0)  # preprocess_input: [-1, 1]
    x = net.conv(x, _make_divisible(32 * alpha), 3, stride=2, bias=False, act="relu6", name="Conv1")
    # (expansion, filters, stride) of blocks 0..16
    spec = [(1, 16, 1), (6, 24, 2), (6, 24, 1), (6, 32, 2), (6, 32, 1), (6, 32, 1)]
    spec += [(6, 64, 2)] + [(6, 64, 1)] * 3 + [(6, 96, 1)] * 3 + [(6, 160, 2)] + [(6, 160, 1)] * 2
    spec += [(6, 320, 1)]
    for i, (expansion, filters, stride) in enumerate(spec):
        cin = net.shapes[x][1]
        out = _make_divisible(int(filters * alpha))
        y = x
        if i:
            y = net.conv(y, expansion * cin, 1, bias=False, act="relu6", name=f"block_{i}_expand")
        y = net.conv(
            y, 0, 3, stride=stride, depthwise=True, bias=False, act="relu6", name=f"block_{i}_depthwise"
        )
        y = net.conv(y, out, 1, bias=False, act=None, name=f"block_{i}_project")
        x = net.add(x, y) if cin == out and stride == 1 else y
    x = net.conv(x, 1280, 1, bias=False, act="relu6", name="Conv_1")
    x = net.flatten(net.global_avgpool(x))
    net.output(net.probabilities(net.dense(x, classes, logit_std=3.0, name="predictions")), "probs")


def transformer_encoder(
    net: Net, layers: int = 2, seq: int = 128, hidden: int = 128, heads: int = 4, ffn: int = 512
) -> None:
    x = net.input("embeddings", (1, seq, hidden))
    hd = hidden // heads
    for i in range(layers):

        def split(t):  # (1, seq, hidden) -> (1, heads, seq, hd)
            return net.transpose(net.reshape(t, (1, seq, heads, hd)), (0, 2, 1, 3))

        q = split(net.linear(x, hidden, name=f"layer{i}/query"))
        # no key bias: it would add q . b_k to a whole row of scores, which the softmax cancels
        k = split(net.linear(x, hidden, bias=False, name=f"layer{i}/key"))
        v = split(net.linear(x, hidden, name=f"layer{i}/value"))
        kt = net.transpose(k, (0, 1, 3, 2))
        scores = net.g.node(
            "Mul", [net.g.node("MatMul", [q, kt]), net.constant(np.float32(1 / math.sqrt(hd)))]
        )
        probs = net.g.node("Softmax", [scores], axis=-1)
        ctx = net._out(net.g.node("MatMul", [probs, v]), (1, heads, seq, hd))
        ctx = net.reshape(net.transpose(ctx, (0, 2, 1, 3)), (1, seq, hidden))
        att = net.linear(ctx, hidden, name=f"layer{i}/attention_output")
        x = net.layernorm(net._out(net.g.node("Add", [x, att]), (1, seq, hidden)))
        h = net.linear(
            net.linear(x, ffn, act="gelu", name=f"layer{i}/intermediate"), hidden, name=f"layer{i}/output"
        )
        x = net.layernorm(net._out(net.g.node("Add", [x, h]), (1, seq, hidden)))
    net.output(x, "hidden_states")


def cnn1d_har(net: Net) -> None:
    x = net.input("imu", (1, 9, 128))  # Keras (1, 128, 9): 128 samples x 9 inertial channels, NCW here
    x = net.conv(x, 32, 5, name="conv1d 32 k5")
    x = net.pool(x, "MaxPool", 2)
    x = net.conv(x, 64, 5, name="conv1d 64 k5")
    x = net.pool(x, "MaxPool", 2)
    x = net.conv(x, 128, 3, name="conv1d 128 k3")
    x = net.flatten(net.global_avgpool(x))
    net.output(net.probabilities(net.dense(x, 6, logit_std=2.0, name="dense 6")), "probs")


def yamnet(net: Net) -> None:
    x = net.input("log_mel", (1, 1, 96, 64))  # one 0.96 s patch: 96 frames x 64 mel bands
    bn = dict(bias=False, bn_per_channel=3)  # use_bias=False; BN(center=True, scale=False)
    x = net.conv(x, 32, 3, stride=2, name="layer1/conv", **bn)
    layers = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5
    layers += [(1024, 2), (1024, 1)]
    for i, (filters, stride) in enumerate(layers):
        x = net.conv(x, 0, 3, stride=stride, depthwise=True, name=f"layer{i + 2}/depthwise_conv", **bn)
        x = net.conv(x, filters, 1, name=f"layer{i + 2}/pointwise_conv", **bn)
    x = net.flatten(net.global_avgpool(x))
    net.output(net.probabilities(net.dense(x, 521, logit_std=2.0, name="logits"), op="Sigmoid"), "scores")


MODELS: dict[str, Callable[[Net], None]] = {
    "dscnn_kws": dscnn_kws,
    "mobilenetv1_025_vww": mobilenetv1_025_vww,
    "resnet8_ic": resnet8_ic,
    "fc_autoencoder_ad": fc_autoencoder_ad,
    "mobilenetv2_035_96": mobilenetv2_035_96,
    "transformer_encoder_2l": transformer_encoder,
    "cnn1d_har": cnn1d_har,
    "yamnet": yamnet,
}
MLPERF_TINY = ("dscnn_kws", "mobilenetv1_025_vww", "resnet8_ic", "fc_autoencoder_ad")


def param_table(model: str) -> list[LayerCount]:
    """The per-layer parameter table of a model, as its definition (MODELS[model]) writes it."""
    net = Net(GraphBuilder(model, seed=0))
    MODELS[model](net)
    return net.table


def published_params(model: str) -> int:
    """Keras' "Total params" of the model as defined here (BN: 4 per channel, or 3 with scale=False)."""
    return sum(layer.keras for layer in param_table(model))


def folded_params(model: str) -> int:
    """Parameters of the BN-folded graph: what the float ONNX graph's initializers hold."""
    return sum(layer.folded for layer in param_table(model))


# ---------------------------------------------------------------- graphs
CALIBRATION_SAMPLES = 16
CALIBRATION_SEED = 0xCA11


def _builder(model) -> Callable[[Net], None]:
    """A model's writer: one of MODELS by name, or the writer itself (the zoo's, problems/zoo.py)."""
    return model if callable(model) else MODELS[model]


def _model_name(model) -> str:
    return model if isinstance(model, str) else model.__name__


def _run(model, rng: np.random.Generator, feature_stats=None, ranges=None) -> tuple[Net, dict]:
    """Builds the model (float32, or int8 with `ranges`) with a copy of `rng` (the weights of the
    graph being built) and runs it in ONNX Runtime on CALIBRATION_SAMPLES inputs; returns the writer
    and, for each of its probes and feature probes, the list of values."""
    from ..onnxrt import ort_session

    fg = GraphBuilder(f"{_model_name(model)}_calibration")
    fg.rng = copy.deepcopy(rng)
    net = Net(fg, ranges, feature_stats)
    _builder(model)(net)
    probes = list(dict.fromkeys(net.probes + net.feature_probes))
    graph_inputs = {s.name for s in fg.specs}
    outputs = {o.name for o in fg.outputs}
    for p in probes:
        if p not in graph_inputs and p not in outputs:
            fg.output(p)
    sess = ort_session(fg.build(), threads=1, optimize=False)
    names = [o.name for o in sess.get_outputs()]
    draw = np.random.default_rng(CALIBRATION_SEED)
    values: dict[str, list[np.ndarray]] = {p: [] for p in probes}
    for _ in range(CALIBRATION_SAMPLES):
        feed = {s.name: s.sample(draw) for s in fg.specs}
        run = dict(zip(names, sess.run(names, feed), strict=True)) | feed
        for p in probes:
            values[p].append(run[p])
    return net, values


def _round_array(a: np.ndarray) -> np.ndarray:
    return np.array([_round_sig(float(v)) for v in a.ravel()], dtype="float32").reshape(a.shape)


def feature_stats(model, rng: np.random.Generator, ranges=None) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """Per-feature mean and spread at the input of each standardized classifier head (None: the
    model has none) of the float model, or of the int8 model with `ranges` (whose features carry
    the quantization error of every layer before: its head is standardized on them), rounded to 3
    significant digits so that the weights do not depend on the last bits of a float computation."""
    fg = GraphBuilder(f"{_model_name(model)}_heads")
    fg.rng = copy.deepcopy(rng)
    probe = Net(fg)
    _builder(model)(probe)
    if not probe.feature_probes:
        return None
    net, values = _run(model, rng, ranges=ranges)
    stats = []
    for p in net.feature_probes:
        a = np.stack([v.reshape(-1) for v in values[p]]).astype(np.float64)
        sd = a.std(axis=0)
        # a feature that hardly varies (a mostly-dead ReLU channel) gets at most twice the typical weight
        sd = np.maximum(sd, 0.5 * float(np.median(sd)) + 1e-6)
        stats.append((_round_array(a.mean(axis=0)), _round_array(sd)))
    return stats


def calibrate(model, rng: np.random.Generator, stats=None) -> list[tuple[float, float]]:
    """(min, max) of every activation the int8 graph quantizes, over CALIBRATION_SAMPLES inputs of the
    float model with the same weights (built from a copy of `rng`), rounded to 3 significant digits."""
    net, values = _run(model, rng, stats)
    return [
        (
            _round_sig(min(float(v.min()) for v in values[p])),
            _round_sig(max(float(v.max()) for v in values[p])),
        )
        for p in net.probes
    ]


def _float_graph(model):
    def graph(g: GraphBuilder):
        _builder(model)(Net(g, feature_stats=feature_stats(model, g.rng)))

    return graph


def _int8_graph(model):
    def graph(g: GraphBuilder):
        # activation ranges from the float model; then the head, standardized on the int8 features
        ranges = calibrate(model, g.rng, feature_stats(model, g.rng))
        net = Net(g, ranges, feature_stats(model, g.rng, ranges))
        _builder(model)(net)
        assert len(net.probes) == len(ranges)

    return graph


# ---------------------------------------------------------------- registration
_add = suite(3, PROBLEMS)


def _p(id, domain, source, graph, tags=(), **kw):
    return _add(id, domain, "model", source, graph, tags, **kw)


_p(
    "dscnn_kws",
    "kws",
    "MLPerf Tiny KWS reference DS-CNN (mlcommons/tiny keyword_spotting/keras_model.py, ds_cnn): 49x10 MFCC, "
    "conv 10x4 s2 64ch + 4 depthwise-separable 64ch blocks at 25x5, avg pool (24,5), dense 12, softmax",
    _float_graph("dscnn_kws"),
    tags=["mlperf-tiny", "cnn", "depthwise"],
)
_p(
    "mobilenetv1_025_vww",
    "wakeword",
    "MLPerf Tiny VWW reference MobileNetV1 alpha 0.25 (mlcommons/tiny visual_wake_words/vww_model.py): "
    "96x96x3, 13 depthwise-separable blocks 8->256ch, ReLU, avg pool 3x3, dense 2 (person / no person), "
    "softmax",
    _float_graph("mobilenetv1_025_vww"),
    tags=["mlperf-tiny", "cnn", "depthwise"],
)
_p(
    "resnet8_ic",
    "vision",
    "MLPerf Tiny IC reference ResNet-8 (mlcommons/tiny image_classification/keras_model.py, resnet_v1_eembc, "
    "filters 16/32/64): CIFAR-10 32x32x3, 3 residual stacks, avg pool 8, dense 10, softmax",
    _float_graph("resnet8_ic"),
    tags=["mlperf-tiny", "cnn", "residual"],
)
_p(
    "fc_autoencoder_ad",
    "anomaly",
    "MLPerf Tiny AD reference FC autoencoder (mlcommons/tiny anomaly_detection/keras_model.py): "
    "640 -> 128x4 -> 8 -> 128x4 -> 640, dense + BN + ReLU, linear output (ToyADMOS log-mel frames)",
    _float_graph("fc_autoencoder_ad"),
    tags=["mlperf-tiny", "mlp", "autoencoder"],
)
_p(
    "mobilenetv2_035_96",
    "vision",
    "Keras MobileNetV2 alpha 0.35 at 96x96 (tf.keras.applications.MobileNetV2, 1000-class ImageNet head): "
    "17 inverted-residual blocks, ReLU6, 1280ch last conv, global pool, dense 1000, softmax",
    _float_graph("mobilenetv2_035_96"),
    tags=["cnn", "depthwise", "inverted-residual"],
)
_p(
    "transformer_encoder_2l",
    "nlp",
    "2-layer BERT-style encoder at MobileBERT's intra-block sizes: seq 128, hidden 128, 4 heads (dim 32), "
    "FFN 512 with GELU (erf), post-LayerNorm; input token embeddings, output hidden states",
    _float_graph("transformer_encoder_2l"),
    # two LayerNorms renormalize every layer's output: |y| ~ 1, float32 reassociation ~ 1e-6
    tags=["transformer", "attention"],
)
_p(
    "cnn1d_har",
    "sensors",
    "1-D CNN for human activity recognition on UCI-HAR windows (128 samples x 9 inertial channels, 6 "
    "classes; this suite's design): conv1d 32 k5, max pool 2, conv1d 64 k5, max pool 2, conv1d 128 k3, "
    "global pool, dense 6, softmax",
    _float_graph("cnn1d_har"),
    tags=["cnn", "conv1d", "time-series"],
)
_p(
    "yamnet",
    "audio",
    "YAMNet audio event classifier (tensorflow/models research/audioset/yamnet): MobileNetV1 on a 96x64 "
    "log-mel patch, 13 depthwise-separable blocks 32->1024ch, global pool, dense 521, sigmoid",
    _float_graph("yamnet"),
    tags=["cnn", "depthwise"],
    # the standardized head computes W'f - W'mu over 1024 features whose means are ~6-10 times their
    # spread: the logits lose a few bits to cancellation. Measured max |tvm - ort| 2.1e-5 over 20
    # draws (the other float models: <= 6.7e-6), so 2e-4 keeps a 10x margin
    atol=2e-4,
    rtol=2e-4,
)

# int8 QDQ variants of the MLPerf Tiny models.
#
# Tolerance. Every scale is a power of two, so every dequantized value is an integer times a power
# of two, and each Conv/Gemm/Add computes integer multiples of s_x * s_w: as long as every partial
# sum stays below 2^24 such units (float32's exact-integer range), float32 accumulation is exact in
# any order. Measured over 20 input draws, the largest sum of |q_x * q_w| is 2^18.4 (ResNet-8;
# DS-CNN 2^15.3, MobileNetV1 2^16.3, AE 2^17.6), so TVM and ONNX Runtime produce bit-identical
# int8 activations and logits: no rounding boundary can fall between them. AveragePool divides an
# exact sum by the window size in both (identical over 200 draws, including the 196 exact ties,
# k + 1/2 steps, of DS-CNN's 120-element window, both rounded half to even). What remains is the
# float softmax of the (identical) int8 logits, where the exp implementations differ by a few ulps:
# measured over 200 draws per model, max |tvm - ort| = 2.4e-7 (relative 3.4e-7); the AE output is
# exact (0). atol = rtol = 1e-5 leaves a margin of 30x, while a one-step change of any int8 logit
# (a step is 1/16 here; the AE's output step 1/32) moves some output by far more than 1e-5, so the
# tolerance hides no quantization error.
#
# With scales that are not powers of two (TFLite's), the conv results differ in their last bits,
# values near a rounding boundary go either way, and in these deep random-weight networks one flipped
# step spreads through later layers (a flipped step changes the next layer's inputs by one step,
# which quantization rounds up to whole steps for some outputs): we measured differences of up to
# 69 output steps of 1/256 for MobileNetV1 that way, too many for a meaningful tolerance.
QDQ_ATOL = 1e-5


def _qdq_problem(model: str, domain: str, source: str, tags):
    return _p(
        f"{model}_int8",
        domain,
        source,
        _int8_graph(model),
        tags=["mlperf-tiny", "int8", "qdq", "quantized", *tags],
        atol=QDQ_ATOL,
        rtol=QDQ_ATOL,
    )


_QDQ = (
    "int8 QDQ: per-tensor int8 weights, int32 biases, int8 activations, power-of-two scales; the reference "
    "deployment is"
)
_qdq_problem(
    "dscnn_kws",
    "kws",
    f"MLPerf Tiny KWS DS-CNN, {_QDQ} the full-int8 kws_ref_model.tflite; softmax in float on the int8 logits",
    ["cnn", "depthwise"],
)
_qdq_problem(
    "mobilenetv1_025_vww",
    "wakeword",
    f"MLPerf Tiny VWW MobileNetV1 alpha 0.25, {_QDQ} vww_96_int8.tflite; softmax in float on the int8 logits",
    ["cnn", "depthwise"],
)
_qdq_problem(
    "resnet8_ic",
    "vision",
    f"MLPerf Tiny IC ResNet-8, {_QDQ} pretrainedResnet_quant.tflite; softmax in float on the int8 logits",
    ["cnn", "residual"],
)
_qdq_problem(
    "fc_autoencoder_ad",
    "anomaly",
    f"MLPerf Tiny AD FC autoencoder, {_QDQ} model_ToyCar_quant_fullint_micro.tflite; int8 output, "
    "dequantized",
    ["mlp", "autoencoder"],
)


# ---------------------------------------------------------------- documentation
def graph_macs(model) -> int:
    """Multiply-accumulates of the Conv/Gemm/MatMul nodes of an ONNX model (batch 1)."""
    from .analysis import _shapes

    shapes = _shapes(model)
    macs = 0
    for n in model.graph.node:
        out = shapes[n.output[0]][0] if n.output[0] in shapes else ()
        if n.op_type == "Conv":
            macs += math.prod(out) * math.prod(shapes[n.input[1]][0][1:])
        elif n.op_type in ("Gemm", "MatMul"):
            macs += math.prod(out) * shapes[n.input[0]][0][-1]
    return int(macs)


def _model_of(problem: Problem) -> str:
    return problem.name.removesuffix("_int8")


def level3_markdown() -> str:
    """docs/problems_l3.md (`python -m edgekernelbench.problems.docs --level 3`)."""

    def shape(s):
        return "x".join(str(d) for d in s.shape)

    lines = [
        "# Level-3 problems: compact edge models",
        "",
        f"{len(PROBLEMS)} problems ({sum('int8' not in p.tags for p in PROBLEMS)} float32 models, "
        f"{sum('int8' in p.tags for p in PROBLEMS)} int8 QDQ variants), defined in "
        "`src/edgekernelbench/problems/level3.py` (see its docstring for the layer-by-layer architectures, "
        "the weight scaling and the int8 scheme).",
        "Generated by `python -m edgekernelbench.problems.docs --level 3`; do not edit by hand.",
        "",
        "*graph params*: elements of the ONNX graph's initializers, i.e. the BatchNorm-folded parameters "
        "(int8 variants: the int8 weights and int32 biases; their scales and zero points are Constant "
        "nodes). *Keras params*: `model.summary()`'s total of the same model as defined in Keras, "
        "BatchNorm counting 4 per channel (gamma, beta, moving mean and variance; YAMNet's "
        "`scale=False` BN: 3). GFLOP counts a multiply-add as 2 "
        "(`edgekernelbench.problems.analysis.graph_cost`); MMAC: multiply-accumulates of the "
        "Conv/Gemm/MatMul nodes. Inputs are NCHW (NCW for the 1-D CNN); tolerances are TVM vs ONNX "
        "Runtime (`atol`, `rtol`).",
        "",
        "| id | domain | source model | input | output | graph params | Keras params | GFLOP | MMAC "
        "| atol / rtol |",
        "|---|---|---|---|---|---:|---:|---:|---:|---|",
    ]
    for p in PROBLEMS:
        m = _model_of(p)
        ins = "<br>".join(f"`{s.name}` {shape(s)} {s.dtype}" for s in p.inputs)
        out = p.model.graph.output[0]
        dims = "x".join(str(d.dim_value) for d in out.type.tensor_type.shape.dim)
        init = sum(math.prod(i.dims) for i in p.model.graph.initializer)
        src = p.source.replace("|", "\\|")
        lines.append(
            f"| `{p.id}` | {p.domain} | {src} | {ins} | `{out.name}` {dims} | {init:,} | "
            f"{published_params(m):,} | {p.flops / 1e9:.4f} | {graph_macs(p.model) / 1e6:.2f} | "
            f"{p.atol:g} / {p.rtol:g} |"
        )
    lines += [
        "",
        "## Published parameter counts",
        "",
        "| model | Keras params (this definition) | published | source | folded (graph) "
        "| quoted in the issue |",
        "|---|---:|---:|---|---:|---:|",
    ]
    for m in MODELS:
        pub = PUBLISHED.get(m)
        keras, folded = published_params(m), folded_params(m)
        if pub is None:
            row = f"| `{m}` | {keras:,} | - | this suite's design (no published figure) | {folded:,} | - |"
        else:
            quoted = f"{pub.quoted:,}" if pub.quoted else "-"
            extra = (
                f" ({pub.macs / 1e6:.1f} M MACs; this graph {graph_macs(_built_model(m)) / 1e6:.2f} M)"
                if pub.macs
                else ""
            )
            row = f"| `{m}` | {keras:,} | {pub.params:,} | {pub.source}{extra} | {folded:,} | {quoted} |"
        lines.append(row)
    lines += [
        "",
        "The figures quoted for the MLPerf Tiny models (about 22.6k, 211k, 78k, 266k) are the "
        "BatchNorm-folded counts, what a deployed TFLite or ONNX file holds (22,604, 210,850, 77,706, "
        "265,864 here), not Keras' totals with BatchNorm (24,908, 221,794, 78,666, 269,992).",
        "",
        "## Problems per domain",
        "",
        "| domain | problems |",
        "|---|---:|",
    ]
    counts: dict[str, int] = {}
    for p in PROBLEMS:
        counts[p.domain] = counts.get(p.domain, 0) + 1
    lines += [f"| {k} | {v} |" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    lines.append(f"| **total** | **{len(PROBLEMS)}** |")
    return "\n".join(lines) + "\n"


def _built_model(model: str):
    return next(p for p in PROBLEMS if p.name == model).model
