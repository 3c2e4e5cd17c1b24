"""Remote devices over TVM RPC: a tracker, and TVM's `rpc_server` on each board registered under the
profile's `rpc_key`. The harness judges a candidate on a remote device exactly as on the host:

- build here for the profile's target (host/cross CPU: LLVM for its triple; GPU: the GPU backend's
  build), export the Relax VM executable and the kernel library as shared objects (with the profile's
  `cross_compiler` for a cross target, the host compiler otherwise);
- request a device of the key from the tracker, upload, load; tensors live on the device;
- kernel by kernel: each kernel is a remote function called with remote tensors;
- whole graph: a Relax VM over the remote executable (`relax.VirtualMachine` works on an RPC module);
- timing: the remote `time_evaluator` (VM: set_input + invoke_stateful), under the harness's protocol.

Two TVM 0.27 RPC details shape this file. A tensor made by the client reaches the device as a borrowed
DLTensor view, valid for one call, so a tuple argument (e.g. `main_transform_params`' weights) cannot be
sent as a Python tuple: the elements are copied into the device's tensor cache and fetched back there as
one array of owned tensors (`pack`). And `rpc_server`'s serving loop stops for good when a session's
process dies (a candidate that segfaults): `ekb farm server`'s server (farm_server.py) keeps serving.

`ekb farm server` runs TVM's RPC server through backends/farm_server.py, which adds a few functions
(`ekb.ort.*`) so that the ONNX Runtime baseline is timed on the device too (baselines/onnxruntime.py).
A board that runs plain `python -m tvm.exec.rpc_server` judges candidates all the same; ONNX Runtime is
then not measured there.

A failure while a candidate runs remotely is classified by `RPCSession.diagnose`: a session that is
still alive -> the candidate's own error; the device ended the session at its time limit -> "timeout";
the session died but the device's server still answers -> "crash"; the device is gone -> "infra"
(retried on another device by the caller, never a wrong kernel).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..errors import EKBError, ToolchainMissing, last_line
from .base import Backend, BackendProfile, Built, DeviceFailure, Loaded, Session

log = logging.getLogger(__name__)

DEFAULT_TRACKER = "127.0.0.1:9190"
CONNECT_TIMEOUT_S = 5.0
PROBE_TIMEOUT_S = 3.0
PROBE_SETTLE_S = 1.0
# what `ekb farm server` runs: TVM's rpc_server plus the EKB functions (ONNX Runtime on the device)
SERVER_MODULE = "edgekernelbench.backends.farm_server"


class TrackerError(EKBError):
    """The tracker cannot be reached or does not speak the TVM tracker protocol."""


# ------------------------------------------------------------------------------------------ tracker
def default_tracker() -> str:
    return os.environ.get("EKB_TRACKER") or DEFAULT_TRACKER


def parse_tracker(addr: str | None) -> tuple[str, int]:
    """HOST:PORT (or :PORT / PORT for the loopback) -> (host, port)."""
    text = (addr or default_tracker()).strip()
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    try:
        port_n = int(port)
        if not 0 < port_n < 65536:
            raise ValueError
    except ValueError:
        raise TrackerError(f"bad tracker address '{text}': expected HOST:PORT, e.g. 127.0.0.1:9190") from None
    return host or "127.0.0.1", port_n


def format_addr(host: str, port: int) -> str:
    return f"{host}:{port}"


def _tracker_socket(addr: str | None) -> tuple[socket.socket, str]:
    from tvm.rpc import base

    host, port = parse_tracker(addr)
    where = format_addr(host, port)
    try:
        sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise TrackerError(
            f"cannot reach the RPC tracker at {where} ({why}); start one with `ekb farm tracker` "
            f"or point --tracker / EKB_TRACKER at it"
        ) from None
    try:
        sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
        magic = struct.unpack("<i", base.recvall(sock, 4))[0]
    except (OSError, RuntimeError) as e:
        sock.close()
        raise TrackerError(f"{where} is not a TVM RPC tracker ({e})") from None
    if magic != base.RPC_TRACKER_MAGIC:
        sock.close()
        raise TrackerError(f"{where} is not a TVM RPC tracker")
    return sock, where


def _call(sock: socket.socket, msg: list):
    from tvm.rpc import base

    base.sendjson(sock, msg)
    return base.recvjson(sock)


@dataclass
class FarmStatus:
    """The tracker's view: registered servers (key, address) and, per key, free and pending counts."""

    tracker: str
    servers: list[tuple[str, str]] = field(default_factory=list)
    queue: dict[str, dict] = field(default_factory=dict)

    def devices(self, key: str) -> int:
        return sum(1 for k, _ in self.servers if k == key)

    def free(self, key: str) -> int:
        return int(self.queue.get(key, {}).get("free", 0))

    def keys(self) -> list[str]:
        return sorted({k for k, _ in self.servers} | {k for k, q in self.queue.items() if q.get("pending")})

    def to_dict(self) -> dict:
        return {
            "tracker": self.tracker,
            "keys": {
                k: {
                    "devices": self.devices(k),
                    "free": self.free(k),
                    "pending": int(self.queue.get(k, {}).get("pending", 0)),
                    "servers": sorted(a for kk, a in self.servers if kk == k),
                }
                for k in self.keys()
            },
        }


