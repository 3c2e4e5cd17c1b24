"""The runner: on a local CPU backend, the only process in which a candidate's native code runs.

A verified kernel can still index past its buffers (TIR has no bounds checks), and an out-of-bounds
write would land in the memory of the process that runs it. So the judge does not run the candidate: it
forks a runner early (before the oracle, the baselines or any candidate data exist in its memory, while it
has one thread), which restricts itself further (a nested Landlock domain: no write anywhere, no signal or
ptrace to the judge) and then only builds and runs the candidate on request. Between them there is a
socket carrying JSON headers and NumPy arrays (`np.load(allow_pickle=False)`: data, never code).

What the runner can no longer reach: the oracle and its outputs, the comparison, the baselines (timed in
the judge), the result file, and the clock -- the candidate's time is measured by the judge around each
request (`RunnerProxy.timer`: the wall time of `number` calls, request and reply included, so the
candidate pays a request's fixed cost per round -- its round trip and what the runner's timed path adds --
against itself, never for it; its rounds last at least 100 of that cost, harness.timing.min_round_ms). What it
reports about itself and is believed: only its outputs (checked against the oracle) and its per-kernel
profile (information for agents, not a verdict).

Remote, emulated and GPU backends run the candidate outside the judge's address space already (on the
device, under qemu, in device memory) and keep the in-process runner (`Runner`, below).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import struct
import time

import numpy as np

from ..errors import EKBError, ToolchainMissing, last_line
from ..executor import GraphError, KernelFault, KernelRunner
from .timing import TimingConfig, time_interleaved

ROUND_TRIP_PROBES = 7  # requests of 0, 1 and 2 calls timed for a timed request's fixed cost (_ProxyTimer)
MAX_FRAME = 1 << 30  # a reply larger than this is refused (a runner cannot flood the judge's memory)


class RunnerDied(EKBError):
    """The candidate's process ended without a reply (it crashed, e.g. a segfault in a kernel)."""


class CandidateBuildError(EKBError):
    """TVM could not build the candidate (in the runner); str(e) is the compiler's text."""


# ------------------------------------------------------------------------------------------ framing
def send(sock: socket.socket, header: dict, arrays: list[np.ndarray] | None = None) -> None:
    head = json.dumps(header).encode()
    body = b""
    if arrays is not None:
        buf = io.BytesIO()
        np.savez(buf, *[np.asarray(a, order="C") for a in arrays])
        body = buf.getvalue()
    sock.sendall(struct.pack("<QQ", len(head), len(body)) + head + body)


