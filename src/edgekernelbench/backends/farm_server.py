"""The device side of `ekb farm server`: TVM's RPC server (as `python -m tvm.exec.rpc_server`) plus a few
EKB functions, so that the harness can time ONNX Runtime on the device itself:

    python -m edgekernelbench.backends.farm_server --host H --port P --port-end E --tracker T --key K

The functions are registered by `tvm.rpc.Server`'s server_init_callback in the server's process, before
it serves; each RPC session is a forked child of that process, so a client calls them with
`remote.get_function(name)`. Their state (ONNX Runtime sessions) lives in the session's process and
ends with it. The API:

    ekb.device_info() -> str               JSON: tvm and onnxruntime versions, machine, OS, Python, CPUs
    ekb.ort.version() -> str               onnxruntime's version; "" when it is not installed here
    ekb.ort.load(model: bytes, threads: int) -> int
                                           an InferenceSession of the serialized ONNX model, with the
                                           options of the local baseline (onnxrt.ort_session, optimize)
    ekb.ort.set_inputs(handle: int, npz: bytes) -> None
                                           the feeds (an .npz of input name -> array), bound to the
                                           session once with preallocated outputs (I/O binding); runs once
    ekb.ort.run(handle: int, number: int) -> float
                                           seconds per call over `number` back-to-back runs: a Python
                                           loop over run_with_iobinding (no C compiler is assumed here)
    ekb.ort.timer() -> str                 how ekb.ort.run times: "python-iobinding"

A session whose process dies (a candidate that crashes it) no longer stops the server: TVM 0.27's plain
rpc_server stops serving for good then; here the server logs it and serves the next session.

This file runs on the board and needs only tvm and numpy there (onnxruntime to time it): it imports
nothing else of edgekernelbench, so it also runs as a copied single file (`python farm_server.py ...`,
without `ekb farm server`'s restart after a crashed session). A session that the server does not fork
(TVM's --no-fork) would not see the functions, so there is no such option here.
"""

from __future__ import annotations

import argparse
import io
import logging
import multiprocessing
import time

FUNCTIONS = (
    "ekb.device_info",
    "ekb.ort.version",
    "ekb.ort.load",
    "ekb.ort.set_inputs",
    "ekb.ort.run",
    "ekb.ort.timer",
)
ORT_TIMER = "python-iobinding"

_SESSIONS: dict[int, list] = {}  # handle -> [InferenceSession, output names, IOBinding or None]


def ort_session_options(ort, threads: int, optimize: bool = True):
    """ONNX Runtime's session options for the baseline (optimize: all graph optimizations) and for the
    oracle (none), here and on the host (edgekernelbench.onnxrt.ort_session uses this function)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = int(threads)
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    # no busy-waiting pool threads between runs: they would slow the TVM code timed in turn with ORT
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    return so


def device_info() -> str:
    """What the device is, as JSON: TVM's version (the host checks it matches its own), the machine,
    the OS, Python, the CPU count, onnxruntime's version ("" when not installed)."""
    import json
    import os
    import platform

    import tvm

    try:
        ort = ort_version()
    except ImportError as e:
        ort = f"broken: {e}"
    return json.dumps(
        {
            "tvm": str(tvm.__version__),
            "machine": platform.machine(),
            "system": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "onnxruntime": ort,
        }
    )


def ort_version() -> str:
    try:
        import onnxruntime
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] != "onnxruntime":
            raise  # onnxruntime is there but one of its dependencies is not: say so
        return ""
    return str(onnxruntime.__version__)


def ort_load(model, threads) -> int:
    import onnxruntime as ort

    sess = ort.InferenceSession(
        bytes(model), ort_session_options(ort, threads), providers=["CPUExecutionProvider"]
    )
    handle = max(_SESSIONS, default=0) + 1
    _SESSIONS[handle] = [sess, [o.name for o in sess.get_outputs()], None]
    logging.getLogger("RPCServer").info(
        "ekb.ort.load: onnxruntime %s session %d, model of %d bytes, %d thread(s)",
        ort.__version__,
        handle,
        len(model),
        int(threads),
    )
    return handle


def _entry(handle) -> list:
    try:
        return _SESSIONS[int(handle)]
    except KeyError:
        raise ValueError(f"no ONNX Runtime session {handle} in this RPC session") from None