def farm_status(addr: str | None = None) -> FarmStatus:
    from tvm.rpc import base

    sock, where = _tracker_socket(addr)
    try:
        value = _call(sock, [base.TrackerCode.SUMMARY])
    except (OSError, RuntimeError, ValueError) as e:
        raise TrackerError(f"the tracker at {where} did not answer ({e})") from None
    finally:
        sock.close()
    if value[0] != base.TrackerCode.SUCCESS:
        raise TrackerError(f"the tracker at {where} answered {value!r}")
    data = value[1]
    servers = []
    for item in data.get("server_info", []):
        key = str(item.get("key", ""))
        key = key.split(":", 1)[1] if key.startswith("server:") else key
        servers.append((key, ":".join(map(str, item.get("addr", [])))))
    return FarmStatus(where, servers, dict(data.get("queue_info", {})))


def remote_plan(profile: BackendProfile, tracker: str | None) -> tuple[str | None, int]:
    """Where the profile runs: (tracker address, devices registered under its key) when remotely,
    (None, 0) otherwise. A "remote" profile always runs remotely (default tracker when none is given);
    any other profile with an rpc_key does when a tracker is given and has a device for the key."""
    if not profile.rpc_key:
        if profile.run == "remote":
            raise EKBError(f"profile {profile.name} has run = 'remote' but no rpc_key")
        return None, 0
    if tracker is None and profile.run != "remote":
        return None, 0
    status = farm_status(tracker or default_tracker())
    n = status.devices(profile.rpc_key)
    if profile.run == "remote" or n > 0:
        return status.tracker, n
    log.info(
        "no device under key %s on %s: %s runs %s", profile.rpc_key, status.tracker, profile.name, profile.run
    )
    return None, 0


def remote_backend(profile: BackendProfile, tracker: str | None) -> RPCBackend | None:
    addr, _ = remote_plan(profile, tracker)
    return RPCBackend(profile, addr) if addr else None


def request_device(tracker: str, key: str, session_timeout: float, wait_s: float):
    """A session on a free device of `key`: (tvm RPCSession, the server's "host:port")."""
    from tvm import rpc
    from tvm.rpc import base

    status = farm_status(tracker)
    if status.devices(key) == 0:
        known = ", ".join(status.keys()) or "none"
        raise DeviceFailure(
            "infra",
            f"no device registered under key '{key}' on the tracker at {status.tracker} (keys: {known})",
        )
    sock, where = _tracker_socket(tracker)
    try:
        sock.settimeout(wait_s)
        value = _call(sock, [base.TrackerCode.REQUEST, key, "", 1])
    except TimeoutError:
        raise DeviceFailure(
            "infra", f"no device under key '{key}' became free within {wait_s:.0f} s", retry=True
        ) from None
    except (OSError, RuntimeError, ValueError) as e:
        raise DeviceFailure(
            "infra", f"the tracker at {where} failed a request for '{key}': {e}", retry=True
        ) from None
    finally:
        sock.close()
    if value[0] != base.TrackerCode.SUCCESS:
        raise DeviceFailure(
            "infra", f"the tracker at {where} answered {value!r} to a request for '{key}'", retry=True
        )
    host, port, matchkey = value[1]
    server = format_addr(host, port)
    try:
        remote = rpc.connect(host, port, matchkey, session_timeout=session_timeout)
    except Exception as e:
        raise DeviceFailure(
            "infra", f"cannot open a session on {key} at {server}: {last_line(e, 500)}", retry=True
        ) from None
    return remote, server


