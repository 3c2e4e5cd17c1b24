"""evaluate(): judge one candidate on one backend -- compile, correctness against the oracle, timing
against the baselines. Runs inside a worker process (see isolation.py); call `evaluate` from the
parent, which spawns the worker."""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..baselines.tvm_default import baseline_built
from ..errors import (
    DecisionError,
    ForbiddenConstruct,
    MalformedCandidate,
    SignatureMismatch,
    ToolchainMissing,
    last_line,
)
from ..executor import GraphError, KernelFault
from ..records import Correctness, Result, StatelessTiming, TimingEnv, kernel_times
from .inputs import TYPICAL, InputPlan, fresh_seed, output_scales
from .job import Job
from .runner import CandidateBuildError, Runner, RunnerDied, RunnerProxy, start_runner
from .timing import MachineWatch, TimingConfig, paired_speedup, pin_thread, time_interleaved
from .verify import verify_module, verify_target_attrs

log = logging.getLogger(__name__)


def _shape_dtype(sinfo):
    return tuple(int(d) for d in sinfo.shape.values), str(sinfo.dtype)


def check_signature(mod, problem, reference) -> None:
    """The candidate's main must take the graph inputs (then weights or transformed weights)."""
    from tvm import relax

    if "main" not in {gv.name_hint for gv in mod.functions} or not isinstance(mod["main"], relax.Function):
        raise SignatureMismatch("the module has no Relax function 'main'")
    params = list(mod["main"].params)
    if len(params) < len(reference.input_names):
        raise SignatureMismatch(
            f"main takes {len(params)} parameters, the problem has {len(reference.input_names)} inputs"
        )
    for spec, p in zip(problem.inputs, params, strict=False):
        try:
            got = _shape_dtype(p.ty)
        except Exception as e:
            raise SignatureMismatch(f"main parameter '{p.name}' has no static tensor type") from e
        if got != (tuple(spec.shape), spec.dtype):
            raise SignatureMismatch(
                f"main parameter '{p.name}' is {got[1]}{list(got[0])}, input '{spec.name}' "
                f"is {spec.dtype}{list(spec.shape)}"
            )


def _compare(outs, expected, atol, rtol, scales=None) -> tuple[str | None, str, list[float], list[float]]:
    """Returns (reason or None, detail, max abs errors, max rel errors). `scales`: per output, the factor
    on atol (harness/inputs.py output_scales; 1 by default)."""
    if len(outs) != len(expected):
        return "signature", f"{len(outs)} outputs, expected {len(expected)}", [], []
    abs_errs, rel_errs = [], []
    for i, (o, e) in enumerate(zip(outs, expected, strict=True)):
        if o.shape != e.shape or o.dtype != e.dtype:
            return (
                "signature",
                f"output {i} is {o.dtype}{list(o.shape)}, expected {e.dtype}{list(e.shape)}",
                [],
                [],
            )
        of, ef = o.astype(np.float64), e.astype(np.float64)
        if np.issubdtype(o.dtype, np.floating):
            nan = np.isnan(of) & ~np.isnan(ef)
            if nan.any():
                return (
                    "nan_output",
                    f"output {i}: {int(nan.sum())} of {o.size} elements are NaN (never written, "
                    f"or computed NaN), first at {np.argwhere(nan)[0].tolist()}",
                    [],
                    [],
                )
            inf = np.isinf(of) & np.isfinite(ef)
            if inf.any():
                first = np.argwhere(inf)[0].tolist()
                return (
                    "wrong_output",
                    f"output {i}: {int(inf.sum())} of {o.size} elements are infinite where the oracle's "
                    f"are finite; first at {first}: got {of[tuple(first)]}, expected {ef[tuple(first)]:.6g}",
                    [],
                    [],
                )
        diff = np.abs(of - ef)
        diff = np.where(np.isnan(ef) & np.isnan(of), 0.0, diff)
        abs_errs.append(float(diff.max()) if diff.size else 0.0)
        rel_errs.append(float((diff / np.maximum(np.abs(ef), 1e-12)).max()) if diff.size else 0.0)
        scale = scales[i] if scales else 1.0
        bad = ~(diff <= atol * scale + rtol * np.abs(ef))
        if bad.any():
            idx = np.argwhere(bad)[0].tolist()
            return (
                "wrong_output",
                f"output {i}: {int(bad.sum())} of {o.size} elements differ; max abs err "
                f"{abs_errs[-1]:.3g}; first at {idx}: "
                f"got {of[tuple(idx)]:.6g}, expected {ef[tuple(idx)]:.6g}"
                + (f" (atol at this output's scale: {atol * scale:.3g})" if scale != 1.0 else ""),
                abs_errs,
                rel_errs,
            )
    return None, "", abs_errs, rel_errs


