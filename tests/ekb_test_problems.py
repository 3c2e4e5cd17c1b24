"""Tiny problems for the harness tests (imported through EKB_PROBLEM_MODULES, in workers too)."""

import numpy as np

from edgekernelbench.problems import Problem, register


def _fixture(pid: str, domain: str, category: str, source: str, graph, **kw) -> None:
    """Registers a level-1 test problem (tagged "test")."""
    register(
        Problem(
            id=pid,
            level=1,
            domain=domain,
            category=category,
            source=source,
            graph=graph,
            tags=("test",),
            **kw,
        )
    )


def _scale_add(g):
    x = g.input("x", (4, 8))
    y = g.node("Mul", [x, g.weight((8,), scale=1.0)])
    g.output(g.node("Add", [y, g.bias(8, scale=0.5)]))


_fixture(
    "L1/tiny_scale_add",
    "sensors",
    "elementwise",
    "test fixture: y = x * w + b on 4x8",
    _scale_add,
)


# MatMulInteger whose 16-bit pair sums saturate: u8 activations near 255 times s8 weights near +-127, each
# column of one sign, so a * b + c * d reaches 2 * 255 * 127 = 64770 > 32767. ONNX Runtime's u8 x s8
# kernel without VNNI (pmaddubsw) clamps those sums; the exact result is NumPy's int64 matmul.
SATURATING_K, SATURATING_N = 32, 8


def saturating_weights() -> np.ndarray:
    rng = np.random.default_rng(7)
    signs = np.where(np.arange(SATURATING_N) % 2 == 0, 1, -1)
    return (rng.integers(120, 128, (SATURATING_K, SATURATING_N)) * signs).astype(np.int8)


def _matmulint_saturating(g):
    a = g.input("a", (4, SATURATING_K), "uint8", dist="int", low=240, high=255)
    w = g.tensor(saturating_weights(), "q")
    g.output(g.node("MatMulInteger", [a, w, g.const(0, "uint8"), g.const(0, "int8")]))


_fixture(
    "L1/tiny_matmulint_saturating",
    "sensors",
    "int8",
    "test fixture: uint8 (4x32, near 255) @ int8 (32x8, near +-127) -> int32, MatMulInteger",
    _matmulint_saturating,
    atol=0.0,
    rtol=0.0,
)


# MatMulInteger in the two forms the Int8DotProduct graph pass (ir/int8_dot.py) shifts: int8 activations
# (a batch of 2 x 8 rows) times uint8 weights, both zero points off zero; and u8 x s8 near the extremes with
# 16 output columns (one VNNI vector), whose 16-bit pair sums would saturate.
def _matmulint_i8_u8w(g):
    a = g.input("a", (2, 8, 24), "int8", dist="int")
    w = g.tensor(np.random.default_rng(11).integers(0, 256, (24, 32)).astype(np.uint8), "q")
    g.output(g.node("MatMulInteger", [a, w, g.const(-5, "int8"), g.const(131, "uint8")]))


_fixture(
    "L1/tiny_matmulint_i8_u8w",
    "sensors",
    "int8",
    "test fixture: int8 (2x8x24, zero point -5) @ uint8 (24x32, zero point 131) -> int32, MatMulInteger",
    _matmulint_i8_u8w,
    atol=0.0,
    rtol=0.0,
)


def _matmulint_saturating_16(g):
    a = g.input("a", (6, SATURATING_K), "uint8", dist="int", low=240, high=255)
    w = g.tensor(np.concatenate([saturating_weights(), -saturating_weights()], axis=1), "q")
    g.output(g.node("MatMulInteger", [a, w, g.const(3, "uint8"), g.const(0, "int8")]))


_fixture(
    "L1/tiny_matmulint_saturating_16",
    "sensors",
    "int8",
    "test fixture: uint8 (6x32, near 255, zero point 3) @ int8 (32x16, near +-127) -> int32, MatMulInteger",
    _matmulint_saturating_16,
    atol=0.0,
    rtol=0.0,
)


def _matmul_128(g):
    x = g.input("x", (128, 128))
    g.output(g.node("MatMul", [x, g.weight((128, 128))]))


_fixture(
    "L1/tiny_matmul_128",
    "nlp",
    "matmul",
    "test fixture: x (128x128) @ w (128x128), large enough that skipped work shows in its time",
    _matmul_128,
)


