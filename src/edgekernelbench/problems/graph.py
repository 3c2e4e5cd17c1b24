"""A small builder for ONNX reference graphs: named inputs, seeded random weights, nodes, outputs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
_ONNX_DTYPES = {
    "float32": TensorProto.FLOAT,
    "int8": TensorProto.INT8,
    "uint8": TensorProto.UINT8,
    "int32": TensorProto.INT32,
    "int64": TensorProto.INT64,
}


@dataclass(frozen=True)
class InputSpec:
    """How to draw one graph input: a distribution over a shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    dist: str = "normal"  # normal | uniform | int
    low: float = -1.0
    high: float = 1.0
    scale: float = 1.0

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        if self.dist == "normal":
            return (rng.standard_normal(self.shape) * self.scale).astype(self.dtype)
        if self.dist == "uniform":
            return rng.uniform(self.low, self.high, self.shape).astype(self.dtype)
        if self.dist == "int":
            return rng.integers(int(self.low), int(self.high) + 1, self.shape).astype(self.dtype)
        raise ValueError(f"unknown input distribution {self.dist!r}")


class GraphBuilder:
    """Builds one ONNX graph. Weights come from `seed`, so a problem is reproducible without downloads.

    >>> g = GraphBuilder("relu6", seed=0)
    >>> x = g.input("x", (1, 8))
    >>> g.output(g.node("Clip", [x, g.const(0.0), g.const(6.0)]))
    """

    def __init__(self, name: str, seed: int = 0):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.specs: list[InputSpec] = []
        self._count = 0

    def _fresh(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def input(self, name: str, shape, dtype: str = "float32", dist: str = "normal", **kw) -> str:
        shape = tuple(int(s) for s in shape)
        self.inputs.append(helper.make_tensor_value_info(name, _ONNX_DTYPES[dtype], list(shape)))
        self.specs.append(InputSpec(name, shape, dtype, dist, **kw))
        return name

    def tensor(self, array: np.ndarray, prefix: str = "w") -> str:
        name = self._fresh(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, shape, fan_in: int | None = None, scale: float | None = None, prefix: str = "w") -> str:
        """Random float32 weights; default scale 1/sqrt(fan_in) keeps activations near unit variance."""
        shape = tuple(int(s) for s in shape)
        if scale is None:
            fan_in = fan_in or int(np.prod(shape[1:])) or 1
            scale = 1.0 / math.sqrt(fan_in)
        return self.tensor((self.rng.standard_normal(shape) * scale).astype("float32"), prefix)

    def bias(self, n: int, scale: float = 0.1) -> str:
        return self.tensor((self.rng.standard_normal((n,)) * scale).astype("float32"), "b")

    def const(self, value, dtype: str = "float32") -> str:
        return self.tensor(np.asarray(value, dtype=dtype), "c")

    def constant_node(self, array) -> str:
        """A structural constant (shape, indices, eps) as a Constant node, not a weight initializer:
        weights are what the self-check perturbs and what a kernel receives as a parameter."""
        return self.node("Constant", [], value=numpy_helper.from_array(np.asarray(array)))

    def int_tensor(self, shape, low: int, high: int, dtype: str, prefix: str = "q") -> str:
        return self.tensor(self.rng.integers(low, high + 1, shape).astype(dtype), prefix)

    def node(self, op: str, inputs: list[str], n_out: int = 1, **attrs):
        outs = [self._fresh(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, **attrs))
        return outs[0] if n_out == 1 else outs

    def output(self, name: str, rename: str | None = None) -> str:
        if rename:
            self.nodes.append(helper.make_node("Identity", [name], [rename]))
            name = rename
        self.outputs.append(helper.make_empty_tensor_value_info(name))
        return name

    def build(self) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 8
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        # make outputs fully typed for the frontends
        inferred = {vi.name: vi for vi in model.graph.value_info}
        typed = [inferred.get(o.name, o) for o in model.graph.output]
        del model.graph.output[:]
        model.graph.output.extend(typed)
        return model
