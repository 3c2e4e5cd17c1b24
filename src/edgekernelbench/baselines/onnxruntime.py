"""onnxruntime: the vendor runtime baseline, full graph optimizations, the backend's thread count.

On the host, `ort_contender` times it in this process the way a deployed C/C++ program runs it: a C loop
over `RunWithBinding` with inputs and outputs bound once (the native timer, ort_native.py), as TVM's own
C++ timer runs the candidate. When the native timer is not available, or its one checked run does not
give the Python session's outputs, it falls back to Python with I/O binding (`iobinding_timer`) and says
why. On a remote device, `remote_ort_timer` runs it on the device through the EKB functions of `ekb farm
server` (backends/farm_server.py): the model and the inputs are sent once, and each call of the timer
runs the session `number` times on the device (a Python loop over `run_with_iobinding` there: no C
compiler is assumed on a board) and returns the device's seconds per call, as the remote time_evaluator
does for TVM code."""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable

from ..errors import last_line
from ..onnxrt import ort_session

log = logging.getLogger(__name__)

NO_EKB_FUNCTIONS = "the device's RPC server has no EKB functions: start it with `ekb farm server`"
NO_ORT = "onnxruntime is not installed on the device"

# how ONNX Runtime was timed (Result.extra["onnxruntime_timer"]["timer"])
NATIVE = "native"  # C loop over RunWithBinding, I/O bound (ort_native.py)
PY_IOBINDING = "python-iobinding"  # Python loop over run_with_iobinding, I/O bound
PY_RUN = "python-run"  # Python loop over session.run (feeds and fetches converted on every call)


def python_timer(fn: Callable[[], object]) -> Callable[[int], float]:
    """Wraps a Python callable (e.g. an ONNX Runtime session run) as a contender."""

    def run(number: int) -> float:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        return (time.perf_counter() - t0) / number

    return run


class ORTUnavailable(Exception):
    """ONNX Runtime cannot be timed on the device; str(e) is the one-line reason. A failure of a remote
    call is chained as __cause__ (it may be the device's, see RPCSession.diagnose)."""


def session_run_timer(sess, inputs: dict):
    """A contender: `sess.run` from a Python loop (for comparison only: it times Python as well)."""
    names = [o.name for o in sess.get_outputs()]
    sess.run(names, inputs)
    return python_timer(lambda: sess.run(names, inputs))


def _sets(inputs: dict | list[dict]) -> list[dict]:
    return [inputs] if isinstance(inputs, dict) else list(inputs)


def iobinding_timer(sess, inputs: dict | list[dict], expected: list):
    """A contender: `sess.run_with_iobinding` from a Python loop, one binding per input set (a list of
    sets: the runs take them in turn), the outputs preallocated (like `expected`, the session's outputs
    for the first set) and bound once."""
    import numpy as np
    import onnxruntime as ort

    outs = [ort.OrtValue.ortvalue_from_numpy(np.empty_like(e)) for e in expected]
    bindings = []
    for feeds in _sets(inputs):
        binding = sess.io_binding()
        for name, arr in feeds.items():
            binding.bind_cpu_input(name, np.asarray(arr, order="C"))
        for o, value in zip(sess.get_outputs(), outs, strict=True):
            binding.bind_ortvalue_output(o.name, value)
        sess.run_with_iobinding(binding)
        bindings.append(binding)
    state = {"next": 0}

    def one():
        k = state["next"]
        state["next"] = (k + 1) % len(bindings)
        sess.run_with_iobinding(bindings[k])

    return python_timer(one)


def native_timer(
    lib: str, model_bytes: bytes, inputs: dict | list[dict], expected: list, names: list, threads: int
):
    """A contender: the native timer (ort_native.NativeORTTimer) over the input sets `inputs` in turn,
    trusted only after its runs give exactly `expected` (the Python session's outputs, same options: a
    list per set, or one list for one set) in outputs filled beforehand with two different byte patterns:
    a C API slot that does not do what the C file assumes fails here, not in the timings. Raises
    NativeTimerError."""
    import numpy as np

    from .ort_native import NativeORTTimer, NativeTimerError

    sets = _sets(inputs)
    wanted = [expected] if isinstance(inputs, dict) else expected
    outs = {n: np.empty_like(e) for n, e in zip(names, wanted[0], strict=True)}
    feeds = [{k: np.asarray(v, order="C") for k, v in one.items()} for one in sets]
    timer = NativeORTTimer(lib, model_bytes, feeds, outs, threads)
    for pattern in (0xA5, 0x5A):
        for want in wanted:  # run_once takes the sets in turn, from the first
            for o in outs.values():
                o.view(np.uint8).fill(pattern)
            timer.run_once()
            for n, e in zip(names, want, strict=True):
                got = outs[n]
                same = got.shape == e.shape and got.dtype == e.dtype
                if same:
                    same = np.array_equal(got, e, equal_nan=got.dtype.kind in "fc")
                if not same:
                    timer.close()
                    raise NativeTimerError(
                        f"the native timer's output {n} differs from the Python session's (onnxruntime "
                        f"{timer.version}): not trusted"
                    )
    return timer.run


