"""Self-check of a problem definition: does the suite itself make sense?

`check_problem` checks that a problem's

1. ONNX model builds and passes `onnx.checker` (full check, done by `Problem.model`);
2. the two independent oracles (`edgekernelbench.oracle`: ONNX Runtime and onnx.reference) and the
   TVM reference (`edgekernelbench.reference.build_reference`, compiled with the default Relax build
   and run in the Relax VM) agree, on `trials` random input sets, within the problem's tolerance,
   `|a - b| <= atol + rtol * |b|` (numpy.allclose), with the same output shapes and dtypes:

   * TVM must match the judge's oracle (`oracle.oracle_kind`: the exact onnx.reference for graphs
     with integer arithmetic, else ONNX Runtime); a difference is a failure;
   * the two oracles must agree on a float problem; a difference is a failure;
   * on an integer problem, ONNX Runtime differing from the exact oracle is a *finding*, not a
     failure: ONNX Runtime's 8-bit GEMM saturates 16-bit pair sums on x86 CPUs without VNNI, so
     its integer results depend on the CPU (see `edgekernelbench.oracle`);
3. outputs are not degenerate (the judge's oracle, on the first trial's inputs). For every output y:

   * all values are finite;
   * not near zero: ``max|y| > MIN_ABS`` (1e-3);
   * not constant: ``std(y) > MIN_REL_STD * max(1, mean|y|)`` (1e-3);
   * not mostly one value: at most ``MAX_MODE_SHARE`` (90 %) of the elements are equal (a ReLU
     output that is almost all zeros fails this);

   and every input and every weight matters: redrawing each graph input (a different seed), and
   perturbing each initializer, changes some output by more than the problem's tolerance (that is,
   the perturbed and unperturbed outputs are not allclose). Float initializers become
   ``1.25 * w + 0.25 * rms(w) * N(0, 1)`` (plus ``0.01 * N(0, 1)`` where ``w`` is all zero);
   integer ones get ``+d`` on a random half of the elements (at least one), with
   ``d = max(1, round(0.25 * rms(w)))``, at least 8 for 8- and 16-bit types (a zero point moved by
   one step is often invisible at a one-step tolerance), and ``-d`` where ``+d`` would overflow.
   A perturbation after which the oracle rejects the graph or returns other shapes counts as a change.

The Markdown table of a suite is `edgekernelbench.problems.docs.suite_table_markdown`.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from ..problems import Problem
from ..tvm_env import compile as tvm_compile

MIN_ABS = 1e-3
MIN_REL_STD = 1e-3
MAX_MODE_SHARE = 0.9
PERTURB_SEED = 1234
# inputs for trial t use seed INPUT_SEED + t; not 0: a problem's weights come from
# default_rng(problem.seed), 0 for every built-in problem, and sample_inputs(0) would draw the same
# numbers (the first dense row would be proportional to the input)
INPUT_SEED = 1
REDRAW_SEED = 1000


@dataclass
class SelfCheck:
    problem_id: str
    ok: bool = True
    failures: list[str] = field(default_factory=list)
    # named disagreements that are not failures: ONNX Runtime off the exact oracle on an integer problem
    findings: list[str] = field(default_factory=list)
    oracle: str = ""  # the judge's oracle for this problem (oracle.ORACLE_ORT or ORACLE_EXACT)
    max_abs_err: float = 0.0  # TVM vs the judge's oracle, over all trials and outputs
    max_oracle_diff: float = 0.0  # ONNX Runtime vs onnx.reference, over all trials and outputs
    seconds: float = 0.0

    def fail(self, msg: str) -> None:
        self.ok = False
        self.failures.append(msg)

    def __str__(self) -> str:
        head = (
            f"{self.problem_id}: {'ok' if self.ok else 'FAILED'} (oracle {self.oracle or '?'}, "
            f"max |tvm-oracle| {self.max_abs_err:.3g}, max |ort-reference| {self.max_oracle_diff:.3g})"
        )
        return "\n  ".join([head, *self.failures, *(f"finding: {f}" for f in self.findings)])


# ---------------------------------------------------------------- TVM reference
def _flatten(out) -> list[np.ndarray]:
    import tvm

    if isinstance(out, tvm.runtime.Tensor):
        return [out.numpy()]
    if hasattr(out, "numpy"):
        return [np.asarray(out.numpy())]
    flat = []
    for o in out:
        flat.extend(_flatten(o))
    return flat


class TVMReferenceRunner:
    """The problem's reference module, compiled once (default Relax build) and run in the Relax VM."""

    def __init__(self, problem: Problem, target=None):
        import tvm
        from tvm import relax

        from ..reference import build_reference

        self.problem = problem
        self.ref = build_reference(problem)
        target = target or tvm.target.Target({"kind": "llvm"})
        self.dev = tvm.cpu(0)
        ex = tvm_compile(self.ref.module, target, relax_pipeline="default_build")
        self.vm = relax.VirtualMachine(ex, self.dev)
        names = [gv.name_hint for gv in self.ref.module.functions]
        weights = [tvm.runtime.tensor(w, self.dev) for w in self.ref.params]
        if "main_transform_params" in names:
            self.weights = list(self.vm["main_transform_params"](tuple(weights)))
        else:
            self.weights = weights

    def run(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        import tvm

        specs = [s.name for s in self.problem.inputs]
        names = self.ref.input_names
        # the frontend may sanitize input names; they keep the graph's input order
        ordered = (
            [inputs[n] for n in names] if all(n in inputs for n in names) else [inputs[n] for n in specs]
        )
        args = [tvm.runtime.tensor(np.asarray(a, order="C"), self.dev) for a in ordered]
        return _flatten(self.vm["main"](*args, *self.weights))


# ---------------------------------------------------------------- helpers
def _close(a: np.ndarray, b: np.ndarray, atol: float, rtol: float) -> bool:
    if a.shape != b.shape:
        return False
    return bool(
        np.allclose(a.astype(np.float64), b.astype(np.float64), atol=atol, rtol=rtol, equal_nan=False)
    )


def _all_close(xs, ys, atol, rtol) -> bool:
    return len(xs) == len(ys) and all(_close(x, y, atol, rtol) for x, y in zip(xs, ys, strict=True))


def degeneracy_failures(name: str, y: np.ndarray) -> list[str]:
    """Why output `y` is degenerate (empty list: it is not)."""
    y64 = np.asarray(y, dtype=np.float64)
    if y64.size == 0:
        return [f"output {name} is empty"]
    if not np.all(np.isfinite(y64)):
        return [f"output {name} has {int(np.sum(~np.isfinite(y64)))} non-finite values"]
    out = []
    peak, std, mean_abs = float(np.max(np.abs(y64))), float(np.std(y64)), float(np.mean(np.abs(y64)))
    if peak <= MIN_ABS:
        out.append(f"output {name} is near zero: max|y| = {peak:.3g} <= {MIN_ABS}")
    if std <= MIN_REL_STD * max(1.0, mean_abs):
        out.append(
            f"output {name} is (nearly) constant: std {std:.3g} <= {MIN_REL_STD} * max(1, mean|y|), "
            f"mean|y| = {mean_abs:.3g}"
        )
    if y64.size > 1:
        _, counts = np.unique(y64, return_counts=True)
        share = counts.max() / y64.size
        if share > MAX_MODE_SHARE:
            out.append(f"output {name}: {share:.1%} of the elements share one value (> {MAX_MODE_SHARE:.0%})")
    return out


def perturb_initializer(arr: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A changed copy of a weight (see the module docstring)."""
    if np.issubdtype(arr.dtype, np.floating):
        rms = float(np.sqrt(np.mean(np.square(arr, dtype=np.float64)))) if arr.size else 0.0
        noise = rng.standard_normal(arr.shape)
        new = 1.25 * arr + (0.25 * rms * noise if rms > 0 else 0.01 * noise)
        return new.astype(arr.dtype)
    if np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_:
        if arr.dtype == np.bool_:
            return ~arr
        info = np.iinfo(arr.dtype)
        a = arr.astype(np.int64)
        rms = float(np.sqrt(np.mean(np.square(a, dtype=np.float64)))) if a.size else 0.0
        d = max(1, round(0.25 * rms), 8 if arr.dtype.itemsize <= 2 else 1)
        mask = rng.random(a.size) < 0.5
        if a.size and not mask.any():
            mask[rng.integers(a.size)] = True
        mask = mask.reshape(a.shape)
        up = np.where(a + d > info.max, a - d, a + d)
        return np.where(mask, up, a).astype(arr.dtype)
    return arr


def _replace_initializer(model: onnx.ModelProto, name: str, value: np.ndarray) -> onnx.ModelProto:
    m = copy.deepcopy(model)
    for i, init in enumerate(m.graph.initializer):
        if init.name == name:
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(value, name))
    return m


def _oracle_outputs(problem, model: onnx.ModelProto, kind: str, inputs: dict) -> list[np.ndarray]:
    from ..oracle import Oracle

    return Oracle(problem, model=model, kind=kind).run(inputs)


def _diff(a: np.ndarray, b: np.ndarray, atol: float, rtol: float) -> tuple[float, int]:
    """(max |a - b|, elements beyond atol + rtol * |b|) for arrays of one shape."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    err = np.abs(a64 - b64)
    bad = ~np.isclose(a64, b64, atol=atol, rtol=rtol)
    return (float(np.nanmax(err)) if err.size else 0.0), int(bad.sum())


# ---------------------------------------------------------------- the check
_ORACLE_TEXT = {"onnxruntime": "ONNX Runtime", "onnx-reference": "the exact oracle (onnx.reference)"}


def check_problem(problem: Problem, trials: int = 2, target=None, tvm_check: bool = True) -> SelfCheck:
    """Runs the self-check of `problem`; never raises for a problem's fault, reports it instead."""
    from ..oracle import ORACLE_EXACT, ORACLE_ORT, Oracle

    t0 = time.perf_counter()
    res = SelfCheck(problem.id)
    # 1. the ONNX model (Problem.model runs onnx.checker with full_check)
    try:
        model = problem.model
        specs = problem.inputs
    except Exception as e:
        res.fail(f"ONNX model does not build/check: {type(e).__name__}: {e}")
        res.seconds = time.perf_counter() - t0
        return res
    atol, rtol = problem.atol, problem.rtol

    oracles = {}  # the judge's oracle first
    try:
        oracle = Oracle(problem)
        res.oracle = oracle.name
        oracles[oracle.name] = oracle
        other = ORACLE_ORT if oracle.name == ORACLE_EXACT else ORACLE_EXACT
        oracles[other] = Oracle(problem, kind=other)
    except Exception as e:
        res.fail(f"an oracle cannot load the model: {type(e).__name__}: {e}")
        if not oracles:
            res.seconds = time.perf_counter() - t0
            return res
    oracle_text = _ORACLE_TEXT[oracle.name]

    # 2. TVM reference vs the oracle, and the two oracles against each other
    runner = None
    if tvm_check:
        try:
            runner = TVMReferenceRunner(problem, target)
        except Exception as e:
            res.fail(f"TVM reference does not import/compile: {type(e).__name__}: {str(e).strip()[:500]}")
    ort_off = [0, 0]  # integer problem: elements where ONNX Runtime is off the exact oracle, of all
    tvm = "agrees with" if runner is not None else "was not compared with"  # for the finding
    for seed in range(INPUT_SEED, INPUT_SEED + trials):
        inputs = problem.sample_inputs(seed)
        exp = oracle.run(inputs)
        if len(oracles) == 2:
            _compare_oracles(res, oracles, inputs, exp, seed, ort_off)
        if runner is None:
            continue
        try:
            got = runner.run(inputs)
        except Exception as e:
            res.fail(f"TVM reference failed to run (trial {seed}): {type(e).__name__}: {e}")
            runner, tvm = None, "was not compared with"
            continue
        if len(got) != len(exp):
            res.fail(f"TVM returns {len(got)} outputs, {oracle_text} {len(exp)}")
            runner, tvm = None, "was not compared with"
            continue
        for i, (a, b) in enumerate(zip(got, exp, strict=True)):
            if a.shape != b.shape or a.dtype != b.dtype:
                res.fail(f"output {i}: TVM {a.shape} {a.dtype} vs {oracle_text} {b.shape} {b.dtype}")
                tvm = "differs from"
                continue
            err, bad = _diff(a, b, atol, rtol)
            res.max_abs_err = max(res.max_abs_err, err)
            if bad:
                tvm = "differs from"
                res.fail(
                    f"output {i} (trial {seed}): TVM differs from {oracle_text} beyond atol={atol} "
                    f"rtol={rtol}: max abs err {err:.3g}, {bad}/{a.size} elements"
                )
    if ort_off[0]:
        res.findings.append(
            f"ONNX Runtime differs from the exact oracle (onnx.reference) on this CPU: {ort_off[0]} of "
            f"{ort_off[1]} elements over {trials} trial(s), max abs err {res.max_oracle_diff:.3g} "
            f"(its 8-bit integer GEMM; saturating 16-bit pair sums without VNNI); TVM {tvm} the exact oracle"
        )

    # 3. non-degeneracy, the judge's oracle only
    base_inputs = problem.sample_inputs(INPUT_SEED)
    base = oracle.run(base_inputs)
    for i, y in enumerate(base):
        for msg in degeneracy_failures(f"{i} ({oracle.output_names[i]})", y):
            res.fail(msg)

    redraw = problem.sample_inputs(REDRAW_SEED)
    for spec in specs:
        changed = dict(base_inputs)
        changed[spec.name] = redraw[spec.name]
        if np.array_equal(changed[spec.name], base_inputs[spec.name]):
            res.fail(f"input {spec.name}: a redraw gives the same values (distribution too narrow)")
            continue
        if _all_close(oracle.run(changed), base, atol, rtol):
            res.fail(f"input {spec.name} does not affect the output (redrawn, outputs within tolerance)")

    rng = np.random.default_rng(PERTURB_SEED)
    for init in model.graph.initializer:
        arr = numpy_helper.to_array(init)
        new = perturb_initializer(arr, rng)
        if np.array_equal(new, arr):
            res.fail(f"weight {init.name} ({arr.dtype}) cannot be perturbed")
            continue
        try:
            outs = _oracle_outputs(
                problem, _replace_initializer(model, init.name, new), oracle.name, base_inputs
            )
        except Exception:
            continue  # the oracle rejects the perturbed value: the graph depends on it
        if _all_close(outs, base, atol, rtol):
            res.fail(
                f"weight {init.name} {tuple(arr.shape)} does not affect the output "
                "(perturbed, within tolerance)"
            )

    res.seconds = time.perf_counter() - t0
    return res


def _compare_oracles(res: SelfCheck, oracles: dict, inputs: dict, exp: list, seed: int, ort_off: list):
    """ONNX Runtime against onnx.reference on one trial (`exp`: the judge's oracle's outputs): a
    failure on a float problem; on an integer one counted in `ort_off` (a finding, see check_problem)."""
    from ..oracle import ORACLE_EXACT, ORACLE_ORT

    judge = next(iter(oracles.values()))
    integer = judge.name == ORACLE_EXACT
    atol, rtol = judge.problem.atol, judge.problem.rtol
    second = ORACLE_ORT if integer else ORACLE_EXACT
    try:
        alt = oracles[second].run(inputs)
    except Exception as e:
        res.fail(f"{_ORACLE_TEXT[second]} failed to run (trial {seed}): {type(e).__name__}: {e}")
        oracles.pop(second)
        return
    ort, ref = (alt, exp) if integer else (exp, alt)
    if len(ort) != len(ref):
        res.fail(f"ONNX Runtime returns {len(ort)} outputs, onnx.reference {len(ref)}")
        oracles.pop(second)
        return
    for i, (a, b) in enumerate(zip(ort, ref, strict=True)):
        if a.shape != b.shape or a.dtype != b.dtype:
            res.fail(f"output {i}: ONNX Runtime {a.shape} {a.dtype} vs onnx.reference {b.shape} {b.dtype}")
            continue
        err, bad = _diff(a, b, atol, rtol)
        res.max_oracle_diff = max(res.max_oracle_diff, err)
        if integer:
            ort_off[0] += bad
            ort_off[1] += a.size
        elif bad:
            res.fail(
                f"output {i} (trial {seed}): ONNX Runtime and onnx.reference disagree beyond the tolerance: "
                f"max abs err {err:.3g}, {bad}/{a.size} elements"
            )


def check_suite(problems, trials: int = 2, target=None) -> list[SelfCheck]:
    return [check_problem(p, trials=trials, target=target) for p in problems]
