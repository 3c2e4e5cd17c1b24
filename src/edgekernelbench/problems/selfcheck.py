"""Self-check of a problem definition: does the suite itself make sense?

`check_problem` checks that a problem's

1. ONNX model builds and passes `onnx.checker` (full check, done by `Problem.model`);
2. TVM reference (`edgekernelbench.reference.build_reference`, compiled with the default Relax
   build and run in the Relax VM) matches ONNX Runtime (`edgekernelbench.oracle.Oracle`) within
   the problem's tolerance, `|tvm - ort| <= atol + rtol * |ort|` (numpy.allclose), on `trials`
   random input sets, with the same output shapes and dtypes;
3. outputs are not degenerate (ONNX Runtime only, on the first trial's inputs). For every output y:

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
   A perturbation after which ONNX Runtime rejects the graph or returns other shapes counts as a change.

The Markdown table of a suite is `edgekernelbench.problems.docs.suite_table_markdown`.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from .base import Problem

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
    max_abs_err: float = 0.0  # TVM vs ONNX Runtime, over all trials and outputs
    seconds: float = 0.0

    def fail(self, msg: str) -> None:
        self.ok = False
        self.failures.append(msg)

    def __str__(self) -> str:
        head = f"{self.problem_id}: {'ok' if self.ok else 'FAILED'} (max |tvm-ort| {self.max_abs_err:.3g})"
        return "\n  ".join([head, *self.failures])


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
        ex = tvm.compile(self.ref.module, target, relax_pipeline="default_build")
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
        args = [tvm.runtime.tensor(np.ascontiguousarray(a), self.dev) for a in ordered]
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


def _ort_outputs(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    from ..oracle import ort_session

    sess = ort_session(model, threads=1, optimize=False)
    names = [o.name for o in sess.get_outputs()]
    return [np.asarray(o) for o in sess.run(names, inputs)]


# ---------------------------------------------------------------- the check
def check_problem(problem: Problem, trials: int = 2, target=None, tvm_check: bool = True) -> SelfCheck:
    """Runs the self-check of `problem`; never raises for a problem's fault, reports it instead."""
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

    from ..oracle import Oracle

    try:
        oracle = Oracle(problem)
    except Exception as e:
        res.fail(f"ONNX Runtime cannot load the model: {type(e).__name__}: {e}")
        res.seconds = time.perf_counter() - t0
        return res

    # 2. TVM reference vs ONNX Runtime
    if tvm_check:
        try:
            runner = TVMReferenceRunner(problem, target)
        except Exception as e:
            runner = None
            res.fail(f"TVM reference does not import/compile: {type(e).__name__}: {str(e).strip()[:500]}")
        if runner is not None:
            for seed in range(INPUT_SEED, INPUT_SEED + trials):
                inputs = problem.sample_inputs(seed)
                try:
                    got = runner.run(inputs)
                except Exception as e:
                    res.fail(f"TVM reference failed to run (trial {seed}): {type(e).__name__}: {e}")
                    break
                exp = oracle.run(inputs)
                if len(got) != len(exp):
                    res.fail(f"TVM returns {len(got)} outputs, ONNX Runtime {len(exp)}")
                    break
                for i, (a, b) in enumerate(zip(got, exp, strict=True)):
                    if a.shape != b.shape or a.dtype != b.dtype:
                        res.fail(f"output {i}: TVM {a.shape} {a.dtype} vs ONNX Runtime {b.shape} {b.dtype}")
                        continue
                    err = np.abs(a.astype(np.float64) - b.astype(np.float64))
                    res.max_abs_err = max(res.max_abs_err, float(np.nanmax(err)) if err.size else 0.0)
                    if not _close(a, b, atol, rtol):
                        bad = ~np.isclose(a.astype(np.float64), b.astype(np.float64), atol=atol, rtol=rtol)
                        res.fail(
                            f"output {i} (trial {seed}): TVM differs from ONNX Runtime beyond atol={atol} "
                            f"rtol={rtol}: max abs err {float(np.nanmax(err)):.3g}, "
                            f"{int(bad.sum())}/{bad.size} elements"
                        )

    # 3. non-degeneracy, ONNX Runtime only
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
            outs = _ort_outputs(_replace_initializer(model, init.name, new), base_inputs)
        except Exception:
            continue  # ONNX Runtime rejects the perturbed value: the graph depends on it
        if _all_close(outs, base, atol, rtol):
            res.fail(
                f"weight {init.name} {tuple(arr.shape)} does not affect the output "
                "(perturbed, within tolerance)"
            )

    res.seconds = time.perf_counter() - t0
    return res


def check_suite(problems, trials: int = 2, target=None) -> list[SelfCheck]:
    return [check_problem(p, trials=trials, target=target) for p in problems]
