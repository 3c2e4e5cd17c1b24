"""The correctness oracle: ONNX Runtime on the problem's ONNX graph, independent of TVM."""

from __future__ import annotations

import numpy as np

from .problems import Problem


def ort_session(model, threads: int = 1, optimize: bool = True):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    # no busy-waiting pool threads between runs: they would slow the TVM code timed in turn with ORT
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
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
