"""onnxruntime: the vendor runtime baseline, full graph optimizations, the backend's thread count."""

from __future__ import annotations

from ..harness.timing import python_timer
from ..oracle import ort_session


def ort_timer(problem, inputs: dict, threads: int):
    sess = ort_session(problem.model, threads=threads, optimize=True)
    names = [o.name for o in sess.get_outputs()]
    sess.run(names, inputs)
    return python_timer(lambda: sess.run(names, inputs))