def device_info(remote) -> dict:
    """The device's `ekb.device_info` (TVM version, machine, ...) when its server is `ekb farm server`;
    {} for a plain `tvm.exec.rpc_server`."""
    try:
        f = remote.get_function("ekb.device_info")
    except AttributeError:
        return {}
    try:
        return json.loads(f())
    except Exception as e:
        log.info("ekb.device_info failed: %s", e)
        return {}


def _major_minor(version: str) -> str:
    return ".".join(str(version).split(".")[:2])


def check_tvm_version(info: dict, where: str) -> None:
    """A device whose TVM differs from this one's (major.minor) would fail in obscure ways (missing
    runtime functions, module formats): say so, as the device's fault, not the candidate's."""
    import tvm

    theirs = info.get("tvm")
    if theirs and _major_minor(theirs) != _major_minor(tvm.__version__):
        raise DeviceFailure(
            "infra",
            f"the device {where} runs TVM {theirs}, this machine {tvm.__version__}: install the same "
            f"TVM version on the board (pip install apache-tvm=={tvm.__version__})",
        )


def server_answers(server: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the device's RPC server still accepts connections (the process and its port are up)."""
    host, _, port = server.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
        return True
    except (OSError, ValueError):
        return False


# ------------------------------------------------------------------------------------------ backend
@dataclass
class RemoteBuilt(Built):
    """A build plus its shared objects for upload: `graph_path` (Relax VM executable), `kernels_path`."""

    graph_path: Path | None = None
    kernels_path: Path | None = None
    extra: dict = field(default_factory=dict)  # the inner build's extra (e.g. GPU device source)
    _tmp: object = None


class RPCBackend(Backend):
    """Builds here for the profile's target; runs on a device of the profile's rpc_key behind a tracker."""

    def __init__(self, profile: BackendProfile, tracker: str, session_timeout: float = 300.0):
        super().__init__(replace(profile, run="remote"))
        self.tracker = tracker
        self.session_timeout = session_timeout
        self._builder = self._make_builder()

    def _make_builder(self) -> Backend:
        if self.profile.kind == "gpu":
            from .gpu import GPUBackend

            return GPUBackend(self.profile)
        from .host import LocalBackend  # host and cross CPUs: a TVM runtime module for the target

        return LocalBackend(self.profile, separate_kernels=True)  # the device loads each library's file

    def target(self, extra_attrs=None):
        return self._builder.target(extra_attrs)

    def fcompile(self):
        """export_library's compiler: the profile's cross compiler for a cross target, else the default."""
        cc = self.profile.cross_compiler
        if self.profile.kind == "host" or not cc:
            return None
        import shutil

        from tvm.support import cc as tvm_cc

        path = shutil.which(cc)
        if not path:
            package = self.profile.toolchain_package
            pkg = f"the Debian package {package}" if package else cc
            raise ToolchainMissing(f"{cc} not found: install {pkg} (make toolchains)")
        return tvm_cc.cross_compiler(path)

    def build(self, mod, extra_attrs=None, stock: bool = False) -> RemoteBuilt:
        t0 = time.perf_counter()
        inner = self._builder.build(mod, extra_attrs, stock)
        if inner.kernels is None:
            raise EKBError(f"{self.name}: the build has no kernel library to run")
        tmp = tempfile.TemporaryDirectory(prefix=f"ekb-rpc-{self.name}-")
        graph_path, kernels_path = Path(tmp.name, "graph.so"), Path(tmp.name, "kernels.so")
        # a fresh fcompile per export: tvm.support.cc.cross_compiler's closure accumulates options
        inner.graph.export_library(str(graph_path), fcompile=self.fcompile())
        inner.kernels.export_library(str(kernels_path), fcompile=self.fcompile())
        return RemoteBuilt(
            inner.graph,
            inner.kernels,
            time.perf_counter() - t0,
            graph_path=graph_path,
            kernels_path=kernels_path,
            extra=dict(getattr(inner, "extra", None) or {}),
            _tmp=tmp,
        )

    def session(self) -> RPCSession:
        return RPCSession(self)


class RPCSession(Session):
    """A session on one remote device, requested from the tracker on first use."""

    def __init__(self, backend: RPCBackend):
        self.backend = backend
        self.remote = None
        self.server = ""  # the device's "host:port"
        self._device = None
        self._ids = itertools.count()
        self.info: dict = {}  # what `ekb farm server` says about the device (ekb.device_info)

    @property
    def key(self) -> str:
        return self.backend.profile.rpc_key or self.backend.name

    def connect(self):
        if self.remote is None:
            timeout = self.backend.session_timeout
            self.remote, self.server = request_device(
                self.backend.tracker, self.key, session_timeout=timeout, wait_s=max(10.0, timeout / 2)
            )
            profile = self.backend.profile
            self.info = device_info(self.remote)
            check_tvm_version(self.info, f"{self.key} at {self.server}")
            kind = str(profile.target.get("kind")) if profile.kind == "gpu" else "cpu"
            self._device = self.remote.device(kind, 0)
            # a board without the GPU (or a TVM runtime without it): the device's fault, not the kernel's
            if kind != "cpu" and not self._device.exist:
                raise DeviceFailure(
                    "infra",
                    f"the device under key '{self.key}' at {self.server} has no {kind} device (or its "
                    f"TVM runtime lacks {kind}); a {profile.name} candidate cannot run there",
                )
            self._set_threads(profile.threads)
        return self.remote

    def _set_threads(self, threads: int) -> None:
        """The remote runtime's thread pool gets the profile's threads, unless it has them already
        (e.g. the server runs with TVM_NUM_THREADS): reconfiguring also pins threads to (big) cores."""
        try:
            if int(self.remote.get_function("runtime.NumThreads")()) != threads:
                self.remote.get_function("runtime.config_threadpool")(1, threads)
        except Exception as e:
            log.info("thread pool on %s: %s", self.server, e)

    @property
    def device(self):
        self.connect()
        return self._device

    def to_device(self, array):
        import tvm

        return tvm.runtime.tensor(np.asarray(array, order="C"), self.device)

    def load(self, built: Built) -> Loaded:
        if not isinstance(built, RemoteBuilt):
            raise EKBError(f"{self.backend.name}: expected a remote build, got {type(built).__name__}")
        remote = self.connect()
        n = next(self._ids)
        names = []
        for path, stem in ((built.graph_path, "graph"), (built.kernels_path, "kernels")):
            name = f"ekb_{os.getpid()}_{n}_{stem}.so"
            remote.upload(str(path), target=name)
            names.append(name)
        return RPCLoaded(self, remote.load_module(names[0]), remote.load_module(names[1]))

    # -- tuples across the wire
    def pack(self, tensors) -> object:
        """A remote array of owned copies of `tensors` (remote tensors or arrays), built on the device."""
        import tvm

        remote = self.connect()
        prefix = f"__ekb_pack{next(self._ids)}"
        update = remote.get_function("vm.builtin.tensor_cache.update")
        items = []
        for i, t in enumerate(tensors):
            if isinstance(t, (tuple, list)):
                raise EKBError("nested tuple arguments cannot be passed to a remote device")
            if not isinstance(t, tvm.runtime.Tensor):
                t = self.to_device(t)
            update(f"{prefix}_{i}", t, True)
            items.append(f"{prefix}_{i}")
        arr = remote.get_function("vm.builtin.param_array_from_cache")(prefix, len(items))
        remove = remote.get_function("vm.builtin.tensor_cache.remove")
        for name in items:
            remove(name)
        return arr

    def unpack(self, value) -> list:
        """A VM result (a remote tensor, or a remote tuple of them) as a flat list of remote tensors."""
        import tvm

        if isinstance(value, tvm.runtime.Tensor):
            return [value]
        remote = self.connect()
        size = int(remote.get_function("ffi.ArraySize")(value))
        getitem = remote.get_function("vm.builtin.tuple_getitem")
        return [getitem(value, i) for i in range(size)]

    def describe(self) -> dict:
        if not self.server:
            return {}
        out = {"key": self.key, "server": self.server, "tracker": self.backend.tracker}
        if self.info:
            out["info"] = self.info
        return {"device": out}

    # -- failures
    def alive(self) -> bool:
        try:
            self.remote.get_function("runtime.NumThreads")()
            return True
        except Exception:
            return False

    def _server_stays_up(self) -> bool:
        """Whether the device's server answers, twice: a killed server's port may still accept
        connections for a moment while its processes die."""
        if not server_answers(self.server):
            return False
        time.sleep(PROBE_SETTLE_S)
        return server_answers(self.server)

    def diagnose(self, error: BaseException) -> DeviceFailure | None:
        if isinstance(error, DeviceFailure):
            return error
        if isinstance(error, ToolchainMissing):
            return DeviceFailure("infra", str(error))
        if self.remote is None:
            return None
        where = f"{self.key} at {self.server}"
        if "RPCSessionTimeoutError" in type(error).__name__ or "RPCSessionTimeoutError" in str(error):
            limit = self.backend.session_timeout
            return DeviceFailure("timeout", f"the device ({where}) ended the session after {limit:.0f} s")
        if self.alive():
            return None  # an ordinary error of the candidate's code; the session is fine
        if self._server_stays_up():
            return DeviceFailure(
                "crash",
                f"the remote session on {where} died while the device stayed up: the candidate crashed "
                f"it ({last_line(error, 500)})",
            )
        return DeviceFailure(
            "infra", f"lost the device {where} mid-run ({last_line(error, 500)})", retry=True
        )


class RPCLoaded(Loaded):
    def __init__(self, session: RPCSession, graph_mod, kernels_mod):
        from tvm import relax

        self.session = session
        self.device = session.device
        self.vm = relax.VirtualMachine(graph_mod, self.device)
        self.kernels = kernels_mod
        self._evaluators: dict = {}

    def _args(self, args):
        return [self.session.pack(a) if isinstance(a, (tuple, list)) else a for a in args]

    def call(self, fname, args):
        return self.session.unpack(self.vm[fname](*self._args(args)))

    def _evaluator(self, key, make):
        if key not in self._evaluators:
            self._evaluators[key] = make()
        return self._evaluators[key]

    def timer(self, fname, args):
        self.vm.set_input(fname, *self._args(args))  # set_input copies its arguments on the device

        def run(number: int) -> float:
            f = self._evaluator(
                ("vm", fname, number),
                lambda: self.vm.time_evaluator("invoke_stateful", self.device, number=number, repeat=1),
            )
            return float(f(fname).mean)

        return run

    def kernel_timer(self, kernel, args):
        def run(number: int) -> float:
            f = self._evaluator(
                ("kernel", kernel, number),
                lambda: self.kernels.time_evaluator(kernel, self.device, number=number, repeat=1),
            )
            return float(f(*args).mean)

        return run


# ------------------------------------------------------------------------------------------ farm processes
def check_port_free(host: str, port: int) -> None:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError as e:
            why = e.strerror or e
            raise EKBError(
                f"cannot listen on {host}:{port} ({why}); is a tracker already running there?"
            ) from None


def run_tracker(host: str, port: int, echo=print) -> None:
    """TVM's RPC tracker on host:port, in this process, until interrupted."""
    check_port_free(host, port)
    from tvm.rpc.tracker import Tracker

    tracker = Tracker(host, port=port, port_end=port + 1, silent=True)
    where = format_addr(host, tracker.port)
    echo(f"RPC tracker on {where} (devices and queues: `ekb farm status --tracker {where}`)")
    try:
        tracker.proc.join()
    finally:
        tracker.terminate()


def server_host_for(tracker: str) -> str:
    """Where a device server listens by default: loopback for a loopback tracker, else every interface."""
    host, _ = parse_tracker(tracker)
    return "127.0.0.1" if host in ("127.0.0.1", "localhost", "::1") else "0.0.0.0"


def _kill_tree(proc: subprocess.Popen) -> None:
    """Kills a still running rpc_server process and its descendants (its popen_worker, a session's
    process), by pid."""
    if proc.poll() is not None:
        return
    pids = []
    try:
        import psutil

        pids = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    except Exception:  # no psutil: the server's children die with their parent's process group
        pass
    for pid in [proc.pid, *pids]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()


def serve_device(key: str, tracker: str, host: str, port: int, port_end: int, threads: int = 1) -> int:
    """TVM's RPC server with the EKB functions (`python -m edgekernelbench.backends.farm_server`: TVM's
    `rpc_server`, plus what times ONNX Runtime on the device, and a listen loop that survives a session
    whose process dies) for `key`, registered with the tracker, its output passed on to stderr. Its
    runtime's thread pool has `threads` threads (TVM_NUM_THREADS, as the harness's local workers).
    Returns its exit status."""
    farm_status(tracker)  # one clear error when the tracker is not there
    cmd = [sys.executable, "-u", "-m", SERVER_MODULE, "--host", host, "--port", str(port)]
    cmd += ["--port-end", str(port_end), "--tracker", tracker, "--key", key]
    env = {**os.environ, "TVM_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env
    )
    try:
        for line in proc.stdout:
            sys.stderr.write(line)
        return proc.wait()
    finally:
        _kill_tree(proc)


def status_json(status: FarmStatus) -> str:
    return json.dumps(status.to_dict(), indent=1)
