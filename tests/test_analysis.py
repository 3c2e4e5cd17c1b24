"""graph_cost (FLOPs, compulsory bytes) against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

from edgekernelbench.problems.analysis import graph_cost
from edgekernelbench.problems.graph import GraphBuilder

F32, I8, U8, I32 = 4, 1, 1, 4  # itemsizes


def _model(build):
    g = GraphBuilder("cost", seed=0)
    build(g)
    return g.build()


def test_conv2d_with_bias():
    # x 1x3x8x8, W 4x3x3x3, pad 1 -> y 1x4x8x8 (256 outputs), 27 MACs each, + bias
    def build(g):
        x = g.input("x", (1, 3, 8, 8))
        g.output(g.node("Conv", [x, g.weight((4, 3, 3, 3)), g.bias(4)], kernel_shape=[3, 3], pads=[1] * 4))

    cost = graph_cost(_model(build))
    assert cost.flops == 2 * 256 * 27 + 256 == 14080
    assert cost.bytes == (3 * 64 + 4 * 27 + 4 + 4 * 64) * F32 == 2240
    assert cost.intensity == pytest.approx(14080 / 2240)


def test_depthwise_conv_strided_no_bias():
    # x 1x8x10x10, W 8x1x3x3, group 8, stride 2, pad 1 -> y 1x8x5x5 (200 outputs), 9 MACs each
    def build(g):
        x = g.input("x", (1, 8, 10, 10))
        y = g.node(
            "Conv", [x, g.weight((8, 1, 3, 3))], group=8, kernel_shape=[3, 3], pads=[1] * 4, strides=[2, 2]
        )
        g.output(y)

    cost = graph_cost(_model(build))
    assert cost.flops == 2 * 200 * 9 == 3600
    assert cost.bytes == (800 + 72 + 200) * F32 == 4288


def test_conv_with_empty_optional_bias_counts_no_bias_add():
    def build(g):
        x = g.input("x", (1, 2, 4, 4))
        g.output(g.node("Conv", [x, g.weight((3, 2, 1, 1)), ""], kernel_shape=[1, 1]))

    assert graph_cost(_model(build)).flops == 2 * (3 * 16) * 2 == 192


def test_gemm_transb_with_bias():
    # x 2x16 @ W(8x16)^T + b -> 2x8: 16 outputs x 16 MACs, + 16 bias adds
    def build(g):
        x = g.input("x", (2, 16))
        g.output(g.node("Gemm", [x, g.weight((8, 16)), g.bias(8)], transB=1))

    cost = graph_cost(_model(build))
    assert cost.flops == 2 * 16 * 16 + 16 == 528
    assert cost.bytes == (32 + 128 + 8 + 16) * F32 == 736


def test_gemm_transa():
    # A is 16x2, transA -> 2x16; B 16x8 -> 2x8, K = 16
    def build(g):
        a = g.input("a", (16, 2))
        g.output(g.node("Gemm", [a, g.weight((16, 8))], transA=1))

    assert graph_cost(_model(build)).flops == 2 * 16 * 16 == 512


def test_matmul_integer():
    # uint8 4x32 @ int8 32x8 with scalar zero points -> int32 4x8: 32 outputs x 32 MACs
    def build(g):
        a = g.input("a", (4, 32), "uint8", dist="int", low=0, high=255)
        w = g.int_tensor((32, 8), -127, 127, "int8")
        g.output(g.node("MatMulInteger", [a, w, g.const(128, "uint8"), g.const(0, "int8")]))

    cost = graph_cost(_model(build))
    assert cost.flops == 2 * 32 * 32 == 2048
    assert cost.bytes == 4 * 32 * U8 + 32 * 8 * I8 + 1 + 1 + 4 * 8 * I32 == 514


def test_batched_matmul():
    def build(g):
        q = g.input("q", (1, 4, 16, 8))
        k = g.input("k", (1, 4, 8, 16))
        g.output(g.node("MatMul", [q, k]))

    cost = graph_cost(_model(build))
    assert cost.flops == 2 * (4 * 16 * 16) * 8 == 16384
    assert cost.bytes == (512 + 512 + 1024) * F32


def test_elementwise_broadcast_chain():
    # (1,4,6,6) * (1,4,1,1) -> 144 outputs, then Relu: 144 more; one flop per output element each
    def build(g):
        a = g.input("a", (1, 4, 6, 6))
        b = g.input("b", (1, 4, 1, 1))
        g.output(g.node("Relu", [g.node("Mul", [a, b])]))

    cost = graph_cost(_model(build))
    assert cost.flops == 144 + 144
    assert cost.bytes == (144 + 4 + 144) * F32 == 1168  # the intermediate is not compulsory traffic


def test_constant_nodes_and_reshape_are_free():
    def build(g):
        x = g.input("x", (2, 6))
        shape = g.node("Constant", [], value=numpy_helper.from_array(np.array([3, 4], np.int64)))
        g.output(g.node("Reshape", [x, shape]))

    cost = graph_cost(_model(build))
    assert cost.flops == 0
    assert cost.bytes == (12 + 12) * F32


def test_level1_problem_costs():
    from edgekernelbench.problems import get_problem

    # DS-CNN stem: 64x25x5 outputs x (1x10x4) MACs, + bias, + ReLU
    assert get_problem("L1/conv2d_kws_stem").flops == 2 * 8000 * 40 + 8000 + 8000
    # MobileBERT FFN: 128x512 outputs x 128 MACs
    assert get_problem("L1/matmul_mobilebert_ffn_in").flops == 2 * 128 * 512 * 128
    # int8 DS-CNN pointwise: 125x64 outputs x 64 MACs
    assert get_problem("L1/matmulint_kws_pw").flops == 2 * 125 * 64 * 64
