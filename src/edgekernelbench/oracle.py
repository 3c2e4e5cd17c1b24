"""The correctness oracles, independent of TVM.

Two of them compute what the problem's ONNX graph says:

* ``onnxruntime``: ONNX Runtime with graph optimizations off. Fast; the oracle of float problems.
* ``onnx-reference``: ``onnx.reference.ReferenceEvaluator``, ONNX's own NumPy implementation of the
  operators. Integer operators there accumulate in NumPy int32 (`MatMulInteger`, `ConvInteger`,
  `QLinearMatMul`, `QLinearConv`), so their results are exact on every CPU; the oracle of integer
  problems.

Why two: ONNX Runtime's 8-bit integer GEMM (MLAS, used by the four operators of
`INTEGER_ARITHMETIC_OPS`) is not exact on every x86 CPU. Without AVX-512 VNNI / AVX-VNNI, its u8 x s8
kernel multiplies with ``pmaddubsw``, which adds pairs of products in 16 bit with saturation, so
``255 * 127 + 255 * 127`` becomes 32767: its output then depends on the CPU it ran on. The rule
(`oracle_kind`): a graph with any of those operators is judged by the exact oracle; every other
graph by ONNX Runtime, which is 10 to 100 times faster there and agrees with onnx.reference within
every problem's tolerance (measured on the whole suite; checks/selfcheck.py checks it for each
problem). Float graphs with QuantizeLinear / DequantizeLinear around float operators (QDQ) stay with
ONNX Runtime: with graph optimizations off it computes them in float, as the graph says.

`ort_output_check` compares the *optimized* ONNX Runtime session of the ORT baseline (which may fuse
QDQ into integer kernels) with the oracle, so a report can say where ORT's timing is that of an
inexact result.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx

from .onnxrt import ort_session
from .problems import Problem

log = logging.getLogger(__name__)

ORACLE_ORT = "onnxruntime"
ORACLE_EXACT = "onnx-reference"

# ONNX operators (default domain) that multiply-accumulate 8-bit integers into int32: ONNX Runtime's
# CPU kernels for them use MLAS's quantized GEMM, whose u8 x s8 path saturates without VNNI.
INTEGER_ARITHMETIC_OPS = frozenset({"MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv"})


class OracleError(Exception):
    """The oracle cannot load or run the problem's model."""


def _nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for att in node.attribute:  # If / Loop / Scan bodies
            if att.type == onnx.AttributeProto.GRAPH:
                yield from _nodes(att.g)
            for g in att.graphs:
                yield from _nodes(g)


def integer_arithmetic_ops(model: onnx.ModelProto) -> set[str]:
    """The operators of `INTEGER_ARITHMETIC_OPS` in the model (its graph, subgraphs and functions)."""
    found = {n.op_type for n in _nodes(model.graph) if n.domain in ("", "ai.onnx")}
    for f in model.functions:
        found |= {n.op_type for n in f.node if n.domain in ("", "ai.onnx")}
    return found & INTEGER_ARITHMETIC_OPS


def oracle_kind(model: onnx.ModelProto) -> str:
    """ORACLE_EXACT for a graph with integer arithmetic (see the module docstring), else ORACLE_ORT."""
    return ORACLE_EXACT if integer_arithmetic_ops(model) else ORACLE_ORT


def _opset(model: onnx.ModelProto) -> int:
    for op in model.opset_import:
        if op.domain in ("", "ai.onnx"):
            return int(op.version)
    return 0


def _reference_new_ops(model: onnx.ModelProto) -> list:
    """onnx.reference (1.23) implements DequantizeLinear from opset 19 on only. Opsets 13 to 18 define
    it for 8-bit and int32 inputs with the same arithmetic ((x - zero_point) * scale), so for those the
    newest implementation serves (its extra attributes keep their defaults)."""
    if _opset(model) >= 19:
        return []
    from onnx.reference.ops import load_op

    newest = load_op("", "DequantizeLinear", None)
    return [type("DequantizeLinear", (newest,), {"op_domain": ""})]


def reference_evaluator(model: onnx.ModelProto):
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model, new_ops=_reference_new_ops(model))


class Oracle:
    """Runs the problem's ONNX graph in the oracle that `oracle_kind` picks for it (or `kind`).
    `name` says which: ORACLE_ORT (graph optimizations off, so it computes what the graph says rather
    than a fused rewrite of it) or ORACLE_EXACT."""

    def __init__(self, problem: Problem, model=None, kind: str | None = None):
        self.problem = problem
        model = model if model is not None else problem.model
        self.name = kind or oracle_kind(model)
        if self.name not in (ORACLE_ORT, ORACLE_EXACT):
            raise ValueError(f"unknown oracle {self.name!r} (use {ORACLE_ORT!r} or {ORACLE_EXACT!r})")
        self.output_names = [o.name for o in model.graph.output]
        try:
            if self.name == ORACLE_EXACT:
                self._ref = reference_evaluator(model)
            else:
                self.session = ort_session(model, threads=1, optimize=False)
                self.output_names = [o.name for o in self.session.get_outputs()]
        except Exception as e:
            raise OracleError(f"{self.name} cannot load {problem.id}: {type(e).__name__}: {e}") from e

    def run(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        if self.name == ORACLE_EXACT:
            outs = self._ref.run(self.output_names, inputs)
        else:
            outs = self.session.run(self.output_names, inputs)
        return [np.asarray(o) for o in outs]


def compare_outputs(got, want, atol: float, rtol: float) -> dict:
    """{"matches_oracle": bool, "max_abs_err": float, "mismatched": int, "elements": int}: `got`
    against `want` (the oracle), element-wise `|got - want| <= atol + rtol * |want|` (exact for
    atol = rtol = 0); different shapes or dtypes do not match."""
    ok, worst, bad, total = len(got) == len(want), 0.0, 0, 0
    for g, w in zip(got, want, strict=False):
        g, w = np.asarray(g), np.asarray(w)
        total += w.size
        if g.shape != w.shape or g.dtype != w.dtype:
            ok, bad = False, bad + w.size
            continue
        diff = np.abs(g.astype(np.float64) - w.astype(np.float64))
        bad += int((~(diff <= atol + rtol * np.abs(w.astype(np.float64)))).sum())  # NaN: wrong
        finite = diff[~np.isnan(diff)]
        worst = max(worst, float(finite.max())) if finite.size else worst
    ok = ok and bad == 0
    return {"matches_oracle": ok, "max_abs_err": worst, "mismatched": bad, "elements": total}


def ort_output_check(problem: Problem, oracle: Oracle, inputs: dict, threads: int) -> dict:
    """Does the ONNX Runtime baseline (all graph optimizations, `threads` threads: the session the ORT
    baseline times) compute the oracle's output on `inputs`, within the problem's tolerance? A
    `compare_outputs` dict plus "oracle" (the oracle's name) and "atol"/"rtol"; its own session,
    independent of the ORT timer."""
    sess = ort_session(problem.model, threads=threads, optimize=True)
    names = [o.name for o in sess.get_outputs()]
    got = [np.asarray(o) for o in sess.run(names, inputs)]
    out = compare_outputs(got, oracle.run(inputs), problem.atol, problem.rtol)
    out.update(oracle=oracle.name, atol=problem.atol, rtol=problem.rtol)
    if not out["matches_oracle"]:
        log.info(
            "%s: ONNX Runtime's output differs from the %s oracle: %d of %d elements, max abs err %.3g",
            problem.id,
            oracle.name,
            out["mismatched"],
            out["elements"],
            out["max_abs_err"],
        )
    return out
