"""onnxruntime: the vendor runtime baseline, full graph optimizations, the backend's thread count.

On the host, `ort_timer` runs it in this process. On a remote device, `remote_ort_timer` runs it on the
device through the EKB functions of `ekb farm server` (backends/farm_server.py): the model and the inputs
are sent once, and each call of the timer runs the session `number` times on the device and returns the
device's seconds per call, as the remote time_evaluator does for TVM code."""

from __future__ import annotations

import io

from ..errors import last_line
from ..harness.timing import python_timer
from ..oracle import ort_session

NO_EKB_FUNCTIONS = "the device's RPC server has no EKB functions: start it with `ekb farm server`"
NO_ORT = "onnxruntime is not installed on the device"


class ORTUnavailable(Exception):
    """ONNX Runtime cannot be timed on the device; str(e) is the one-line reason. A failure of a remote
    call is chained as __cause__ (it may be the device's, see RPCSession.diagnose)."""


def ort_timer(problem, inputs: dict, threads: int):
    sess = ort_session(problem.model, threads=threads, optimize=True)
    names = [o.name for o in sess.get_outputs()]
    sess.run(names, inputs)
    return python_timer(lambda: sess.run(names, inputs))


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
    np.savez(buf, **{k: np.ascontiguousarray(v) for k, v in arrays.items()})
    return buf.getvalue()


def remote_ort_timer(remote, problem, inputs: dict, threads: int):
    """(run, onnxruntime's version there): a contender run(number) -> seconds per call timing ONNX
    Runtime on the device of the RPC session `remote`, with the local baseline's session options and
    `threads` threads. Raises ORTUnavailable
    when the device cannot: its server has no EKB functions, onnxruntime is missing there, or it
    cannot run the model."""
    version = device_ort_version(remote)
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

    return run, version