def _finite(outputs) -> bool:
    return all(not np.issubdtype(o.dtype, np.floating) or bool(np.isfinite(o).all()) for o in outputs)


def check_correctness(runner: Runner, problem, oracle, plan: InputPlan) -> Correctness:
    """Every trial of `plan` (typical and stress inputs, harness/inputs.py): the candidate kernel by kernel
    (sentinel-filled outputs), the oracle, the candidate again through the VM; both of the candidate's
    outputs must match the oracle's. A trial counts only where the oracle's outputs are finite."""
    c = Correctness(correct=False, trials=0)
    worst_abs: list[float] = []
    worst_rel: list[float] = []
    typical = None  # the first typical trial's oracle outputs: the scale of the problem's outputs
    for trial in plan.trials():
        t, inputs = trial.index, trial.inputs
        originals = {k: v.copy() for k, v in inputs.items()}
        try:
            first = runner.run_kernels(inputs, variant=t % 2)  # candidate, before the reference
            expected = oracle.run(inputs)  # the oracle
            second = runner.run_vm(inputs)  # candidate again, through the VM
        except KernelFault as e:
            raise_device_failure(runner.session, e)
            c.reason, c.detail, c.first_failing_trial = e.reason, f"trial {t} ({trial.kind} inputs): {e}", t
            return c
        except GraphError as e:
            raise_device_failure(runner.session, e)
            c.reason, c.detail, c.first_failing_trial = "signature", str(e), t
            return c
        except RunnerDied:  # the candidate's process crashed: run_job records it
            raise
        except Exception as e:
            raise_device_failure(runner.session, e)
            c.reason, c.detail = "runtime_error", f"trial {t} ({trial.kind} inputs): {last_line(e)}"
            c.first_failing_trial = t
            return c
        if any(not np.array_equal(inputs[k], originals[k]) for k in inputs):
            c.reason, c.detail, c.first_failing_trial = "input_mutated", "a graph input changed", t
            return c
        if not _finite(expected):  # the oracle's own output overflowed: this trial does not count
            c.uncounted.append(f"trial {t} ({trial.kind}): the oracle's output is not finite")
            continue
        if trial.kind == TYPICAL and typical is None:
            typical = expected
        scales = output_scales(expected, typical) if trial.kind != TYPICAL else None
        c.trials += 1
        c.inputs.append(trial.kind)
        for label, outs in (("kernel-by-kernel run", first), ("VM run", second)):
            reason, detail, abs_e, rel_e = _compare(outs, expected, problem.atol, problem.rtol, scales)
            if abs_e:
                worst_abs = [max(a, b) for a, b in zip(worst_abs, abs_e, strict=True)] if worst_abs else abs_e
                worst_rel = [max(a, b) for a, b in zip(worst_rel, rel_e, strict=True)] if worst_rel else rel_e
            c.max_abs_err, c.max_rel_err = worst_abs, worst_rel
            if reason:
                c.reason, c.first_failing_trial = reason, t
                c.detail = f"trial {t} ({trial.kind} inputs), {label}: {detail}"
                return c
    if not c.trials:
        c.reason, c.detail = "infra", "the oracle's outputs were not finite on any trial: nothing was checked"
        return c
    c.correct = True
    return c