def _conv3x3_relu6(g):
    x = g.input("x", (1, 8, 10, 10))
    y = g.node("Conv", [x, g.weight((16, 8, 3, 3)), g.bias(16)], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    g.output(g.node("Clip", [y, g.const(0.0), g.const(6.0)]))  # ReLU6: its bounds are 0-d weights


_fixture(
    "L1/tiny_conv3x3",
    "vision",
    "conv2d",
    "test fixture: conv 3x3 'same' 8->16ch on 10x10, + ReLU6 (a graph layer: NCHW or NHWC)",
    _conv3x3_relu6,
)


def _conv_concat_dropout(g):
    x = g.input("x", (1, 3, 8, 8))
    y = g.node("Relu", [g.node("Conv", [x, g.weight((8, 3, 3, 3)), g.bias(8)], pads=[1, 1, 1, 1])])
    a = g.node("Conv", [y, g.weight((4, 8, 1, 1)), g.bias(4)])
    b = g.node("Conv", [y, g.weight((4, 8, 3, 3)), g.bias(4)], pads=[1, 1, 1, 1])
    d = g.node("Dropout", [g.node("Concat", [a, b], axis=1)])  # left in, as old exporters leave it
    g.output(g.node("Conv", [d, g.weight((6, 8, 1, 1)), g.bias(6)]))


_fixture(
    "L1/tiny_conv_concat_dropout",
    "vision",
    "conv2d",
    "test fixture: a fire module (SqueezeNet's 1x1 and 3x3 branches concatenated) with Dropout left in",
    _conv_concat_dropout,
)


def _matmul_odd(g):
    x = g.input("x", (16, 24))
    g.output(g.node("MatMul", [x, g.weight((24, 17))]))


_fixture(
    "L1/tiny_matmul_odd",
    "audio",
    "matmul",
    "test fixture: x (16x24) @ w (24x17): 17 outputs per row, a prime (as 257 DFT bins): no "
    "divisor fills a vector",
    _matmul_odd,
)


def _matmul_twice(g):
    x = g.input("x", (4, 8))
    y = g.node("MatMul", [x, g.weight((8, 8))])
    g.output(g.node("MatMul", [y, g.weight((8, 8))]))


_fixture(
    "L1/tiny_matmul_twice",
    "nlp",
    "matmul",
    "test fixture: (x (4x8) @ w1 (8x8)) @ w2 (8x8): one kernel, called twice",
    _matmul_twice,
)


def _log_of_square(g):
    x = g.input("x", (4, 32))
    y = g.node("Add", [g.node("Mul", [x, x]), g.constant_node(np.float32(0.5))])
    g.output(g.node("Log", [y]))


_fixture(
    "L1/tiny_log",
    "audio",
    "elementwise",
    "test fixture: log(x * x + 0.5) on 4x32 (a log-mel front end's last step)",
    _log_of_square,
)


def _qdq_pair(g):
    """A ReLU's output quantized to uint8 (zero point 3) plus the input quantized to int8 (zero point -5),
    each dequantized again (QuantizeRint's two forms: with and without the lower clamp)."""
    x = g.input("x", (4, 32))
    r = g.node("Relu", [x])
    a = g.node(
        "DequantizeLinear",
        [
            g.node("QuantizeLinear", [r, g.const(1 / 16), g.const(3, "uint8")]),
            g.const(1 / 16),
            g.const(3, "uint8"),
        ],
    )
    b = g.node(
        "DequantizeLinear",
        [
            g.node("QuantizeLinear", [x, g.const(0.05), g.const(-5, "int8")]),
            g.const(0.05),
            g.const(-5, "int8"),
        ],
    )
    g.output(g.node("Add", [a, b]))


_fixture(
    "L1/tiny_qdq",
    "sensors",
    "quantized",
    "test fixture: dq(q(relu(x), 1/16, u8 zp 3)) + dq(q(x, 0.05, s8 zp -5)) on 4x32",
    _qdq_pair,
)


def _qdq_dwconv(g):
    """A QDQ depthwise convolution with power-of-two scales (as the L3 int8 models have): int8 input (1/32),
    int8 weights (1/64), int32 bias, ReLU, uint8 output (1/16, zero point 0), dequantized again: QuantizeRint
    folds the output scale into the weights, BiasInit starts the sums at the bias (the same bytes)."""
    x = g.input("x", (1, 16, 6, 5))
    xs, xz = g.const(1 / 32), g.const(0, "int8")
    xq = g.node("DequantizeLinear", [g.node("QuantizeLinear", [x, xs, xz]), xs, xz])
    ws = g.const(1 / 64)
    w = g.node("DequantizeLinear", [g.int_tensor((16, 1, 3, 3), -127, 127, "int8"), ws, g.const(0, "int8")])
    b = g.node("DequantizeLinear", [g.int_tensor((16,), -2000, 2000, "int32"), g.const(1 / 2048, "float32")])
    y = g.node("Conv", [xq, w, b], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=16)
    ys, yz = g.const(1 / 16), g.const(0, "uint8")
    g.output(g.node("DequantizeLinear", [g.node("QuantizeLinear", [g.node("Relu", [y]), ys, yz]), ys, yz]))


_fixture(
    "L1/tiny_qdq_dwconv",
    "kws",
    "quantized",
    "test fixture: QDQ depthwise 3x3 16ch on 6x5, power-of-two scales, ReLU, uint8 output (zero point 0)",
    _qdq_dwconv,
    atol=1e-5,
    rtol=1e-5,
)


def _softmax(g):
    x = g.input("x", (4, 16), scale=2.0)  # logits, as L1/softmax_mobilebert_attn draws them
    g.output(g.node("Softmax", [x], axis=-1))


_fixture(
    "L1/tiny_softmax", "nlp", "softmax", "test fixture: softmax over the last axis of 4x16 logits", _softmax
)
