"""The correctness oracle: ONNX Runtime on the problem's ONNX graph, independent of TVM."""

from __future__ import annotations

import numpy as np

from .problems import Problem


def ort_session(model, threads: int = 1, optimize: bool = True):
    import onnxruntime as ort

    from .backends.farm_server import ort_session_options  # one set of options, here and on a board

    so = ort_session_options(ort, threads, optimize)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


class Oracle:
    """Runs the ONNX graph in ONNX Runtime. Graph optimizations are off, so the oracle computes
    what the graph says rather than a fused rewrite of it."""

    def __init__(self, problem: Problem, model=None):
        self.problem = problem
        self.session = ort_session(model if model is not None else problem.model, threads=1, optimize=False)
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(o) for o in self.session.run(self.output_names, inputs)]