def raise_device_failure(session, error: BaseException) -> None:
    """Raises the session's DeviceFailure when `error` was the device's fault (a remote device lost,
    its session ended), so the candidate is not blamed for it."""
    diagnose = getattr(session, "diagnose", None)
    failure = diagnose(error) if diagnose else None
    if failure is not None:
        raise failure from error


def run_job(job: Job, module_source: Callable[[], object] | None = None) -> Result:
    """The judge's work: everything for one candidate, in this process. `module_source` gives the
    candidate IRModule (in a judge worker: the builder's JSON, harness/worker.py); without it the spec is
    materialized here (a trusted caller's own specs only: that runs the candidate's Python in this
    process). A failure of the device it runs on (see Session.diagnose) is recorded with the device's
    reason: "infra" (with extra["device_lost"] when another device may do), "timeout" or "crash"."""
    state: dict = {"runners": []}
    try:
        res = _run_job(job, state, module_source)
    except RunnerDied as e:  # the candidate's own process died (e.g. a segfault in a kernel)
        res = state["res"].failure("crash", str(e))
        res = _done(res, state["laps"])
    except Exception as e:
        session = state.get("session")
        failure = session.diagnose(e) if session is not None and hasattr(session, "diagnose") else None
        if failure is None:
            raise
        res = state["res"]
        res.failure(failure.reason, str(failure))
        if failure.retry:
            res.extra["device_lost"] = True
        res = _done(res, state["laps"])
    finally:
        for proxy in state["runners"]:
            proxy.close()
    if hasattr(state.get("session"), "describe"):
        res.extra.update(state["session"].describe())
    return res


def _on_host(backend) -> bool:
    """Whether the candidate runs on this machine's CPU: then in a runner process of its own, and every TVM
    contender is timed through one (harness/runner.py)."""
    from ..backends.host import LocalBackend

    return isinstance(backend, LocalBackend) and backend.profile.kind == "host"


def _start_runners(job: Job, backend, session, reference, problem, res: Result, state: dict) -> dict:
    """The runners of a judgment on this machine's CPU, started before the oracle, the seed or anything of
    the candidate exists here: {"candidate": proxy, <each TVM baseline timed>: proxy}. A TVM baseline
    builds and loads in its own runner at once (built before the fork in a warm judge)."""
    from ..baselines.tvm_default import TVM_BASELINES

    sandbox = _runner_sandbox(job)
    spawn = {
        "problem": problem.id,
        "graph_dir": _graph_dir(problem),
        "backend_profile": backend.profile.to_dict(),
        "threads": job.threads,
    }
    proxies = {}
    timed = (
        [n for n in TVM_BASELINES if n in job.baselines] if job.measure and backend.profile.can_time else []
    )
    for name in ["candidate", *timed]:
        proxy, how = start_runner(backend, session, reference, sandbox, spawn)
        state["runners"].append(proxy)
        proxies[name] = proxy
        if name == "candidate":
            res.extra["runner"] = how
    for name in timed:
        proxies[name].load_baseline(name)
    return proxies


_GRAPH_DIRS: dict[str, str] = {}


def _graph_dir(problem) -> str:
    """Where a spawned runner finds the problem's graph as this judge has it: written once per process into
    a directory of its own under the temporary directory (a judge's: its job directory)."""
    if problem.id not in _GRAPH_DIRS:
        where = tempfile.mkdtemp(prefix="ekb-graph-")
        problem.export_graph(Path(where))
        _GRAPH_DIRS[problem.id] = where
    return _GRAPH_DIRS[problem.id]


