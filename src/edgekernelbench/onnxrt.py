"""ONNX Runtime sessions with the benchmark's options, for everything on this host that runs ONNX Runtime:
the oracle (graph optimizations off; oracle.py), the ONNX Runtime baseline (all of them;
baselines/onnxruntime.py) and the calibration of the quantized level-3 models (problems/level3.py).

The options themselves are `backends.farm_server.ort_session_options`: one set of options, here and on a
board. farm_server.py runs there as a copied single file and so imports nothing of edgekernelbench (an
import contract says so); this module is the one place below the backends that imports it."""

from __future__ import annotations


def ort_session(model, threads: int = 1, optimize: bool = True):
    import onnxruntime as ort

    from .backends.farm_server import ort_session_options  # one set of options, here and on a board

    so = ort_session_options(ort, threads, optimize)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
