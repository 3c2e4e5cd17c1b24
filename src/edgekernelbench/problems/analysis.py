"""Cost of a reference graph: FLOPs (multiply-add = 2) and compulsory bytes moved, for the roofline."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference


@dataclass(frozen=True)
class Cost:
    flops: int
    bytes: int  # graph inputs + weights read once + graph outputs written once
    bytes_written: int = 0  # of which the graph outputs (the rest is read)

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else 0.0


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[tuple[int, ...], int]]:
    """name -> (shape, itemsize) for every tensor in the graph."""
    m = shape_inference.infer_shapes(model)
    out = {}
    for vi in list(m.graph.input) + list(m.graph.value_info) + list(m.graph.output):
        t = vi.type.tensor_type
        shape = tuple(int(d.dim_value) for d in t.shape.dim)
        out[vi.name] = (shape, np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)).itemsize)
    for init in m.graph.initializer:
        arr = numpy_helper.to_array(init)
        out[init.name] = (arr.shape, arr.dtype.itemsize)
    return out


def _numel(shape) -> int:
    return int(np.prod(shape)) if len(shape) else 1


def node_flops(node: onnx.NodeProto, shapes) -> int:
    """FLOPs of one node. Multiply-accumulate counts 2; elementwise ops count 1 per output element."""

    def shape(i):
        return shapes[node.input[i]][0] if has(i) else ()

    def has(i):  # optional inputs may be missing or given as ""
        return i < len(node.input) and bool(node.input[i])

    out = shapes[node.output[0]][0] if node.output[0] in shapes else ()
    op = node.op_type
    if op in ("Conv", "ConvInteger"):
        w = shape(1)  # (O, I/groups, kh, kw...)
        macs = _numel(out) * _numel(w[1:])
        return 2 * macs + (_numel(out) if op == "Conv" and has(2) else 0)
    if op in ("MatMul", "MatMulInteger", "Gemm"):
        a = shape(0)
        k = a[-1] if not (op == "Gemm" and _attr(node, "transA")) else a[0]
        return 2 * _numel(out) * k + (_numel(out) if op == "Gemm" and has(2) else 0)
    if op in ("AveragePool", "MaxPool"):
        return _numel(out) * _numel(_attr(node, "kernel_shape") or [1])
    if op in ("GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceSum", "ReduceMax"):
        return _numel(shape(0))
    if op == "Softmax":
        return 5 * _numel(out)  # max, sub, exp, sum, div
    if op == "LayerNormalization":
        return 8 * _numel(out)
    if op in (
        "Reshape",
        "Flatten",
        "Transpose",
        "Identity",
        "Squeeze",
        "Unsqueeze",
        "Concat",
        "Shape",
        "Gather",
        "Slice",
        "Split",
        "Pad",
        "Constant",
        "ConstantOfShape",
        "Expand",
        "Tile",
    ):
        return 0
    if op == "Resize":
        return 7 * _numel(out)  # bilinear: 4 loads, 3 lerps
    return _numel(out)  # elementwise (activations, add, mul, quantize, ...)


def _attr(node, name):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return None


def graph_cost(model: onnx.ModelProto) -> Cost:
    shapes = _shapes(model)
    flops = sum(node_flops(n, shapes) for n in model.graph.node)
    init_names = {i.name for i in model.graph.initializer}

    def size(name: str) -> int:
        shape, itemsize = shapes[name]
        return _numel(shape) * itemsize

    read = sum(size(i.name) for i in model.graph.input if i.name not in init_names)
    read += sum(size(n) for n in init_names)
    written = sum(size(o.name) for o in model.graph.output)
    return Cost(int(flops), int(read + written), int(written))