def _run_job(job: Job, state: dict, module_source=None) -> Result:
    from ..backends.gpu import DeviceUnavailable
    from ..backends.registry import backend_for
    from ..ir.replay import materialize
    from ..ir.spec import KernelSpec
    from ..oracle import Oracle, OracleError
    from ..problems import get_problem
    from ..reference import build_reference

    laps = Laps()
    problem = get_problem(job.problem)
    backend = backend_for(job.resolved_profile(), tracker=job.tracker)
    if hasattr(backend, "session_timeout"):  # a remote device's session ends with the worker's limit
        backend.session_timeout = job.timeout_s
    res = Result(
        problem=job.problem,
        sample=job.sample,
        backend=job.backend,
        candidate=job.candidate,
        flops=problem.flops,
        bytes=problem.bytes_moved,
    )
    if module_source is None:  # the spec itself, materialized below
        spec = KernelSpec.from_dict(job.spec, job.candidate or "candidate")
        res.spec_hash, res.method, target_attrs = spec.hash(), spec.method, spec.decisions.target_attrs
    else:  # a judge: the spec's data only (isolation.judge_spec); the module comes from the builder
        spec = None
        res.spec_hash, res.method = str(job.spec.get("spec_hash", "")), str(job.spec.get("method", ""))
        target_attrs = job.spec.get("target_attrs") or {}
    reference = build_reference(problem)
    laps.mark("reference")
    try:
        session = backend.session()
    except DeviceUnavailable as e:  # this machine's fault (no GPU or runtime), not the candidate's
        return _done(res.failure("infra", str(e)), laps)
    state.update(res=res, session=session, laps=laps)
    proxies: dict[str, RunnerProxy] = {}
    if _on_host(backend):  # the candidate's native code and every TVM contender: in runners of their own
        proxies = _start_runners(job, backend, session, reference, problem, res, state)
        laps.mark("start_runners")
    else:
        res.extra["runner"] = (
            f"on the device ({backend.profile.run})"
            if backend.profile.run in ("remote", "emulated")
            else f"in the judge: a {backend.profile.kind} backend's host code runs in the judge's process"
        )
    # the judgment's inputs: from a seed drawn now, after every process that runs a candidate started
    res.seed = job.seed if job.seed is not None else fresh_seed()
    plan = InputPlan(problem, res.seed, job.trials, TimingConfig(**job.timing).input_sets)

    # Trusted work first, while a builder materializes the candidate: baselines off this machine's CPU
    # (built; a device is reached for the candidate first, so that a device that cannot run it fails on
    # the candidate's build) and the oracle.
    baselines = {}
    if not proxies and job.measure and backend.profile.can_time:
        from ..baselines.tvm_default import TVM_BASELINES

        for name in (n for n in TVM_BASELINES if n in job.baselines):
            mod, built = baseline_built(name, reference, backend)
            baselines[name] = _loader(mod, built, session, reference)
    oracle, oracle_error = None, ""
    if backend.profile.can_check:
        try:
            oracle = Oracle(problem)  # the exact onnx.reference for integer arithmetic, else ONNX Runtime
        except OracleError as e:  # the problem's model, not the candidate
            oracle_error = str(e)
    laps.mark("baselines_oracle")

    try:
        schedule_traces: dict = {}
        if module_source is not None:
            mod = module_source()
        else:
            mod = materialize(spec, problem, reference, schedule_traces)
        if schedule_traces:  # what a model's schedule_code did, as replayable traces
            res.extra["schedule_traces"] = schedule_traces
        laps.mark("module")  # a judge: waiting for the builder, then loading its JSON
    except MalformedCandidate as e:
        return _done(res.failure("parse_error", str(e)), laps)
    except DecisionError as e:
        return _done(res.failure("decision_error", str(e)), laps)
    except SignatureMismatch as e:
        return _done(res.failure("signature", str(e)), laps)
    try:
        check_signature(mod, problem, reference)
    except SignatureMismatch as e:
        return _done(res.failure("signature", str(e)), laps)
    try:  # nothing of the candidate is built before its IR is verified (harness/verify.py)
        verify_module(mod, reference.module)
        verify_target_attrs(target_attrs)
    except ForbiddenConstruct as e:
        return _done(res.failure("forbidden", str(e)), laps)
    laps.mark("verify")
    if proxies:  # built and loaded in the runner; the judge never runs the candidate's code
        proxy = proxies.pop("candidate")
        if oracle is None:
            return _done(res.failure("infra", oracle_error), laps)
        res.oracle = oracle.name
        try:
            library, compile_s = _compile_kernels(job, mod, backend, target_attrs, res)
            laps.mark("compile_kernels")
            res.compile_seconds, _ = proxy.load(mod, target_attrs, library)
            laps.mark("runner_load")
            res.compile_seconds += compile_s
        except ToolchainMissing as e:
            return _done(res.failure("infra", str(e)), laps)
        except CandidateBuildError as e:
            return _done(res.failure("compile_error", str(e)), laps)
        except (KernelFault, GraphError) as e:
            res.compiled = True
            return _done(res.failure(getattr(e, "reason", "signature"), str(e)), laps)
        except RuntimeError as e:
            res.compiled = True
            return _done(res.failure("runtime_error", "main_transform_params: " + str(e)), laps)
        res.compiled = True
        return _judge(job, res, proxy, problem, oracle, session, proxies, backend, laps, plan)
    try:
        built = backend.build(mod, target_attrs)
    except ToolchainMissing as e:  # this machine's fault, not the candidate's
        return _done(res.failure("infra", str(e)), laps)
    except Exception as e:
        return _done(res.failure("compile_error", last_line(e) + "\n" + str(e)[-3000:]), laps)
    res.compiled, res.compile_seconds = True, built.seconds
    laps.mark("build")
    res.extra.update(getattr(built, "extra", None) or {})  # e.g. the generated device source (GPU)
    if not backend.profile.can_check:
        res.timing_status = "compile-only"
        return _done(
            res.failure(
                "not_checked",
                f"{backend.name}: compiled; correctness not checked: no device to run on here "
                f"(run = {backend.profile.run})",
            ),
            laps,
        )

    if oracle is None:
        return _done(res.failure("infra", oracle_error), laps)
    res.oracle = oracle.name
    try:
        runner = Runner(mod, built, session, reference)
    except (KernelFault, GraphError) as e:
        raise_device_failure(session, e)
        return _done(res.failure(getattr(e, "reason", "signature"), str(e)), laps)
    except Exception as e:
        raise_device_failure(session, e)
        return _done(res.failure("runtime_error", "main_transform_params: " + last_line(e)), laps)
    laps.mark("load")
    return _judge(job, res, runner, problem, oracle, session, baselines, backend, laps, plan)


