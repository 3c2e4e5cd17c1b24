"""The zoo: edge models that are not in the suite, held out from the search's development.

The suite (levels 1-3) is where the rules, the cost model and LEKA are developed; the zoo is where they are
measured, at the end, and both figures are reported (`ekb list --suite zoo`, `benchmarks/zoo.py`). A change
that helps the suite and hurts the zoo is not kept. The zoo is never part of a level's default selection
(registry.select): `--suite zoo` asks for it.

Every model is made here with seeded random weights (nothing is downloaded), in architectures and
exporters' habits the suite does not have:

- two published CNNs from the model files the `onnx` package ships (its backend test data: SqueezeNet 1.0
  and Inception v1, opset 9, Caffe2-exported names such as `fire2/squeeze1x1_w_0`, weights made by
  ConstantOfShape, biases listed as graph inputs, Dropout left in), their weights replaced by random ones
  and their input brought to an edge resolution;
- written layer by layer (problems/level3.py's Net): ShuffleNetV2 0.5x (channel split and shuffle),
  EfficientNet-Lite0 (TensorFlow's tensor names), an MCUNet-style VWW net (mixed 3/5/7 kernels and
  expansions) and its int8 QDQ version, TC-ResNet8 (1-D temporal convolutions over MFCC; TVM 0.27's ONNX
  frontend has no GRU or LSTM, so a recurrent keyword spotter cannot be imported), a MobileViT-XXS-style
  net (convolutions and a transformer over unfolded patches), a small U-Net segmenter (resize-up and skip
  concatenations), ResNet-18 with BatchNormalization left unfolded and PyTorch's tensor names, and a
  PyTorch-style MLP autoencoder (unfolded BatchNorm1d, Identity nodes).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from .base import Problem
from .graph import GraphBuilder
from .level3 import QDQ_ATOL, Net, _float_graph, _int8_graph
from .suite import register

ZOO = "zoo"
PROBLEMS: list[Problem] = []


def _register(name: str, domain: str, source: str, graph, tags=(), **kw) -> Problem:
    p = register(
        Problem(
            id=f"L3/zoo_{name}",
            level=3,
            domain=domain,
            category="model",
            source=source,
            graph=graph,
            tags=(ZOO, *tags),
            suite=ZOO,
            **kw,
        )
    )
    PROBLEMS.append(p)
    return p


# ---------------------------------------------------------------- layers the suite's models do not use
def concat(net: Net, xs: list[str], axis: int = 1) -> str:
    shape = list(net.shapes[xs[0]])
    shape[axis] = sum(net.shapes[x][axis] for x in xs)
    return net._out(net.g.node("Concat", xs, axis=axis), shape)


def channel_split(net: Net, x: str) -> tuple[str, str]:
    n, c, *sp = net.shapes[x]
    half = c // 2
    a, b = net.g.node("Split", [x, net.constant(np.array([half, c - half], np.int64))], n_out=2, axis=1)
    return net._out(a, (n, half, *sp)), net._out(b, (n, c - half, *sp))


def channel_shuffle(net: Net, x: str, groups: int = 2) -> str:
    n, c, h, w = net.shapes[x]
    y = net.reshape(x, (n, groups, c // groups, h, w))
    y = net.transpose(y, (0, 2, 1, 3, 4))
    return net.reshape(y, (n, c, h, w))


def upsample2x(net: Net, x: str) -> str:
    n, c, h, w = net.shapes[x]
    scales = net.constant(np.array([1.0, 1.0, 2.0, 2.0], np.float32))
    y = net.g.node("Resize", [x, "", scales], mode="nearest")
    return net._out(y, (n, c, 2 * h, 2 * w))


def maxpool_same(net: Net, x: str, k: int = 3, stride: int = 2) -> str:
    n, c, h, w = net.shapes[x]
    pad = k // 2
    y = net.g.node("MaxPool", [x], kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)
    out = [(s + 2 * pad - k) // stride + 1 for s in (h, w)]
    return net._out(y, (n, c, *out))


def batchnorm(net: Net, x: str) -> str:
    """An unfolded BatchNormalization (as an exporter that does not fold it writes it)."""
    c = net.shapes[x][1]
    rng = net.g.rng
    params = [
        (1.0 + 0.1 * rng.standard_normal(c)).astype("float32"),  # scale
        (0.1 * rng.standard_normal(c)).astype("float32"),  # bias
        (0.1 * rng.standard_normal(c)).astype("float32"),  # running mean
        (1.0 + 0.1 * rng.random(c)).astype("float32"),  # running variance
    ]
    names = [net.g.tensor(p, "bn") for p in params]
    return net._out(net.g.node("BatchNormalization", [x, *names], epsilon=1e-5), net.shapes[x])


# ---------------------------------------------------------------- models written layer by layer
def shufflenet_v2_05(net: Net) -> None:
    """ShuffleNetV2 0.5x (Ma et al. 2018), 96x96, stages of 4/8/4 units at 48/96/192 channels."""
    x = net.input("image", (1, 3, 96, 96), dist="uniform", low=0.0, high=1.0)
    x = net.conv(x, 24, 3, stride=2)
    x = maxpool_same(net, x)
    for cout, repeats in ((48, 4), (96, 8), (192, 4)):
        for i in range(repeats):
            if i == 0:  # down-sampling unit: both branches see the input
                cin = net.shapes[x][1]
                left = net.conv(x, cin, 3, stride=2, depthwise=True, act=None)
                left = net.conv(left, cout // 2, 1)
                right = net.conv(x, cout // 2, 1)
                right = net.conv(right, cout // 2, 3, stride=2, depthwise=True, act=None)
                right = net.conv(right, cout // 2, 1)
            else:
                left, right = channel_split(net, x)
                right = net.conv(right, cout // 2, 1)
                right = net.conv(right, cout // 2, 3, depthwise=True, act=None)
                right = net.conv(right, cout // 2, 1)
            x = channel_shuffle(net, concat(net, [left, right]))
    x = net.conv(x, 1024, 1)
    x = net.flatten(net.global_avgpool(x))
    net.output(net.probabilities(net.dense(x, 10, logit_std=2.0)), "prob")


def efficientnet_lite0(net: Net) -> None:
    """EfficientNet-Lite0 (TensorFlow's lite variant: ReLU6, no squeeze-excitation), 96x96."""
    x = net.input("images", (1, 3, 96, 96), dist="uniform", low=-1.0, high=1.0)
    x = net.conv(x, 32, 3, stride=2, act="relu6")
    cin = 32
    # (expansion, channels, repeats, stride, kernel)
    for t, c, n, s, k in ((1, 16, 1, 1, 3), (6, 24, 2, 2, 3), (6, 40, 2, 2, 5), (6, 80, 3, 2, 3),
                          (6, 112, 3, 1, 5), (6, 192, 4, 2, 5), (6, 320, 1, 1, 3)):  # fmt: skip
        for i in range(n):
            stride = s if i == 0 else 1
            y = x if t == 1 else net.conv(x, cin * t, 1, act="relu6")
            y = net.conv(y, 0, k, stride=stride, depthwise=True, act="relu6")
            y = net.conv(y, c, 1, act=None)
            x = net.add(x, y) if stride == 1 and cin == c else y
            cin = c
    x = net.conv(x, 1280, 1, act="relu6")
    x = net.flatten(net.global_avgpool(x))
    net.output(net.probabilities(net.dense(x, 10, logit_std=2.0)), "Softmax")


def mcunet_vww(net: Net) -> None:
    """An MCUNet-style person detector (Lin et al. 2020's searched nets: inverted residuals with mixed
    kernel sizes and expansions), 64x64, 2 classes."""
    x = net.input("input", (1, 3, 64, 64), dist="uniform", low=-1.0, high=1.0)
    x = net.conv(x, 16, 3, stride=2, act="relu6")
    x = net.conv(x, 0, 3, depthwise=True, act="relu6")
    x = net.conv(x, 8, 1, act=None)
    cin = 8
    # (expansion, channels, stride, kernel)
    blocks = ((4, 16, 2, 7), (3, 16, 1, 3), (5, 24, 2, 7), (4, 24, 1, 5), (6, 40, 2, 5), (4, 40, 1, 7))
    blocks += ((5, 48, 1, 3), (6, 96, 2, 5), (4, 96, 1, 3), (6, 160, 1, 7))
    for t, c, s, k in blocks:
        y = net.conv(x, cin * t, 1, act="relu6")
        y = net.conv(y, 0, k, stride=s, depthwise=True, act="relu6")
        y = net.conv(y, c, 1, act=None)
        x = net.add(x, y) if s == 1 and cin == c else y
        cin = c
    x = net.flatten(net.global_avgpool(x))
    net.output(net.probabilities(net.dense(x, 2, logit_std=2.0)), "person")


def tcresnet8_kws(net: Net) -> None:
    """TC-ResNet8 (Choi et al. 2019): MFCC coefficients as channels, 1-D convolutions over 101 frames."""
    x = net.input("mfcc", (1, 40, 101))
    x = net.conv(x, 16, 3, bias=False, act="relu")
    for c in (24, 32, 48):
        y = net.conv(x, c, 9, stride=2, bias=False)
        y = net.conv(y, c, 9, bias=False, act=None)
        short = net.conv(x, c, 1, stride=2, bias=False)
        x = net.add(y, short, act="relu")
    x = net.flatten(net.global_avgpool(x))
    net.output(net.probabilities(net.dense(x, 12, logit_std=2.0)), "keyword")


def mobilevit_xxs(net: Net, dim: int = 64, heads: int = 4) -> None:
    """A MobileViT-XXS-style net (Mehta & Rastegari 2022): MobileNetV2 blocks, then a MobileViT block
    (local 3x3 conv, 1x1 to `dim`, 2x2 patches unfolded into sequences, 2 transformer layers, folded back,
    fused with its input), 64x64, 10 classes."""
    x = net.input("pixel_values", (1, 3, 64, 64), dist="uniform", low=0.0, high=1.0)
    x = net.conv(x, 16, 3, stride=2, act="relu6")
    cin = 16
    for t, c, s in ((2, 16, 1), (2, 24, 2), (2, 24, 1), (2, 48, 2)):
        y = net.conv(x, cin * t, 1, act="relu6")
        y = net.conv(y, 0, 3, stride=s, depthwise=True, act="relu6")
        y = net.conv(y, c, 1, act=None)
        x = net.add(x, y) if s == 1 and cin == c else y
        cin = c
    n, c, h, w = net.shapes[x]  # 1, 48, 8, 8
    local = net.conv(x, c, 3, act="relu6")
    local = net.conv(local, dim, 1, act=None)
    p = 2  # patch 2x2: 4 sequences of (h/2 * w/2) tokens
    t = net.reshape(local, (n, dim, h // p, p, w // p, p))
    t = net.transpose(t, (0, 3, 5, 2, 4, 1))  # n, ph, pw, h/p, w/p, dim
    seq = net.reshape(t, (n * p * p, (h // p) * (w // p), dim))
    hd = dim // heads
    for _ in range(2):
        y = net.layernorm(seq, eps=1e-5)
        b, s_len, _ = net.shapes[y]

        def split(z, b=b, s_len=s_len):
            return net.transpose(net.reshape(z, (b, s_len, heads, hd)), (0, 2, 1, 3))

        q, k, v = (split(net.linear(y, dim)) for _ in range(3))
        scores = net._out(net.g.node("MatMul", [q, net.transpose(k, (0, 1, 3, 2))]), (b, heads, s_len, s_len))
        scores = net._out(
            net.g.node("Mul", [scores, net.constant(np.float32(1 / math.sqrt(hd)))]), net.shapes[scores]
        )
        attn = net._out(net.g.node("Softmax", [scores], axis=-1), net.shapes[scores])
        ctx = net._out(net.g.node("MatMul", [attn, v]), (b, heads, s_len, hd))
        ctx = net.reshape(net.transpose(ctx, (0, 2, 1, 3)), (b, s_len, dim))
        seq = net._out(net.g.node("Add", [seq, net.linear(ctx, dim)]), net.shapes[seq])
        y = net.layernorm(seq, eps=1e-5)
        y = net.linear(net.linear(y, 2 * dim, act="gelu"), dim)
        seq = net._out(net.g.node("Add", [seq, y]), net.shapes[seq])
    t = net.reshape(seq, (n, p, p, h // p, w // p, dim))
    t = net.transpose(t, (0, 5, 3, 1, 4, 2))  # n, dim, h/p, ph, w/p, pw
    folded = net.reshape(t, (n, dim, h, w))
    y = net.conv(folded, c, 1, act="relu6")
    x = net.conv(concat(net, [x, y]), c, 3, act="relu6")
    x = net.conv(x, 192, 1, act="relu6")
    x = net.flatten(net.global_avgpool(x))
    net.output(net.probabilities(net.dense(x, 10, logit_std=2.0)), "logits_softmax")


def unet_small(net: Net) -> None:
    """A small U-Net segmenter (Ronneberger et al. 2015, at an edge size): 64x64 grayscale, 8/16/32
    channels, nearest-neighbour upsampling and skip concatenations, a per-pixel sigmoid."""
    x = net.input("image", (1, 1, 64, 64), dist="uniform", low=0.0, high=1.0)
    skips = []
    for c in (8, 16):
        x = net.conv(net.conv(x, c, 3), c, 3)
        skips.append(x)
        x = net.pool(x, "MaxPool", 2)
    x = net.conv(net.conv(x, 32, 3), 32, 3)
    for c, skip in zip((16, 8), reversed(skips), strict=True):
        x = net.conv(upsample2x(net, x), c, 1)
        x = net.conv(net.conv(concat(net, [skip, x]), c, 3), c, 3)
    mask = net.conv(x, 1, 1, act=None)
    y = net._out(net.g.node("Sigmoid", [mask]), net.shapes[mask])
    net.output(y, "mask")


def resnet18_bn(net: Net) -> None:
    """ResNet-18 (He et al. 2016) as PyTorch exports it without folding: every BatchNormalization left in,
    convolutions without bias; 32x32 input, 10 classes."""
    x = net.input("input", (1, 3, 32, 32), dist="normal")
    x = net.conv(x, 64, 7, stride=2, bias=False, bn=False, act=None)
    x = net._act(batchnorm(net, x), "relu")
    x = maxpool_same(net, x)
    cin = 64
    for c, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for i in range(2):
            s = stride if i == 0 else 1
            y = net._act(batchnorm(net, net.conv(x, c, 3, stride=s, bias=False, bn=False, act=None)), "relu")
            y = batchnorm(net, net.conv(y, c, 3, bias=False, bn=False, act=None))
            if s != 1 or cin != c:
                x = batchnorm(net, net.conv(x, c, 1, stride=s, bias=False, bn=False, act=None))
            x = net._act(net._out(net.g.node("Add", [y, x]), net.shapes[y]), "relu")
            cin = c
    x = net.flatten(net.global_avgpool(x))
    net.output(net.dense(x, 10, logit_std=2.0), "output")


def mlp_autoencoder_bn(net: Net) -> None:
    """An anomaly-detection autoencoder as PyTorch exports it: Linear + BatchNorm1d (unfolded) + ReLU
    layers 640-128-128-8-128-128-640, an Identity node where the module had a no-op."""
    x = net.input("input", (1, 640))
    for units in (128, 128, 8, 128, 128):
        y = net.dense(x, units, act=None)
        y = net._out(net.g.node("Identity", [y]), net.shapes[y])
        x = net._act(batchnorm(net, y), "relu")
    net.output(net.dense(x, 640), "reconstruction")


# ---------------------------------------------------------------- exporters' names
def tensorflow_names(model: onnx.ModelProto, scope: str) -> onnx.ModelProto:
    """Every value renamed as tf2onnx writes TensorFlow's: `<scope>/<op>_<k>/<Op>:0`."""
    return _renamed(model, lambda k, node, out: f"{scope}/{node.op_type.lower()}_{k}/{node.op_type}:{out}")


def pytorch_names(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every value renamed as torch.onnx.export writes them: `/layer{k}/{Op}_output_0` for activations,
    `onnx::{Op}_{n}` for parameters."""
    counter = iter(range(100, 10**6))
    params = {t.name: f"onnx::{_consumer(model, t.name)}_{next(counter)}" for t in model.graph.initializer}
    return _renamed(model, lambda k, node, out: f"/layer{k}/{node.op_type}_output_{out}", params)


def _consumer(model: onnx.ModelProto, name: str) -> str:
    return next((n.op_type for n in model.graph.node if name in n.input), "Constant")


def _renamed(model: onnx.ModelProto, activation: Callable, params: dict | None = None) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    graph_io = {v.name for v in (*g.input, *g.output)}
    names = dict(params or {})
    for k, node in enumerate(g.node):
        for i, o in enumerate(node.output):
            if o not in graph_io:
                names[o] = activation(k, node, i)
        node.name = f"{node.op_type}_{k}"
    for node in g.node:
        node.input[:] = [names.get(x, x) for x in node.input]
        node.output[:] = [names.get(x, x) for x in node.output]
    for t in g.initializer:
        t.name = names.get(t.name, t.name)
    for vi in g.value_info:
        vi.name = names.get(vi.name, vi.name)
    return out


def _renamed_graph(builder, rename) -> Callable:
    """A problem's graph: the model `builder` writes (problems/level3.py's float graph), renamed."""
    float_graph = _float_graph(builder)

    def graph(g: GraphBuilder):
        float_graph(g)
        return rename(g.build())

    return graph


# ---------------------------------------------------------------- the onnx package's model files
def _onnx_model_file(name: str) -> Path:
    import onnx as onnx_pkg

    return Path(onnx_pkg.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"


def onnx_file_model(name: str, resolution: int, seed: int) -> onnx.ModelProto:
    """The `onnx` package's model file `light_<name>.onnx` with random weights (seeded; He-style by the
    consumer: a Conv or Gemm weight N(0, 2 / fan_in), a bias N(0.05, 0.1^2), BatchNormalization around
    identity), its image input at `resolution` (a fixed-size average pool at the end becomes a global
    one), its logits as the output (the final softmax dropped, see below), everything else as the exporter
    wrote it: opset, names, Dropout, biases listed as inputs."""
    model = onnx.load(str(_onnx_model_file(name)))
    g = model.graph
    rng = np.random.default_rng(seed)
    inits = {t.name: t for t in g.initializer}
    consumers: dict[str, tuple[str, int]] = {}
    for node in g.node:
        for i, x in enumerate(node.input):
            consumers.setdefault(x, (node.op_type, i))

    def weight(name_: str, shape: tuple[int, ...]) -> np.ndarray:
        op, slot = consumers.get(name_, ("", 0))
        if op in ("Conv", "Gemm") and slot == 1:
            fan_in = int(np.prod(shape[1:])) if op == "Conv" else int(shape[-1])
            return rng.standard_normal(shape) * math.sqrt(2.0 / max(fan_in, 1))
        if op == "BatchNormalization":
            return {1: 1 + 0.1 * rng.standard_normal(shape), 2: 0.1 * rng.standard_normal(shape),
                    3: 0.1 * rng.standard_normal(shape), 4: 1 + 0.1 * rng.random(shape)}[slot]  # fmt: skip
        return 0.05 + 0.1 * rng.standard_normal(shape)

    keep = []
    for node in g.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:  # a weight made of one value
            shape = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]))
            w = numpy_helper.from_array(weight(node.output[0], shape).astype("float32"), node.output[0])
            g.initializer.append(w)
            # listed as a graph input too, as this exporter (IR version 3) lists every initializer
            g.input.append(onnx.helper.make_tensor_value_info(w.name, w.data_type, list(shape)))
            continue
        keep.append(node)
    del g.node[:]
    g.node.extend(keep)
    # the final softmax goes: over 1000 classes of random weights its outputs sit near 1/1000 whatever the
    # input, so a constant would pass within the tolerance; the logits vary with the input
    last = g.node[-1]
    if last.op_type == "Softmax" and last.output[0] == g.output[0].name:
        g.output[0].name = last.input[0]
        del g.node[-1]
    used = {x for n in g.node for x in n.input}
    kept_inits = []
    for t in g.initializer:
        if t.name not in used and t.name.endswith("__SHAPE"):
            continue
        if t.data_type == onnx.TensorProto.FLOAT:
            arr = numpy_helper.to_array(t)
            t = numpy_helper.from_array(weight(t.name, arr.shape).astype("float32"), t.name)
        kept_inits.append(t)
    del g.initializer[:]
    g.initializer.extend(kept_inits)
    init_names = {t.name for t in g.initializer}
    data = next(i for i in g.input if i.name not in init_names)
    dims = data.type.tensor_type.shape.dim
    dims[2].dim_value = dims[3].dim_value = resolution
    for node in g.node:  # a pool sized for 224x224 inputs: global
        if node.op_type == "AveragePool" and list(
            next((a.ints for a in node.attribute if a.name == "kernel_shape"), [])
        ) == [7, 7]:
            node.op_type = "GlobalAveragePool"
            del node.attribute[:]
    del g.value_info[:]
    for out in g.output:
        out.type.tensor_type.ClearField("shape")
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _onnx_file_graph(name: str, resolution: int, seed: int):
    def graph(_g: GraphBuilder):
        return onnx_file_model(name, resolution, seed)

    return graph


# ---------------------------------------------------------------- registration
_register(
    "squeezenet",
    "vision",
    "SqueezeNet 1.0 (Iandola et al. 2016) from the onnx package's model file (light_squeezenet.onnx: "
    "opset 9, Caffe2 names, ConstantOfShape weights, biases listed as inputs, Dropout), random weights, "
    "96x96, its 1000 logits",
    _onnx_file_graph("squeezenet", 96, seed=1001),
    tags=("onnx-file", "cnn"),
)
_register(
    "inception_v1",
    "vision",
    "Inception v1 / GoogLeNet (Szegedy et al. 2015) from the onnx package's model file "
    "(light_inception_v1.onnx: opset 9, LRN, Caffe2 names), random weights, 64x64 (its final 7x7 average "
    "pool made global), its 1000 logits",
    _onnx_file_graph("inception_v1", 64, seed=1002),
    tags=("onnx-file", "cnn"),
)
_register(
    "shufflenet_v2_05",
    "vision",
    "ShuffleNetV2 0.5x (Ma et al. 2018): channel split, concat and shuffle (Reshape/Transpose), 96x96, "
    "10 classes",
    _float_graph(shufflenet_v2_05),
    tags=("cnn", "depthwise"),
)
_register(
    "efficientnet_lite0",
    "vision",
    "EfficientNet-Lite0 (ReLU6, no squeeze-excitation), 96x96, 10 classes, TensorFlow's tensor names "
    "(tf2onnx)",
    _renamed_graph(efficientnet_lite0, lambda m: tensorflow_names(m, "efficientnet-lite0/model")),
    tags=("cnn", "depthwise", "tf-names"),
)
_register(
    "mcunet_vww",
    "wakeword",
    "MCUNet-style person detector: inverted residuals with 3/5/7 kernels and expansions 3-6, 64x64, "
    "2 classes",
    _float_graph(mcunet_vww),
    tags=("cnn", "depthwise"),
)
_register(
    "mcunet_vww_int8",
    "wakeword",
    "the MCUNet-style person detector as int8 QDQ (power-of-two scales, as problems/level3.py's int8 models)",
    _int8_graph(mcunet_vww),
    tags=("cnn", "depthwise", "int8", "qdq"),
    atol=QDQ_ATOL,  # power-of-two scales: TVM and ONNX Runtime agree bit for bit (problems/level3.py)
    rtol=QDQ_ATOL,
)
_register(
    "tcresnet8_kws",
    "kws",
    "TC-ResNet8 (Choi et al. 2019): 40 MFCC x 101 frames, 1-D temporal convolutions, 12 keywords",
    _float_graph(tcresnet8_kws),
    tags=("cnn", "1d"),
)
_register(
    "mobilevit_xxs",
    "vision",
    "MobileViT-XXS-style: MobileNetV2 blocks and a MobileViT block (2x2 patches, 2 transformer layers of "
    "dim 64), 64x64, 10 classes",
    _float_graph(mobilevit_xxs),
    tags=("transformer", "cnn"),
)
_register(
    "unet_small",
    "vision",
    "small U-Net segmenter: 64x64 grayscale, 8/16/32 channels, nearest upsampling, skip concatenations, "
    "sigmoid mask",
    _float_graph(unet_small),
    tags=("cnn", "segmentation"),
)
_register(
    "resnet18_bn",
    "vision",
    "ResNet-18 at 32x32, 10 classes, as PyTorch exports it unfolded: BatchNormalization left in, no conv "
    "biases, PyTorch's tensor names",
    _renamed_graph(resnet18_bn, pytorch_names),
    tags=("cnn", "pytorch-names", "batchnorm"),
)
_register(
    "mlp_autoencoder_bn",
    "anomaly",
    "MLP autoencoder 640-128-128-8-128-128-640 as PyTorch exports it: BatchNorm1d unfolded, Identity nodes, "
    "PyTorch's tensor names",
    _renamed_graph(mlp_autoencoder_bn, pytorch_names),
    tags=("mlp", "pytorch-names", "batchnorm"),
)
