"""The oracles: exact for integer arithmetic on every CPU, ONNX Runtime's inexactness named, not hidden.

ONNX Runtime's u8 x s8 GEMM on x86 without VNNI adds pairs of products in 16 bit with saturation
(pmaddubsw). This machine may or may not have VNNI, so the tests either emulate that kernel in NumPy
(`pmaddubsw_matmul`, which reproduces ORT under `qemu-x86_64 -cpu Haswell` element for element) or
compare what the judge records with what ORT actually computes here.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from ekb_test_problems import saturating_weights
from onnx import TensorProto, helper, numpy_helper

from edgekernelbench import oracle as oracle_mod
from edgekernelbench.checks import selfcheck
from edgekernelbench.checks.selfcheck import check_problem
from edgekernelbench.oracle import (
    ORACLE_EXACT,
    ORACLE_ORT,
    Oracle,
    compare_outputs,
    oracle_kind,
    ort_output_check,
    ort_session,
    reference_evaluator,
)
from edgekernelbench.problems import get_problem
from edgekernelbench.records import Result, Timing

SATURATING = "L1/tiny_matmulint_saturating"


def pmaddubsw_matmul(a: np.ndarray, w: np.ndarray, a_zero: int = 0) -> np.ndarray:
    """ONNX Runtime's u8 x s8 MatMulInteger on x86 without VNNI: products of consecutive k pairs summed
    in 16 bit with saturation, then in 32 bit; the activation zero point corrected afterwards."""
    p = a.astype(np.int64)[..., :, None] * w.astype(np.int64)  # ..., k, n
    pairs = np.clip(p[..., 0::2, :] + p[..., 1::2, :], -32768, 32767)
    return (pairs.sum(axis=-2) - a_zero * w.astype(np.int64).sum(axis=0)).astype(np.int32)


def exact_matmul(a, w, a_zero=0, w_zero=0) -> np.ndarray:
    return (a.astype(np.int64) - a_zero) @ (w.astype(np.int64) - w_zero)


def _model(nodes, inputs, outputs, inits, opset=17):
    g = helper.make_graph(
        nodes, "g", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()]
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, list(shape))


# ---------------------------------------------------------------- which oracle
def test_oracle_kind_follows_integer_arithmetic_in_the_graph():
    for pid in ("L1/matmulint_ae_640x128", "L1/matmulint_kws_pw", "L1/convint_kws_stem", SATURATING):
        assert oracle_kind(get_problem(pid).model) == ORACLE_EXACT, pid
    # float graphs, and QDQ graphs (float operators between Quantize/DequantizeLinear) stay with ORT
    for pid in ("L1/dense_ae_640x128", "L1/qdq_conv_vww_stem", "L2/int8_ds_block_kws", "L3/resnet8_ic_int8"):
        assert oracle_kind(get_problem(pid).model) == ORACLE_ORT, pid

    def one(op, ins, out_t, **attrs):
        vis = [_vi(n, t, s) for n, t, s in ins]
        return _model(
            [helper.make_node(op, [n for n, _, _ in ins], ["y"], **attrs)], vis, [_vi("y", out_t, [1])], {}
        )

    u8, s8, f32 = TensorProto.UINT8, TensorProto.INT8, TensorProto.FLOAT
    assert (
        oracle_kind(one("ConvInteger", [("x", u8, (1, 1, 3, 3)), ("w", s8, (1, 1, 1, 1))], 6)) == ORACLE_EXACT
    )
    qlm = [
        ("a", u8, (2, 2)),
        ("as", f32, ()),
        ("az", u8, ()),
        ("b", s8, (2, 2)),
        ("bs", f32, ()),
        ("bz", s8, ()),
    ]
    assert oracle_kind(one("QLinearMatMul", qlm + [("ys", f32, ()), ("yz", u8, ())], u8)) == ORACLE_EXACT
    assert oracle_kind(one("MatMul", [("a", f32, (2, 2)), ("b", f32, (2, 2))], f32)) == ORACLE_ORT
    # inside an If branch
    branch = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b"], ["z"])],
        "then",
        [],
        [_vi("z", TensorProto.INT32, [2, 2])],
    )
    cond = _model(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)],
        [_vi("c", TensorProto.BOOL, ()), _vi("a", u8, (2, 2)), _vi("b", s8, (2, 2))],
        [_vi("y", TensorProto.INT32, (2, 2))],
        {},
    )
    assert oracle_kind(cond) == ORACLE_EXACT


# ---------------------------------------------------------------- onnx.reference is exact
@pytest.mark.parametrize(
    "a_t, w_t, a_zero, w_zero",
    [
        ("uint8", "int8", 0, 0),
        ("uint8", "int8", 255, -128),
        ("uint8", "uint8", 0, 255),
        ("int8", "int8", -128, 127),
    ],
)
def test_reference_matmulinteger_is_exact_on_extreme_operands(a_t, w_t, a_zero, w_zero):
    rng = np.random.default_rng(3)
    ia, iw = np.iinfo(a_t), np.iinfo(w_t)
    k = 2048  # |(a - za)(w - zw)| <= 255 * 255: k * 65025 < 2**31
    a = rng.choice([ia.min, ia.max, ia.max - 1, ia.min + 1], (3, k)).astype(a_t)
    w = rng.choice([iw.min, iw.max, iw.min + 1], (k, 5)).astype(w_t)
    w[:, 0] = iw.min if a_zero > 0 else iw.max  # a column of one extreme: the largest sums
    a[0] = ia.max
    model = _model(
        [helper.make_node("MatMulInteger", ["a", "w", "az", "wz"], ["y"])],
        [_vi("a", helper.np_dtype_to_tensor_dtype(np.dtype(a_t)), a.shape)],
        [_vi("y", TensorProto.INT32, (3, 5))],
        {"w": w, "az": np.array(a_zero, a_t), "wz": np.array(w_zero, w_t)},
    )
    (y,) = reference_evaluator(model).run(None, {"a": a})
    want = exact_matmul(a, w, a_zero, w_zero)
    assert np.abs(want).max() > 2**24  # beyond float32's exact integers: a float path would round
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y.astype(np.int64), want)


def test_reference_convinteger_is_exact_on_extreme_operands():
    rng = np.random.default_rng(4)
    x = rng.choice(np.array([0, 1, 254, 255], np.uint8), (1, 64, 6, 6))
    w = rng.choice(np.array([-128, -127, 126, 127], np.int8), (3, 64, 3, 3))
    w[0] = -128
    x[0, :, :, :] = 255
    model = _model(
        [
            helper.make_node(
                "ConvInteger", ["x", "w", "xz", "wz"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]
            )
        ],
        [_vi("x", TensorProto.UINT8, x.shape)],
        [_vi("y", TensorProto.INT32, (1, 3, 6, 6))],
        {"w": w, "xz": np.array(3, np.uint8), "wz": np.array(0, np.int8)},
    )
    (y,) = reference_evaluator(model).run(None, {"x": x})
    xp = np.pad(x.astype(np.int64) - 3, ((0, 0), (0, 0), (1, 1), (1, 1)))  # padding contributes 0
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # 1, c, 6, 6, 3, 3
    want = np.einsum("bchwij,ocij->bohw", win, w.astype(np.int64))
    assert np.abs(want).max() > 2**22
    np.testing.assert_array_equal(y.astype(np.int64), want)


def test_oracle_of_saturating_problem_is_numpy_int64():
    p = get_problem(SATURATING)
    o = Oracle(p)
    assert o.name == ORACLE_EXACT
    for seed in (1, 2):
        x = p.sample_inputs(seed)
        want = exact_matmul(x["a"], saturating_weights())
        assert not np.array_equal(pmaddubsw_matmul(x["a"], saturating_weights()), want)  # it does saturate
        (y,) = o.run(x)
        assert y.dtype == np.int32
        np.testing.assert_array_equal(y.astype(np.int64), want)


def test_reference_runs_opset17_dequantizelinear_like_ort():
    """onnx.reference has DequantizeLinear from opset 19 only; the oracle serves the suite's opset-17
    QDQ graphs with it too, and matches ONNX Runtime there."""
    for pid in ("L1/qdq_conv_vww_stem", "L2/uint8_ds_block_s2_vww"):
        p = get_problem(pid)
        x = p.sample_inputs(1)
        got, want = Oracle(p, kind=ORACLE_EXACT).run(x), Oracle(p, kind=ORACLE_ORT).run(x)
        assert compare_outputs(got, want, p.atol, p.rtol)["matches_oracle"], pid


def test_compare_outputs():
    a = np.array([[1, 2], [3, 4]], np.int32)
    assert compare_outputs([a], [a.copy()], 0.0, 0.0) == {
        "matches_oracle": True,
        "max_abs_err": 0.0,
        "mismatched": 0,
        "elements": 4,
    }
    c = compare_outputs([a + np.array([[0, 5], [0, 1]], np.int32)], [a], 0.0, 0.0)
    assert (c["matches_oracle"], c["max_abs_err"], c["mismatched"]) == (False, 5.0, 2)
    assert compare_outputs([a + 1], [a], 1.0, 0.0)["matches_oracle"]
    assert not compare_outputs([a.astype(np.int64)], [a], 1.0, 0.0)["matches_oracle"]  # dtype
    assert not compare_outputs([a.ravel()], [a], 1.0, 0.0)["matches_oracle"]  # shape


# ---------------------------------------------------------------- ONNX Runtime, emulated without VNNI
class SaturatingSession:
    """An ONNX Runtime session of a u8 x s8 MatMulInteger graph as a CPU without VNNI runs it."""

    def __init__(self, model: onnx.ModelProto):
        node = next(n for n in model.graph.node if n.op_type == "MatMulInteger")
        inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        self.a, self.w, self.a_zero = node.input[0], inits[node.input[1]], int(inits[node.input[2]])
        self.out = model.graph.output[0].name

    def get_outputs(self):
        return [type("Out", (), {"name": self.out})()]

    def run(self, names, feed):
        return [pmaddubsw_matmul(feed[self.a], self.w, self.a_zero)]


@pytest.fixture
def ort_without_vnni(monkeypatch):
    """ONNX Runtime as on an AVX2-only CPU, for MatMulInteger graphs (others run as they are)."""
    real = oracle_mod.ort_session

    def fake(model, threads=1, optimize=True):
        if any(n.op_type == "MatMulInteger" for n in model.graph.node):
            return SaturatingSession(model)
        return real(model, threads, optimize)

    monkeypatch.setattr(oracle_mod, "ort_session", fake)


def test_ort_output_check_marks_a_saturated_result(ort_without_vnni):
    p = get_problem(SATURATING)
    x = p.sample_inputs(5)
    c = ort_output_check(p, Oracle(p), x, threads=1)
    diff = np.abs(pmaddubsw_matmul(x["a"], saturating_weights()) - exact_matmul(x["a"], saturating_weights()))
    assert c["matches_oracle"] is False and c["oracle"] == ORACLE_EXACT
    assert c["max_abs_err"] == float(diff.max()) > 1e5
    assert c["mismatched"] == int((diff > 0).sum()) and c["elements"] == diff.size


def test_ort_output_check_is_what_ort_does_on_this_cpu():
    p = get_problem(SATURATING)
    x = p.sample_inputs(5)
    sess = ort_session(p.model, threads=1, optimize=True)
    (y,) = sess.run(None, x)
    diff = np.abs(y.astype(np.int64) - exact_matmul(x["a"], saturating_weights()))
    c = ort_output_check(p, Oracle(p), x, threads=1)
    assert c["matches_oracle"] is bool(diff.max() == 0)
    assert c["max_abs_err"] == float(diff.max())


def test_judge_uses_the_exact_oracle_where_ort_saturates(ort_without_vnni):
    """In process (so ORT can be emulated): the reference candidate of the saturating problem is
    correct, judged by the exact oracle; an ONNX Runtime oracle would call it wrong_output here."""
    from dataclasses import asdict

    from edgekernelbench.generators.reference_candidates import reference_spec
    from edgekernelbench.harness.evaluate import run_job
    from edgekernelbench.harness.job import Job
    from edgekernelbench.harness.timing import TimingConfig

    p = get_problem(SATURATING)
    job = Job(
        problem=p.id,
        sample=0,
        backend="host-cpu",
        spec=reference_spec(p).to_dict(),
        trials=2,
        timing=asdict(TimingConfig.quick()),
        measure=False,
    )
    res = run_job(job)
    assert res.correct, res.detail
    assert res.oracle == ORACLE_EXACT
    assert res.correctness.max_abs_err == [0.0]


# ---------------------------------------------------------------- the judge in a worker, on this CPU
def test_judge_records_oracle_and_ort_exactness_as_on_this_cpu(quick_timing):
    """The TVM reference candidate is correct; the ORT baseline is timed and marked inexact exactly
    when ONNX Runtime's output on the timing inputs differs from NumPy's int64 result on this CPU."""
    from edgekernelbench.generators.reference_candidates import reference_spec
    from edgekernelbench.harness.api import evaluate
    from edgekernelbench.harness.inputs import InputPlan

    p = get_problem(SATURATING)
    res = evaluate(
        p, reference_spec(p), "host-cpu", trials=2, timing=quick_timing, baselines=("onnxruntime",)
    )
    assert res.correct, res.detail
    assert res.oracle == ORACLE_EXACT
    assert "onnxruntime" in res.baselines and res.extra["onnxruntime_on"] == "host"

    x = InputPlan(p, res.seed, trials=2).timing_sets()[0]  # the timing inputs, from the judgment's seed
    (y,) = ort_session(p.model, threads=1, optimize=True).run(None, x)
    diff = np.abs(y.astype(np.int64) - exact_matmul(x["a"], saturating_weights()))
    check = res.extra["onnxruntime_output"]
    assert check["matches_oracle"] is bool(diff.max() == 0), (check, diff.max())
    assert check["max_abs_err"] == float(diff.max())
    assert check["oracle"] == ORACLE_EXACT


# ---------------------------------------------------------------- the self-check
def test_selfcheck_names_ort_off_the_exact_oracle_as_a_finding(ort_without_vnni):
    res = check_problem(get_problem(SATURATING), trials=2)
    assert res.ok, res.failures
    assert res.oracle == ORACLE_EXACT and res.max_abs_err == 0
    assert len(res.findings) == 1, res.findings
    assert "ONNX Runtime differs from the exact oracle" in res.findings[0]
    assert "TVM agrees with the exact oracle" in res.findings[0]
    assert res.max_oracle_diff > 1e5
    assert "finding: ONNX Runtime differs" in str(res)


def test_selfcheck_on_this_cpu_names_what_ort_does():
    p = get_problem(SATURATING)
    res = check_problem(p, trials=2)
    assert res.ok, res.failures
    x = [p.sample_inputs(s) for s in (selfcheck.INPUT_SEED, selfcheck.INPUT_SEED + 1)]
    sess = ort_session(p.model, threads=1, optimize=False)
    ort_exact = all(
        np.array_equal(sess.run(None, xi)[0].astype(np.int64), exact_matmul(xi["a"], saturating_weights()))
        for xi in x
    )
    assert bool(res.findings) is not ort_exact, res.findings


def test_selfcheck_fails_tvm_off_the_exact_oracle(monkeypatch):
    run = selfcheck.TVMReferenceRunner.run
    monkeypatch.setattr(selfcheck.TVMReferenceRunner, "run", lambda self, x: [y + 1 for y in run(self, x)])
    res = check_problem(get_problem(SATURATING), trials=1)
    assert not res.ok
    assert any("TVM differs from the exact oracle (onnx.reference)" in f for f in res.failures), res.failures


def test_selfcheck_fails_float_oracles_that_disagree(monkeypatch):
    run = Oracle.run

    def off(self, x):
        outs = run(self, x)
        return [y + np.float32(1e-3) for y in outs] if self.name == ORACLE_EXACT else outs

    monkeypatch.setattr(Oracle, "run", off)
    res = check_problem(get_problem("L1/softmax_kws_classifier"), trials=1, tvm_check=False)
    assert res.oracle == ORACLE_ORT
    assert not res.ok and not res.findings
    assert [f for f in res.failures if "ONNX Runtime and onnx.reference disagree" in f], res.failures
    assert res.max_oracle_diff == pytest.approx(1e-3, rel=1e-3)


def test_selfcheck_reports_an_oracle_that_cannot_load(monkeypatch):
    def refuse(model):
        raise NotImplementedError("no implementation for this operator")

    monkeypatch.setattr(oracle_mod, "reference_evaluator", refuse)
    res = check_problem(get_problem("L1/softmax_kws_classifier"), trials=1, tvm_check=False)
    assert not res.ok
    assert [f for f in res.failures if "an oracle cannot load the model" in f and "onnx-reference" in f]


# ---------------------------------------------------------------- the report
def _res(problem, inexact, oracle=ORACLE_EXACT, sample=0):
    extra = {"onnxruntime_output": {"matches_oracle": not inexact, "max_abs_err": 9.0 if inexact else 0.0}}
    return Result(
        problem=problem,
        sample=sample,
        backend="llvm",
        compiled=True,
        correct=True,
        runtime=Timing(1e-5, 0.0, 1e-5, 1e-5, 1, 1),
        speedups={"tvm-default": 1.5, "onnxruntime": 2.0},
        oracle=oracle,
        extra=extra,
    )


def test_report_counts_and_shows_inexact_ort():
    import csv
    import io
    import json

    from rich.console import Console

    from edgekernelbench.cli.report import inexact_baseline_lines
    from edgekernelbench.report.render import render_problem_table, render_table, to_csv, to_json
    from edgekernelbench.report.summary import per_problem_rows, summarize

    results = [
        _res("L1/a", True),
        _res("L1/a", False, sample=1),
        _res("L2/b", True),
        _res("L2/c", False, ORACLE_ORT),
    ]
    results.append(Result("L1/old", 0, "llvm", compiled=True, correct=True, speedups={"onnxruntime": 1.0}))
    s = summarize(results)
    lv = {x.level: x for x in s.backend("llvm").levels}
    assert lv["L1"].baseline_inexact == {"onnxruntime": 1}
    assert lv["L2"].baseline_inexact == {"onnxruntime": 1}
    assert lv["all"].baseline_inexact == {"onnxruntime": 2}

    data = json.loads(to_json(s))
    assert data["backends"][0]["levels"][-1]["baseline_inexact"] == {"onnxruntime": 2}
    rows = list(csv.DictReader(io.StringIO(to_csv(s))))
    by = {(r["level"], r["baseline"]) for r in rows if r["baseline_inexact"] not in ("", "0")}
    assert by == {("L1", "onnxruntime"), ("L2", "onnxruntime"), ("all", "onnxruntime")}

    con = Console(width=250, record=True)
    con.print(render_table(s))
    text = con.export_text()
    assert "onnxruntime output inexact" in text
    assert "tvm-default output inexact" not in text

    prows = {(r["problem"], r["sample"]): r for r in per_problem_rows(results)}
    assert prows[("L1/a", 0)]["inexact_baselines"] == ["onnxruntime"]
    assert prows[("L1/a", 1)]["inexact_baselines"] == [] and prows[("L1/a", 1)]["oracle"] == ORACLE_EXACT
    con = Console(width=250, record=True)
    con.print(render_problem_table(results))
    assert con.export_text().count("onnxruntime output != oracle (onnx-reference)") == 2

    (line,) = inexact_baseline_lines(results, ("tvm-default", "onnxruntime"))
    assert "2 timed sample(s)" in line and "L1/a, L2/b" in line

    # nothing inexact: no column, no note
    clean = [_res("L1/a", False)]
    con = Console(width=250, record=True)
    con.print(render_table(summarize(clean)))
    assert "inexact" not in con.export_text()
    assert inexact_baseline_lines(clean, ("onnxruntime",)) == []