class TimedCallWrong(Exception):
    """A checked timed call's outputs differ from the oracle's (`reason`: a FAIL_REASONS value)."""

    def __init__(self, reason: str, detail: str):
        self.reason = reason
        super().__init__(detail)


CHECKED_ROUNDS = 3  # rounds before which a timed call is checked, besides the first and the last
STATELESS_ROUNDS, STATELESS_BUDGET_S = 15, 0.25  # the stateless timing: rounds, ~seconds in all


class TimedChecks:
    """What the judge checks between the timing's rounds (harness/timing.time_interleaved `between`): that
    nothing main owns changed (its constants, weights, bound inputs: every round), and the outputs of one
    timed call, against the oracle's for that call's inputs, before the first round, after the last and
    before CHECKED_ROUNDS rounds drawn from the judgment's seed -- each after the previous call's outputs
    were overwritten with a fresh sentinel (harness/runner.py). A kernel that changes what it computes
    after some calls, or on inputs it has seen, fails here."""

    def __init__(self, proxy: RunnerProxy, expected: list[list[np.ndarray]], problem, rng, rounds: int):
        self.proxy, self.expected, self.problem, self.rng = proxy, expected, problem, rng
        later = list(range(1, rounds))
        picks = rng.choice(later, size=min(CHECKED_ROUNDS, len(later)), replace=False) if later else []
        self.rounds = {0, *(int(r) for r in picks)}
        self.checked: list[dict] = []
        self.state_checks = 0

    def __call__(self, r: int | None) -> None:
        self.proxy.verify_state()
        self.state_checks += 1
        if r is None or r in self.rounds:
            self.check("after the last round" if r is None else f"before round {r}")

    def check(self, where: str) -> None:
        """One checked call, on an input set the judge picks: the next one in turn or the one after (never
        the set of the call just made), so every set gets checked whatever the calls per round."""
        n = len(self.expected)
        k = (self.proxy.next_set + int(self.rng.integers(0, 2 if n > 2 else 1))) % n
        outs = self.proxy.check(int(self.rng.integers(2**62)), k)
        reason, detail, _, _ = _compare(outs, self.expected[k], self.problem.atol, self.problem.rtol)
        self.checked.append({"where": where, "input_set": k, "ok": reason is None})
        if reason:
            raise TimedCallWrong(reason, f"a timed call ({where}, input set {k}): {detail}")

    def record(self) -> dict:
        return {"calls_checked": self.checked, "state_checks": self.state_checks}