def ort_contender(
    problem, inputs: dict | list[dict], threads: int, native_lib: str | None, unavailable: str = ""
):
    """(run, how): the ONNX Runtime contender on this host and how it is timed, for the record:
    {"timer": NATIVE, "library": path} or {"timer": PY_IOBINDING, "why": why the native timer is not
    used}. `inputs`: one input set, or several that the runs take in turn (as the judge's timed calls of
    every contender do). `native_lib`: the native timer library the parent built (None: `unavailable`
    says why)."""
    from .ort_native import NativeTimerError

    sess = ort_session(problem.model, threads=threads, optimize=True)
    names = [o.name for o in sess.get_outputs()]
    sets = _sets(inputs)
    expected = [sess.run(names, one) for one in sets]
    if native_lib:
        try:
            model = problem.model.SerializeToString()
            run = native_timer(native_lib, model, sets, expected, names, threads)
            return run, {"timer": NATIVE, "library": str(native_lib), "input_sets": len(sets)}
        except NativeTimerError as e:
            why = str(e)
    else:
        why = unavailable or "no native timer library was given to the worker"
    log.warning("ONNX Runtime timed from Python (I/O binding): %s", why)
    how = {"timer": PY_IOBINDING, "why": why, "input_sets": len(sets)}
    return iobinding_timer(sess, sets, expected[0]), how


def _remote_function(remote, name: str):
    try:
        return remote.get_function(name)
    except AttributeError:  # "Module has no function '...'": a plain `python -m tvm.exec.rpc_server`
        raise ORTUnavailable(NO_EKB_FUNCTIONS) from None


def device_ort_version(remote) -> str:
    """onnxruntime's version on the device of the RPC session `remote`; raises ORTUnavailable."""
    version = _remote_function(remote, "ekb.ort.version")
    try:
        v = str(version())
    except Exception as e:  # onnxruntime is there but does not import
        raise ORTUnavailable(
            f"onnxruntime does not load on the device: {last_line(e, 300, with_type=False)}"
        ) from e
    if not v:
        raise ORTUnavailable(NO_ORT)
    return v


def npz_bytes(arrays: dict) -> bytes:
    import numpy as np

    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v, order="C") for k, v in arrays.items()})
    return buf.getvalue()


def remote_ort_timer(remote, problem, inputs: dict, threads: int):
    """(run, onnxruntime's version there, how): a contender run(number) -> seconds per call timing ONNX
    Runtime on the device of the RPC session `remote`, with the local baseline's session options and
    `threads` threads, and how the device times it, for the record ({"timer": PY_IOBINDING, "on":
    "device"}; PY_RUN from an older `ekb farm server`). Raises ORTUnavailable
    when the device cannot: its server has no EKB functions, onnxruntime is missing there, or it
    cannot run the model."""
    version = device_ort_version(remote)
    try:
        how = {"timer": str(_remote_function(remote, "ekb.ort.timer")()), "on": "device"}
    except ORTUnavailable:  # a farm server from before I/O binding: it still times session.run
        how = {"timer": PY_RUN, "on": "device", "why": "the device's ekb farm server predates ekb.ort.timer"}
    load = _remote_function(remote, "ekb.ort.load")
    set_inputs = _remote_function(remote, "ekb.ort.set_inputs")
    run_remote = _remote_function(remote, "ekb.ort.run")
    try:
        handle = int(load(problem.model.SerializeToString(), int(threads)))
        set_inputs(handle, npz_bytes(inputs))
    except Exception as e:
        raise ORTUnavailable(
            f"onnxruntime {version} on the device cannot run the model: {last_line(e, 300, with_type=False)}"
        ) from e

    def run(number: int) -> float:
        return float(run_remote(handle, int(number)))

    return run, version, how
