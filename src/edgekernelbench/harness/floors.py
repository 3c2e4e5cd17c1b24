"""Timer floors: what each contender's timer costs around an (almost) empty kernel, in the worker.

A speedup on a problem that runs in a few microseconds is only meaningful above what the timers
themselves cost per call. `run_floors` (the worker's work for a Job with task "floors") times, with the
harness's protocol, an empty problem through exactly the timer each contender uses:

  tvm                           a Relax main calling one PrimFunc that copies one float32, built for the
                                backend, timed as the candidate and tvm-default are: on the host CPU by
                                the judge around requests to a runner process making its calls from C
                                over rotated input sets (harness/runner.py), elsewhere by the device's
                                own timer;
  onnxruntime                   a one-node Identity model on one float32, timed as the ONNX Runtime
                                baseline is (the native C loop over RunWithBinding, or its fallback);
  onnxruntime-python-iobinding  the same model, a Python loop over run_with_iobinding (for comparison);
  onnxruntime-python-run        the same model, a Python loop over session.run (for comparison).

On a remote device the ONNX Runtime floor is the device's (Python, I/O binding); on a GPU backend only
TVM's floor is measured (the ONNX Runtime baseline is not measured there either)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from ..records import Result
from .job import Job
from .timing import TimingConfig, time_interleaved

PROBLEM = "floors"  # the Result's problem field
TVM = "tvm"
ORT = "onnxruntime"
ORT_IOBINDING = "onnxruntime-python-iobinding"
ORT_RUN = "onnxruntime-python-run"

DESCRIPTIONS = {
    TVM: "Relax main -> one 1-element copy PrimFunc, timed as the candidate is",
    ORT: "one-node Identity (1 float32), timed as the onnxruntime baseline",
    ORT_IOBINDING: "one-node Identity, Python loop over run_with_iobinding (inputs/outputs bound)",
    ORT_RUN: "one-node Identity, Python loop over session.run",
}


def floor_module():
    """Relax main(x: float32[1]) calling one PrimFunc that copies x: the least a candidate can be."""
    from tvm import relax, te

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1,), "float32"))
    with bb.function("main", [x]):
        y = bb.emit_te(lambda a: te.compute((1,), lambda i: a[i], name="copy"), x, primfunc_name_hint="copy")
        bb.emit_func_output(y)
    return bb.get()


def identity_model():
    """The one-node ONNX model Identity(x: float32[1])."""
    from ..problems.graph import GraphBuilder

    g = GraphBuilder("floor_identity")
    g.output(g.node("Identity", [g.input("x", (1,))]))
    return g.build()


def run_floors(job: Job) -> Result:
    """The worker's work for a floors job: res.baselines holds one Timing per floor (names above),
    res.extra["floors"] what each timed and res.extra["onnxruntime_timer"] how ONNX Runtime was timed."""
    import numpy as np

    from ..backends.gpu import DeviceUnavailable
    from ..backends.registry import backend_for
    from ..baselines.tvm_default import tvm_default_module

    t_start = time.perf_counter()
    backend = backend_for(job.resolved_profile(), tracker=job.tracker)
    if hasattr(backend, "session_timeout"):  # a remote device's session ends with the worker's limit
        backend.session_timeout = job.timeout_s
    res = Result(problem=PROBLEM, sample=0, backend=job.backend)
    if not backend.profile.can_time:
        return _done(
            res.failure("infra", f"{job.backend} cannot time here (run = {backend.profile.run})"), t_start
        )
    try:
        session = backend.session()
    except DeviceUnavailable as e:
        return _done(res.failure("infra", str(e)), t_start)
    gpu = backend.profile.kind == "gpu"
    mod = floor_module()
    if gpu:  # a GPU kernel needs its loops bound to threads: dlight's default schedule
        mod = tvm_default_module(mod, backend.target())
    built = backend.build(mod)
    res.compiled, res.compile_seconds = True, built.seconds
    x = np.ones((1,), dtype="float32")
    runners = []
    try:
        contenders = {TVM: _tvm_floor(job, backend, session, mod, built, x, runners)}
        if ORT in job.baselines:
            _ort_floors(job, backend, session, {"x": x}, contenders, res, gpu)
        timings = time_interleaved(contenders, TimingConfig(**job.timing))
    finally:
        for runner in runners:
            runner.close()
    res.baselines = timings
    res.extra["floors"] = {n: DESCRIPTIONS[n] for n in timings}
    res.correct, res.timing_status = True, "measured"
    return _done(res, t_start)


def _tvm_floor(job: Job, backend, session, mod, built, x, runners: list):
    """The TVM contender of the floor module: on this machine's CPU through a runner process, as the judge
    times the candidate (harness/evaluate.py), else the device's own timer."""
    from .evaluate import _on_host
    from .runner import start_runner

    if not _on_host(backend):
        return session.load(built).timer("main", [session.to_device(x)])
    reference = SimpleNamespace(problem_id=PROBLEM, module=mod, input_names=["x"], params=[])
    proxy, _ = start_runner(backend, session, reference, job.sandbox)
    runners.append(proxy)
    proxy.load(mod, {})
    sets = [{"x": x + k} for k in range(TimingConfig(**job.timing).input_sets)]
    return proxy.bind(sets, job.call_loop_lib, job.call_loop_unavailable)


def _ort_floors(job: Job, backend, session, inputs: dict, contenders: dict, res: Result, gpu: bool) -> None:
    from ..baselines.onnxruntime import (
        ORTUnavailable,
        iobinding_timer,
        ort_contender,
        remote_ort_timer,
        session_run_timer,
    )
    from ..onnxrt import ort_session

    model = SimpleNamespace(model=identity_model())
    if gpu:
        res.extra["not_measured"] = {
            ORT: "not on a GPU backend (the onnxruntime baseline is not measured there)"
        }
    elif backend.profile.run == "remote":
        try:
            contenders[ORT], version, how = remote_ort_timer(session.connect(), model, inputs, job.threads)
            res.extra.update(onnxruntime_on="device", onnxruntime_version=version, onnxruntime_timer=how)
        except ORTUnavailable as e:
            res.extra["not_measured"] = {ORT: str(e)}
    else:
        contenders[ORT], how = ort_contender(
            model, inputs, job.threads, job.ort_timer_lib, job.ort_timer_unavailable
        )
        res.extra.update(onnxruntime_on="host", onnxruntime_timer=how)
        sess = ort_session(model.model, threads=job.threads, optimize=True)
        expected = sess.run(None, inputs)
        contenders[ORT_IOBINDING] = iobinding_timer(sess, inputs, expected)
        contenders[ORT_RUN] = session_run_timer(ort_session(model.model, threads=job.threads), inputs)


def _done(res: Result, t_start: float) -> Result:
    res.eval_seconds = time.perf_counter() - t_start
    return res