def _judge(job, res, runner, problem, oracle, session, baselines, backend, laps, plan: InputPlan) -> Result:
    """Correctness against the oracle, then the timing protocol, for a loaded candidate (`runner`: an
    in-process Runner, or a RunnerProxy to the candidate's own process) against the baselines (name ->
    a RunnerProxy of that baseline's runner on this machine's CPU, or a loader of an in-process Runner:
    `_loader`)."""
    from ..baselines import ort_isa
    from ..baselines.onnxruntime import ort_contender

    res.correctness = check_correctness(runner, problem, oracle, plan)
    laps.mark("correctness")
    if not res.correctness.correct:
        return _done(res.failure(res.correctness.reason or "wrong_output", res.correctness.detail), laps)
    res.correct, res.reason = True, None

    if not job.measure:
        res.timing_status = "skipped: measurement off"
        return _done(res, laps)
    if not backend.profile.can_time:
        res.timing_status = "not measured"  # emulated: timings are not speed
        return _done(res, laps)
    cfg = TimingConfig(**job.timing)
    sets = plan.timing_sets()
    checks = None
    if isinstance(runner, RunnerProxy):  # this machine's CPU: every TVM contender through its runner
        lib, why = job.call_loop_lib, job.call_loop_unavailable
        contenders = {"candidate": runner.bind(sets, lib, why)}
        for name, proxy in baselines.items():
            contenders[name] = proxy.bind(sets, lib, why)
        checks = TimedChecks(runner, [oracle.run(s) for s in sets], problem, plan.schedule_rng(), cfg.rounds)
        res.extra["timed_calls"] = {"input_sets": len(sets), "loop": contenders["candidate"].how}
        baseline_runners = baselines
    else:  # a device's own timer, on one input set
        contenders = {"candidate": runner.timer(sets[0])}
        baseline_runners = {name: load() for name, load in baselines.items()}
        for name, runner_b in baseline_runners.items():
            contenders[name] = runner_b.timer(sets[0])
        res.extra["timed_calls"] = {
            "input_sets": 1,
            "loop": f"the {backend.profile.kind} backend's own timer",
        }
    if "onnxruntime" in job.baselines and backend.profile.kind == "gpu":
        res.extra["not_measured"] = {
            "onnxruntime": "not on a GPU backend: the ORT baseline runs on a CPU (its CUDA provider "
            "is not wired), so it would not be this device's runtime"
        }
    elif "onnxruntime" in job.baselines and backend.profile.run == "remote":
        # on the device, through `ekb farm server`'s functions, when its server has them
        from ..baselines.onnxruntime import ORTUnavailable, remote_ort_timer

        try:
            contenders["onnxruntime"], version, how = remote_ort_timer(
                session.connect(), problem, sets[0], job.threads
            )
            res.extra.update(onnxruntime_on="device", onnxruntime_version=version, onnxruntime_timer=how)
        except ORTUnavailable as e:
            if e.__cause__ is not None:  # a remote call failed: the device's fault, or ORT's
                raise_device_failure(session, e.__cause__)
            res.extra["not_measured"] = {"onnxruntime": str(e)}
    elif "onnxruntime" in job.baselines:
        # a C loop over RunWithBinding (the library the parent built), else Python I/O binding; the
        # input sets in turn, as the TVM contenders take them
        contenders["onnxruntime"], how = ort_contender(
            problem, sets if checks else sets[0], job.threads, job.ort_timer_lib, job.ort_timer_unavailable
        )
        res.extra.update(onnxruntime_on="host", onnxruntime_timer=how, onnxruntime_isa=ort_isa.applied())
    laps.mark("timers")
    try:
        if checks is not None:
            checks.check("the first timed call")
        timings = _time_here(contenders, job, backend, res, [runner, *baselines.values()], checks)
    except TimedCallWrong as e:
        res.correct = False
        return _done(res.failure(e.reason, str(e)), laps)
    except KernelFault as e:  # the runner found main's constants, weights or inputs changed
        res.correct = False
        return _done(res.failure(e.reason, str(e)), laps)
    finally:
        if checks is not None:
            res.extra["timed_calls"].update(checks.record())
    laps.mark("timing")
    res.runtime = timings.pop("candidate")
    if checks is not None:  # what its kernels cost with nothing left from an earlier call (harness/api.py)
        rounds = int(min(STATELESS_ROUNDS, max(5, STATELESS_BUDGET_S / max(2 * res.runtime.median, 1e-9))))
        res.stateless = StatelessTiming.from_dict(runner.stateless(rounds))
        laps.mark("stateless")
    res.baselines = timings
    for n, t in timings.items():
        if res.runtime.median > 0:
            s, lo, hi = paired_speedup(t, res.runtime)
            res.speedups[n], res.speedup_ci[n] = s, [lo, hi]
    res.timing_status = "measured"
    if "onnxruntime" in res.baselines and res.extra.get("onnxruntime_on") != "device":
        res.extra["onnxruntime_output"] = _ort_output(problem, oracle, sets[0], job.threads)
    if job.confirm:  # a fresh judge of an implausibly fast result (harness/api.py check_plausible)
        try:
            res.extra["confirm"] = runner.poisoned_time(sets[0])
        except NotImplementedError as e:
            res.extra["confirm"] = {"seconds": None, "why": str(e)}
    if job.profile:
        rounds = max(3, job.timing["rounds"] // 3)  # kernels side by side: no pair to resolve
        profile_cfg = TimingConfig(**{**job.timing, "rounds": rounds, "max_rounds": 0})
        only = list(job.profile) if isinstance(job.profile, list) else None
        res.kernels = kernel_times(runner.profile(sets[0], profile_cfg, only))
        laps.mark("profile")
        for name, runner_b in baseline_runners.items() if only is None else ():
            res.baseline_kernels[name] = kernel_times(runner_b.profile(sets[0], profile_cfg))
    return _done(res, laps)


def _kernel_dir() -> Path:
    """Where a judge with a kernel cache links its candidate's kernels: in its job directory (its temporary
    directory: harness/worker.py), a folder its runner may read."""
    return Path(tempfile.gettempdir()) / "kernels"


def _runner_sandbox(job: Job) -> dict | None:
    """The runner's Landlock rules: the judge's reads (and no writes: harness/runner.py), plus the folder
    of its linked kernels when the judge compiles them (`_compile_kernels`)."""
    if not job.sandbox:
        return job.sandbox
    _kernel_dir().mkdir(exist_ok=True)
    return {**job.sandbox, "read": [*job.sandbox["read"], str(_kernel_dir())]}


def _compile_kernels(job: Job, mod, backend, target_attrs, res: Result) -> tuple[str | None, float]:
    """(library, seconds): the candidate's kernels compiled here, from the module this judge verified, each
    once per warm judge (backends/kernel_cache.py; a judge without one keeps a cache of its own for this
    judgment), into a library file: the runner that loads it can take its kernels' workspace
    (backends/call_loop.take_workspace), which it cannot of a module it builds itself. (None, 0): the
    runner builds the module whole. Raises CandidateBuildError when a kernel does not compile; where the
    cache cannot be written or linked, the runner builds the module whole (extra["kernel_cache"] says
    why)."""
    from ..backends.kernel_cache import CacheUnavailable, compile_kernels

    _kernel_dir().mkdir(exist_ok=True)
    cache = Path(job.kernel_cache) if job.kernel_cache else _kernel_dir() / "cache"
    if not job.kernel_cache:
        cache.mkdir(exist_ok=True)
    try:
        got = compile_kernels(mod, backend.target(target_attrs), cache, _kernel_dir())
    except CacheUnavailable as e:
        res.extra["kernel_cache"] = {"unused": str(e)}
        return None, 0.0
    except Exception as e:
        raise CandidateBuildError(last_line(e) + "\n" + str(e)[-3000:]) from None
    if got is None:
        return None, 0.0
    library, seconds, counts = got
    res.extra["kernel_cache"] = counts
    return str(library), seconds


def _loader(mod, built, session, reference) -> Callable[[], Runner]:
    """A baseline's in-process Runner (a device's backend), loaded when first asked for."""
    return lambda: Runner(mod, built, session, reference)


def _time_here(contenders: dict, job: Job, backend, res: Result, runners=(), checks=None) -> dict:
    """The timing protocol (`checks`: between its rounds, harness.timing.time_interleaved); on this
    machine (a local backend) with one thread, the timing thread is pinned to its CPU first, and so are the
    runners (`runners`: the contenders' processes), and what else the machine did meanwhile is recorded in
    Result.timing_env."""
    cfg = TimingConfig(**job.timing)
    if backend.profile.run != "local":  # timed on a device: this machine's load is not its load
        return time_interleaved(contenders, cfg)
    pinned = pin_thread() if job.threads == 1 else None
    if pinned is not None:  # every contender's process runs on the same CPU
        for runner in runners:
            if hasattr(runner, "pin"):
                runner.pin(pinned)
    with MachineWatch() as watch:
        timings = time_interleaved(contenders, cfg, between=checks)
    measured = getattr(contenders.get("candidate"), "measured", None)  # timed in its own process
    env = {**watch.summary(), "pinned_cpu": pinned, **(measured() if measured is not None else {})}
    res.timing_env = TimingEnv.from_dict(env)
    return timings


def _ort_output(problem, oracle, inputs: dict, threads: int) -> dict:
    """Whether the ONNX Runtime baseline's own output matches the oracle on the timing inputs (its
    8-bit integer GEMM is inexact on some CPUs): its timing then is that of a wrong result."""
    from ..oracle import ort_output_check

    try:
        return ort_output_check(problem, oracle, inputs, threads)
    except Exception as e:  # the timing stands; the check could not be made
        log.warning("%s: ONNX Runtime's output not checked: %s", problem.id, last_line(e))
        return {"matches_oracle": None, "oracle": oracle.name, "error": last_line(e)}


class Laps:
    """A judgment's phases, each one's seconds since the previous mark: the judge's own cost, where it goes
    (extra["phases"]; the parent adds its waits: harness/isolation.py)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.start = self.last = time.perf_counter()

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now - self.last, 4)
        self.last = now


def _done(res: Result, laps: Laps) -> Result:
    laps.mark("rest")
    res.eval_seconds = laps.last - laps.start
    res.extra["phases"] = laps.seconds
    return res