def _read(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise RunnerDied("the candidate's process ended")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv(sock: socket.socket) -> tuple[dict, list[np.ndarray]]:
    n_head, n_body = struct.unpack("<QQ", _read(sock, 16))
    if n_head > MAX_FRAME or n_body > MAX_FRAME:
        raise RunnerDied("the candidate's process sent an oversized message")
    header = json.loads(_read(sock, n_head))
    if not isinstance(header, dict):
        raise RunnerDied("the candidate's process sent a malformed message")
    arrays: list[np.ndarray] = []
    if n_body:
        with np.load(io.BytesIO(_read(sock, n_body)), allow_pickle=False) as z:
            arrays = [z[f"arr_{i}"] for i in range(len(z.files))]
    return header, arrays


def _inputs(d: dict) -> tuple[list[str], list[np.ndarray]]:
    names = list(d)
    return names, [d[n] for n in names]


# ------------------------------------------------------------------------------------------ runner side
class Runner:
    """Runs one built module both ways: kernel by kernel (sentinel-filled outputs) and through the VM."""

    def __init__(self, mod, built, session, reference):
        self.session = session
        self.loaded = session.load(built)
        self.kernels = KernelRunner(mod, self.loaded.kernels, session.device, session.to_device)
        self.has_tp = "main_transform_params" in {gv.name_hint for gv in mod.functions}
        self.reference = reference
        weights = [session.to_device(w) for w in reference.params]
        if self.has_tp:
            self.tp_kernels = self.kernels.run("main_transform_params", [tuple(weights)])
            self.tp_vm = self.loaded.call("main_transform_params", [tuple(weights)])
        else:
            self.tp_kernels = self.tp_vm = weights

    def args(self, inputs: dict, tp) -> list:
        return [self.session.to_device(inputs[n]) for n in self.reference.input_names] + list(tp)

    def run_kernels(self, inputs, variant=0) -> list[np.ndarray]:
        return [t.numpy() for t in self.kernels.run("main", self.args(inputs, self.tp_kernels), variant)]

    def run_vm(self, inputs) -> list[np.ndarray]:
        args = self.args(inputs, self.tp_vm)
        before = [a.numpy().copy() for a in args]
        outs = [t.numpy() for t in self.loaded.call("main", args)]
        for i, (a, b) in enumerate(zip(args, before, strict=True)):
            if not np.array_equal(a.numpy(), b, equal_nan=True):
                raise KernelFault("input_mutated", f"main changed its argument #{i}")
        return outs

    def timer(self, inputs):
        return self.loaded.timer("main", self.args(inputs, self.tp_vm))

    def caller(self, inputs):
        """run(number): exactly `number` calls of main, untimed (the runner's side of RunnerProxy.timer)."""
        return self.loaded.caller("main", self.args(inputs, self.tp_vm))

    def profile(self, inputs, cfg: TimingConfig, only: list[str] | None = None) -> list[dict]:
        """Per kernel call of main: name, FLOPs (TIR estimate), median time per call, same protocol, and
        "calls": 1. `only` (a search comparing versions of these kernels): one row per named kernel, its
        first call timed and "calls" its calls in main -- a kernel's calls share its shapes and code (a
        DS-CNN calls each of its two block kernels 4 times: timing each call cost 4x). "share": of the
        time of main's calls timed (median x calls)."""
        from ..reference import kernel_flops

        calls: list = []
        self.kernels.run("main", self.args(inputs, self.tp_kernels), calls=calls)
        counts: dict[str, int] = {}
        timers = {}
        for i, (name, args, _) in enumerate(calls):
            if only is not None and name not in only:
                continue
            counts[name] = counts.get(name, 0) + 1
            if only is None or counts[name] == 1:
                timers[f"{i}:{name}"] = self.loaded.kernel_timer(name, args)
        times = time_interleaved(timers, cfg)
        out = []
        for key, t in times.items():
            name = key.split(":", 1)[1]
            flops = kernel_flops(self.kernels.module[name])
            n = 1 if only is None else counts[name]
            out.append({"kernel": name, "flops": flops, "median": t.median, "iqr": t.iqr, "calls": n})
        total = sum(k["median"] * k["calls"] for k in out) or 1.0
        for k in out:
            k["share"] = k["median"] * k["calls"] / total
        return out

    def poisoned_time(self, inputs, repeats: int = 25) -> dict:
        """Each kernel call of main timed alone, one call per measurement, with its outputs refilled with
        the sentinel before every call (outside the timed region): a kernel that skips work when it finds
        an earlier call's result in its output cannot profit. Returns {"seconds": the sum over the calls
        of each call's median, "kernels": [...]}; a backend that cannot poison outputs between calls
        (a remote or emulated device) raises NotImplementedError."""
        calls: list = []
        self.kernels.run("main", self.args(inputs, self.tp_kernels), calls=calls)
        per = [self.loaded.poisoned_kernel_time(name, args, n_out, repeats) for name, args, n_out in calls]
        return {
            "seconds": float(sum(per)),
            "kernels": [{"kernel": c[0], "median": t} for c, t in zip(calls, per, strict=True)],
        }


def _serve(sock: socket.socket, backend, session, reference) -> None:
    """The runner's loop: one request, one reply, until "quit" or the judge goes away."""
    from ..tvm_env import load_json

    runner = None
    calls = None  # exactly `number` calls of main on the bound inputs (Runner.caller)
    while True:
        try:
            req, arrays = recv(sock)
        except (RunnerDied, OSError, ValueError):
            return
        op = req.get("op")
        try:
            if op == "quit":
                return
            if op == "load":
                mod = load_json(req["module"])
                try:
                    if req.get("library"):  # its kernels compiled by the judge (backends/kernel_cache.py)
                        built = backend.build_linked(mod, req["library"], req.get("target_attrs") or {})
                    else:
                        built = backend.build(mod, req.get("target_attrs") or {})
                except ToolchainMissing as e:
                    send(sock, {"error": "toolchain", "detail": str(e)})
                    continue
                except Exception as e:
                    send(sock, {"error": "compile", "detail": last_line(e) + "\n" + str(e)[-3000:]})
                    continue
                runner = Runner(mod, built, session, reference)
                send(sock, {"ok": True, "seconds": built.seconds})
            elif op == "pin":
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(0, {int(req["cpu"])})
                send(sock, {"ok": True})
            elif op in ("kernels", "vm", "bind", "profile", "poisoned"):
                inputs = dict(zip(req["names"], arrays, strict=True))
                if op == "kernels":
                    send(sock, {"ok": True}, runner.run_kernels(inputs, int(req.get("variant", 0))))
                elif op == "vm":
                    send(sock, {"ok": True}, runner.run_vm(inputs))
                elif op == "bind":
                    calls = runner.caller(inputs)
                    calls(1)
                    send(sock, {"ok": True})
                elif op == "profile":
                    only = req.get("only")
                    only = [str(n) for n in only] if isinstance(only, list) else None
                    kernels = runner.profile(inputs, TimingConfig(**req["timing"]), only)
                    send(sock, {"ok": True, "kernels": kernels})
                else:  # every kernel call with fresh sentinel outputs, `repeats` times (timed by the judge)
                    for _ in range(int(req["repeats"])):
                        runner.run_kernels(inputs)
                    send(sock, {"ok": True})
            elif op == "time":
                calls(int(req["number"]))
                send(sock, {"ok": True})
            else:
                send(sock, {"error": "protocol", "detail": f"unknown request {op!r}"})
        except KernelFault as e:
            send(sock, {"error": "fault", "reason": e.reason, "detail": str(e)})
        except GraphError as e:
            send(sock, {"error": "graph", "detail": str(e)})
        except Exception as e:
            send(sock, {"error": "runtime", "detail": last_line(e)})


def _child(sock: socket.socket, backend, session, reference, sandbox: dict | None, parent: int) -> None:
    code = 0
    try:
        with contextlib.suppress(OSError):
            os.close(0)  # the judge's stdin (the builder's hand-over) is not the runner's
        from .isolation import prepare_fork

        prctl = prepare_fork()
        if prctl:
            prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the runner dies with its judge
            if os.getppid() != parent:
                os._exit(137)
        if sandbox:
            from .sandbox import DEVICES_RW, restrict_self

            restrict_self(sandbox["read"], list(DEVICES_RW), sandbox.get("landlock_abi"))  # nested: no writes
        _serve(sock, backend, session, reference)
    except BaseException:
        code = 1
    finally:
        os._exit(code)


# ------------------------------------------------------------------------------------------ judge side
def fork_runner(backend, session, reference, sandbox: dict | None):
    """A RunnerProxy to a forked runner, or (None, why) where forking is not safe here: the judge has more
    than one thread (a fork copies only the calling one; locks held by the others would stay held)."""
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        return None, "no /proc/self/task to count this process's threads"
    if threads != 1:
        return None, f"the judge has {threads} threads here: forking is not safe"
    parent_sock, child_sock = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        parent_sock.close()
        _child(child_sock, backend, session, reference, sandbox, os.getppid())
    child_sock.close()
    return RunnerProxy(parent_sock, pid), ""


class _ProxyTimer:
    """run(number) -> seconds per call of the candidate, timed here around one request for `number` calls
    (after an untimed one). The request costs more than its calls: its round trip, and on the runner's
    timed path (`LocalLoaded.caller`: one invocation of TVM's time evaluator for 2 calls or more) what an
    invocation adds besides its calls -- 160-330 us for a model with a 5.5 MB output on the 2-vCPU EPYC of
    2026-12-06, while a baseline's figure is the evaluator's own mean, without it. `request_overhead_s`
    estimates that fixed cost from this side, when first asked (by the timing protocol's calibration,
    after the judge pinned both processes to their CPU), from the medians of ROUND_TRIP_PROBES requests
    each of 0 (`round_trip_s`), 1 (a plain call) and 2 calls (the evaluator's path): w2 - 2 w1 + 2 w0;
    harness.timing.min_round_ms lengthens the candidate's rounds to amortise it. The candidate can only
    make it look larger (a slower round trip or first call), which lengthens its own rounds."""

    def __init__(self, call):
        self._call = call
        self.round_trip_s: float | None = None
        self._overhead: float | None = None

    def __call__(self, number: int) -> float:
        self._call({"op": "time", "number": 1})
        return self._request(int(number)) / number

    def _request(self, number: int) -> float:
        t0 = time.perf_counter()
        self._call({"op": "time", "number": number})
        return time.perf_counter() - t0

    def measured(self) -> dict:
        """The round trip and the fixed cost in us, for the record; {} when the protocol never asked."""
        if self._overhead is None:
            return {}
        trip, cost = self.round_trip_s or 0.0, self._overhead
        return {"round_trip_us": round(trip * 1e6, 1), "request_overhead_us": round(cost * 1e6, 1)}

    @property
    def request_overhead_s(self) -> float:
        if self._overhead is None:
            walls: dict[int, list[float]] = {0: [], 1: [], 2: []}
            for _ in range(ROUND_TRIP_PROBES):
                for n, w in walls.items():
                    w.append(self._request(n))
            w0, w1, w2 = (float(np.median(walls[n])) for n in (0, 1, 2))
            self.round_trip_s = w0
            self._overhead = max(w0, w2 - 2 * w1 + 2 * w0)
        return self._overhead


class RunnerProxy:
    """The judge's handle on the runner: the same methods as Runner, answered by the runner
    process, with the candidate's timer measured here."""

    def __init__(self, sock: socket.socket, pid: int):
        self.sock, self.pid = sock, pid
        self.session = None  # a local CPU: no device whose failure could be diagnosed

    def _call(self, header: dict, arrays: list[np.ndarray] | None = None) -> tuple[dict, list[np.ndarray]]:
        try:
            send(self.sock, header, arrays)
            rep, out = recv(self.sock)
        except (RunnerDied, OSError) as e:
            raise RunnerDied(f"the candidate's process died ({self._status()})") from e
        err = rep.get("error")
        if err == "fault":
            raise KernelFault(str(rep.get("reason", "runtime_error")), str(rep.get("detail", ""))[-2000:])
        if err == "graph":
            raise GraphError(str(rep.get("detail", ""))[-2000:])
        if err == "compile":
            raise CandidateBuildError(str(rep.get("detail", ""))[-4000:])
        if err == "toolchain":
            raise ToolchainMissing(str(rep.get("detail", "")))
        if err:
            raise RuntimeError(str(rep.get("detail", err))[-2000:])
        return rep, out

    def _status(self) -> str:
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return "gone"
        if pid == 0:
            return "no reply"
        if os.WIFSIGNALED(status):
            return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
        return f"exit code {os.WEXITSTATUS(status)}"

    def load(self, mod, target_attrs: dict, library: str | None = None) -> tuple[float, dict]:
        """Builds and loads the candidate in the runner; `library`: its kernels compiled already (by the
        judge: backends/kernel_cache.py), the runner only links the graph with them."""
        import tvm

        module = tvm.ir.save_json(mod)
        rep, _ = self._call(
            {"op": "load", "module": module, "target_attrs": target_attrs, "library": library}
        )
        return float(rep.get("seconds", 0.0)), {}

    def pin(self, cpu: int) -> None:
        self._call({"op": "pin", "cpu": cpu})

    def _with_inputs(self, header: dict, inputs: dict):
        names, arrays = _inputs(inputs)
        return self._call({**header, "names": names}, arrays)

    def run_kernels(self, inputs, variant: int = 0) -> list[np.ndarray]:
        return self._with_inputs({"op": "kernels", "variant": variant}, inputs)[1]

    def run_vm(self, inputs) -> list[np.ndarray]:
        return self._with_inputs({"op": "vm"}, inputs)[1]

    def timer(self, inputs):
        """run(number) -> seconds per call of the candidate, measured HERE around the request: the runner
        makes exactly `number` calls, after one untimed call (what TVM's time evaluator does for the
        baselines: every contender's round starts warm). Timing the evaluator's own untimed call with
        the others cost a 4 ms model 1.5x its time at 2 calls per round; leaving the warm-up out, the
        reference measured 0.85-0.93x of the same code as tvm-default."""
        self._with_inputs({"op": "bind"}, inputs)
        return _ProxyTimer(self._call)

    def profile(self, inputs, cfg, only: list[str] | None = None) -> list[dict]:
        from dataclasses import asdict

        rep, _ = self._with_inputs({"op": "profile", "timing": asdict(cfg), "only": only}, inputs)
        return rep.get("kernels") if isinstance(rep.get("kernels"), list) else []

    def poisoned_time(self, inputs, repeats: int = 25) -> dict:
        """Every kernel call of main with fresh sentinel-filled outputs (nothing an earlier call left can
        be reused), `repeats` times; timed here, messaging and output allocation included (so a kernel
        only looks slower, never faster)."""
        names, arrays = _inputs(inputs)
        t0 = time.perf_counter()
        self._call({"op": "poisoned", "names": names, "repeats": int(repeats)}, arrays)
        return {"seconds": (time.perf_counter() - t0) / repeats, "measured": "by the judge, whole sequence"}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            send(self.sock, {"op": "quit"})
        with contextlib.suppress(Exception):
            self.sock.close()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                if os.waitpid(self.pid, os.WNOHANG)[0]:
                    return
            except ChildProcessError:
                return
            time.sleep(0.01)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
