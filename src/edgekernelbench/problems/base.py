"""The Problem record: one benchmark workload, its reference computation as an ONNX graph built in code."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from .graph import GraphBuilder, InputSpec
from .names import Renaming, as_reference_takes

GRAPH_FILE, INPUTS_FILE = "problem.onnx", "problem_inputs.json"  # a problem's graph handed to a worker
LEVEL_NAMES = {1: "single operators", 2: "fused subgraphs", 3: "compact models"}


def specs_from_model(model: onnx.ModelProto) -> tuple[InputSpec, ...]:
    """Input distributions for a model given as a file: N(0, 1) floats, integers over their dtype's range."""
    inits = {i.name for i in model.graph.initializer}
    specs = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)).name
        shape = tuple(int(d.dim_value) for d in t.shape.dim)
        if np.issubdtype(np.dtype(dtype), np.integer):
            info = np.iinfo(np.dtype(dtype))
            lo, hi = max(int(info.min), -128), min(int(info.max), 127)
            specs.append(InputSpec(vi.name, shape, dtype, "int", low=lo, high=hi))
        else:
            specs.append(InputSpec(vi.name, shape, dtype))
    return tuple(specs)


@dataclass(frozen=True)
class Problem:
    """A workload: reference ONNX graph (random weights from a fixed seed), inputs, tolerance, cost."""

    id: str  # e.g. "L1/dwconv3x3_kws"
    level: int
    domain: str  # vision | wakeword | kws | anomaly | nlp | sensors | audio
    category: str  # conv2d | depthwise | pointwise | dense | ... (operator class or block kind)
    source: str  # which edge model and layer the shape comes from
    graph: Callable = field(repr=False, compare=False)  # graph(g: GraphBuilder) adds nodes to g
    seed: int = 0
    atol: float = 1e-4
    rtol: float = 1e-4
    tags: tuple[str, ...] = ()
    description: str = ""
    # which suite it belongs to: "suite" (the built-in one, where the search is developed), "zoo" (held out:
    # problems/zoo.py, measured at the end, never in a level's default selection) or "user" (ekb add-model)
    suite: str = "suite"

    @property
    def name(self) -> str:
        return self.id.split("/", 1)[1]

    @functools.cached_property
    def _built(self) -> tuple[onnx.ModelProto, tuple[InputSpec, ...], Renaming]:
        g = GraphBuilder(self.name, seed=self.seed)
        made = self.graph(g)  # adds nodes to g, or returns a finished model (e.g. a user's ONNX file)
        model = made if isinstance(made, onnx.ModelProto) else g.build()
        model, renaming = as_reference_takes(model)  # an exporter's habits undone (problems/names.py)
        onnx.checker.check_model(model, full_check=True)
        return model, tuple(g.specs) if g.specs else specs_from_model(model), renaming

    @property
    def model(self) -> onnx.ModelProto:
        """The problem's ONNX graph, every name an identifier (problems/names.py)."""
        return self._built[0]

    @property
    def renaming(self) -> Renaming:
        """The model's own names of the values and nodes `model` renamed (problems/names.py)."""
        return self._built[2]

    def export_graph(self, directory: Path) -> None:
        """Writes the built graph and its input distributions into `directory`, for `adopt_graph`."""
        model, inputs, renaming = self._built
        Path(directory, GRAPH_FILE).write_bytes(model.SerializeToString())
        Path(directory, INPUTS_FILE).write_text(
            json.dumps(
                {"inputs": [dataclasses.asdict(s) for s in inputs], "original_names": renaming.original}
            )
        )

    def adopt_graph(self, directory: Path) -> bool:
        """Takes the graph `export_graph` wrote instead of building it (a worker takes its parent's:
        building an L3 model runs ONNX Runtime for its calibration, whose threads would leave the worker
        unable to fork its candidate's runner safely). False when there is none, or it is built already."""
        model_path = Path(directory, GRAPH_FILE)
        if "_built" in self.__dict__ or not model_path.is_file():
            return False
        data = json.loads(Path(directory, INPUTS_FILE).read_text())
        inputs = tuple(InputSpec(**{**d, "shape": tuple(d["shape"])}) for d in data["inputs"])
        model = onnx.load_model_from_string(model_path.read_bytes())
        self.__dict__["_built"] = (model, inputs, Renaming(dict(data.get("original_names") or {})))
        return True

    @property
    def inputs(self) -> tuple[InputSpec, ...]:
        return self._built[1]

    def sample_inputs(self, seed: int) -> dict[str, np.ndarray]:
        # a stream of its own: weights come from default_rng(self.seed), inputs must not repeat them
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0x1E7B]))
        return {spec.name: spec.sample(rng) for spec in self.inputs}

    @functools.cached_property
    def cost(self):  # -> analysis.Cost
        from .analysis import graph_cost

        return graph_cost(self.model)

    @property
    def flops(self) -> int:
        return self.cost.flops

    @property
    def bytes_moved(self) -> int:
        return self.cost.bytes

    @functools.cached_property
    def integer(self) -> bool:
        """The graph holds 8-bit integer tensors (integer-arithmetic or QDQ problems): a kernel may compute
        on 8-bit integers, whose throughput exceeds the float FLOP/s peak (metrics.time_bound)."""
        eight_bit = {onnx.TensorProto.INT8, onnx.TensorProto.UINT8}
        g = self.model.graph
        return any(t.data_type in eight_bit for t in g.initializer) or any(
            v.type.tensor_type.elem_type in eight_bit for v in [*g.input, *g.output, *g.value_info]
        )

    def summary(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "graph"}
        d["inputs"] = [dataclasses.asdict(s) for s in self.inputs]
        d["flops"], d["bytes"] = self.flops, self.bytes_moved
        return d