def ort_set_inputs(handle, npz) -> None:
    import numpy as np
    import onnxruntime as ort

    entry = _entry(handle)
    sess, names = entry[0], entry[1]
    with np.load(io.BytesIO(bytes(npz)), allow_pickle=False) as data:
        feeds = {name: np.asarray(data[name], order="C") for name in data.files}
    outs = sess.run(names, feeds)  # once: a wrong feed fails here, not while timing
    # bound once, as a deployed program does: the timed loop converts no feeds and allocates no outputs
    binding = sess.io_binding()
    for name, arr in feeds.items():
        binding.bind_cpu_input(name, arr)
    for name, out in zip(names, outs, strict=True):
        binding.bind_ortvalue_output(name, ort.OrtValue.ortvalue_from_numpy(np.empty_like(out)))
    sess.run_with_iobinding(binding)
    entry[2] = binding


def ort_run(handle, number) -> float:
    sess, _, binding = _entry(handle)
    if binding is None:
        raise ValueError(f"ONNX Runtime session {handle} has no inputs (ekb.ort.set_inputs)")
    n = max(1, int(number))
    t0 = time.perf_counter()
    for _ in range(n):
        sess.run_with_iobinding(binding)
    return (time.perf_counter() - t0) / n


def ort_timer() -> str:
    return ORT_TIMER


def _surviving(serving):
    """TVM 0.27's `_serving` raises when a session's process died (a kernel that segfaults), which ends
    the server's listen loop for good: the device drops off the farm. This wrapper logs it and returns,
    so the loop serves the next session at once."""
    import os

    def serve(sock, addr, opts, load_library):
        cwd = os.getcwd()
        try:
            serving(sock, addr, opts, load_library)
        except RuntimeError as e:
            logging.getLogger("RPCServer").warning(
                "%s: %s; serving on", SESSION_DIED, str(e).split(" with ")[-1]
            )
            os.chdir(cwd)
            sock.close()

    serve.ekb_surviving = True
    return serve


SESSION_DIED = "ekb farm server: a session's process died"


def register() -> None:
    """The server_init_callback: registers the EKB functions in the server's process, and keeps its
    listen loop alive when a session's process dies (see _surviving)."""
    import tvm_ffi
    from tvm.rpc import server

    funcs = (device_info, ort_version, ort_load, ort_set_inputs, ort_run, ort_timer)
    for name, f in zip(FUNCTIONS, funcs, strict=True):
        tvm_ffi.register_global_func(name, f, override=True)
    if not getattr(server._serving, "ekb_surviving", False):
        server._serving = _surviving(server._serving)
    # Sessions must be forked from this process to see the functions (Python 3.14 defaults to forkserver).
    if "fork" in multiprocessing.get_all_start_methods():
        multiprocessing.set_start_method("fork", force=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m edgekernelbench.backends.farm_server",
        description="TVM's RPC server with EdgeKernelBench's device functions (ONNX Runtime timing).",
    )
    parser.add_argument("--host", default="0.0.0.0", help="Address to listen on.")
    parser.add_argument("--port", type=int, default=9090, help="First port tried.")
    parser.add_argument("--port-end", type=int, default=9199, help="Last port tried + 1.")
    parser.add_argument("--tracker", help="The RPC tracker, HOST:PORT.")
    parser.add_argument("--key", default="", help="The device key registered with the tracker.")
    parser.add_argument("--custom-addr", help="The address reported to the tracker.")
    parser.add_argument("--load-library", help="Additional libraries to load (':'-separated).")
    parser.add_argument("--silent", action="store_true", help="Log errors only.")
    args = parser.parse_args(argv)
    tracker_addr = None
    if args.tracker:
        url, port = args.tracker.rsplit(":", 1)
        tracker_addr = (url, int(port))
        if not args.key:
            parser.error("--key is required with --tracker")
    logging.basicConfig(level=logging.INFO)

    from tvm import rpc

    server = rpc.Server(
        args.host,
        args.port,
        args.port_end,
        key=args.key,
        tracker_addr=tracker_addr,
        load_library=args.load_library,
        custom_addr=args.custom_addr,
        silent=args.silent,
        server_init_callback=register,
    )
    server.proc.join()


if __name__ == "__main__":
    main()
