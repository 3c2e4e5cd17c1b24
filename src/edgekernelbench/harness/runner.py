"""The runner: on a local CPU backend, the only process in which a candidate's native code runs.

A verified kernel can still index past its buffers (TIR has no bounds checks), and an out-of-bounds
write would land in the memory of the process that runs it. So the judge does not run the candidate: it
forks a runner early (before the oracle, the baselines, the judgment's seed or any candidate data exist in
its memory, while it has one thread; where it cannot fork safely it spawns a fresh one: never runs the
candidate itself), which restricts itself further (a nested Landlock domain: no write anywhere, no signal
or ptrace to the judge) and then only builds and runs the candidate on request. Between them there is a
socket carrying JSON headers and NumPy arrays (`np.load(allow_pickle=False)`: data, never code).

tvm-default (and any other TVM baseline) runs in a runner of its own, forked alike, and is timed through
exactly the same requests as the candidate: identical code measures 1.00x, whatever a request costs.

What the runner can no longer reach: the oracle and its outputs, the comparison, the result file, and the
clock -- each contender's time is measured by the judge around each request (`RunnerProxy.bind`: the
wall time of `number` calls, request and reply included; its rounds last at least 100 of a request's fixed
cost, harness.timing.min_round_ms). The timed calls take several input sets in turn
(backends/call_loop.py), so no call sees the inputs of the call before it; between rounds the judge
checks some of them (`check`: the previous call's outputs overwritten with a fresh sentinel, one call,
its outputs compared with the oracle's for its inputs) and that nothing the module owns changed
(`state`: its constants, its weights, the bound inputs). What the runner reports about itself and is
believed: only its outputs (checked against the oracle) and its per-kernel profile (information for
agents, not a verdict).

Remote, emulated and GPU backends run the candidate outside the judge's address space already (on the
device, under qemu, in device memory) and keep the in-process runner (`Runner`, below), with one input
set for their timers (the device's own time evaluator).
"""

from __future__ import annotations

import collections
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
        self.functions = ["main", *(["main_transform_params"] if self.has_tp else [])]
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
        """run(number) -> seconds per call of main on `inputs` (one set), by the backend's own timer: the
        remote, emulated and GPU backends' path (a host CPU's contenders are timed by the judge around
        requests to their runners: `rotating`)."""
        return self.loaded.timer("main", self.args(inputs, self.tp_vm))

    def rotating(self, sets: list[dict], lib: str | None, why: str = ""):
        """A backends.call_loop.RotatingCaller of main over the input sets `sets` in turn (a host CPU)."""
        return self.loaded.rotating("main", [self.args(s, self.tp_vm) for s in sets], lib, why)

    def owned_state(self, caller) -> list[tuple[str, object]]:
        """What main's calls must leave as it was: its constants (the executable's own storage: a write
        into one persists from call to call), its weights or transformed weights, and every input set
        bound to `caller` -- (label, device tensor) each."""
        from ..executor import constant_tensors

        owned = [
            (f"constant #{i} of {f}", t)
            for f in self.functions
            for i, t in enumerate(constant_tensors(self.kernels.module[f]))
        ]
        owned += [(f"weight #{i}", t) for i, t in enumerate(self.tp_vm)]
        n = len(self.reference.input_names)
        owned += [
            (f"input {name} of set {k}", args[i])
            for k, args in enumerate(caller.sets)
            for i, name in enumerate(self.reference.input_names[:n])
        ]
        return owned

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

    def stateless(self, inputs, caller, rounds: int) -> dict:
        """What main costs when no call can reuse what an earlier call left in memory, against what its
        timed calls cost, side by side: in each of `rounds` rounds, a batch of timed calls (`caller`, the
        input sets in turn; per call) and every kernel call of main on `inputs` timed alone, its outputs
        refilled with the sentinel before the call (outside the timed region; the sum). Returns the median
        of the per-round ratios kernels / timed calls ("ratio": an honest module measures about 1 or less --
        the kernels alone pay no VM dispatch --, one that keeps outputs of inputs it saw in a pooled buffer
        far more), the medians of both, and each kernel's. Each kernel's time in a round is the least of
        three calls, each on refilled outputs: the first of them may pay for waking the thread pool's
        workers, asleep while the outputs were refilled, which a timed call following another never pays
        (on a loaded machine that alone measured an honest 128x128 matmul 3.2x slower alone)."""
        import statistics

        calls: list = []
        self.kernels.run("main", self.args(inputs, self.tp_kernels), calls=calls)
        timers = [self.loaded.poisoned_timer(name, args, n_out, repeats=3) for name, args, n_out in calls]
        t0 = time.perf_counter()
        caller.run(1)
        batch = max(1, min(10_000, int(5e-4 / max(time.perf_counter() - t0, 1e-7))))  # >= ~0.5 ms of calls
        per_kernel: list[list[float]] = [[] for _ in calls]
        timed, kernels, ratios = [], [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            caller.run(batch)
            timed.append((time.perf_counter() - t0) / batch)
            for times, timer in zip(per_kernel, timers, strict=True):
                times.append(min(timer()))
            kernels.append(sum(t[-1] for t in per_kernel))
            ratios.append(kernels[-1] / timed[-1])
        return {
            "ratio": statistics.median(ratios),
            "seconds": statistics.median(kernels),
            "timed_s": statistics.median(timed),
            "rounds": rounds,
            "kernels": [
                {"kernel": c[0], "median": statistics.median(t)}
                for c, t in zip(calls, per_kernel, strict=True)
            ],
        }

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


def _sentinel(t, seed: int) -> None:
    """Fills device tensor `t` with values drawn from `seed`: a fresh sentinel no correct output equals."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(str(t.dtype))
    if np.issubdtype(dtype, np.floating):
        fill = (rng.standard_normal(tuple(t.shape)) * 1e4 + 3.25e4).astype(dtype)
    else:
        info = np.iinfo(dtype)
        fill = rng.integers(int(info.min), int(info.max), size=tuple(t.shape), endpoint=True).astype(dtype)
    t.copyfrom(fill)


def _flat(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) or type(out).__name__ == "Array" else [out]


class _Served:
    """The runner process's state: the module it runs, its timed calls and what they must not change."""

    def __init__(self, backend, session, reference):
        self.backend, self.session, self.reference = backend, session, reference
        self.runner: Runner | None = None
        self.timed = None  # backends.call_loop.RotatingCaller over the bound input sets
        # the outputs of the last two calls, held: a check overwrites them with a sentinel and lets them
        # go, and the pool hands their memory to the checked call (the VM itself still holds the last
        # call's return value, so the memory the checked call gets is the one before)
        self.recent: collections.deque = collections.deque(maxlen=2)
        self.owned: list[tuple[str, object, np.ndarray]] = []  # (label, tensor, its value when bound)
        self.library: str | None = None  # the candidate's kernels' library file, when the judge compiled them
        # whose pool the kernels' scratch buffers come from (backends/call_loop.take_workspace)
        self.workspace = "TVM's pool (kernels built in the runner)"

    def load(self, req: dict) -> dict:
        from ..tvm_env import load_json

        mod = load_json(req["module"])
        try:
            if req.get("library"):  # its kernels compiled by the judge (backends/kernel_cache.py)
                built = self.backend.build_linked(mod, req["library"], req.get("target_attrs") or {})
            else:
                built = self.backend.build(mod, req.get("target_attrs") or {})
        except ToolchainMissing as e:
            return {"error": "toolchain", "detail": str(e)}
        except Exception as e:
            return {"error": "compile", "detail": last_line(e) + "\n" + str(e)[-3000:]}
        self.runner = Runner(mod, built, self.session, self.reference)
        self.library = str(req["library"]) if req.get("library") else None
        return {"ok": True, "seconds": built.seconds}

    def load_baseline(self, req: dict) -> dict:
        """A TVM baseline (harness/evaluate.py baseline_built: built before the fork in a warm judge)."""
        from ..baselines.tvm_default import baseline_built

        mod, built = baseline_built(str(req["name"]), self.reference, self.backend)
        self.runner = Runner(mod, built, self.session, self.reference)
        return {"ok": True, "seconds": built.seconds}

    def bind(self, req: dict, arrays: list[np.ndarray]) -> dict:
        names, n_sets = list(req["names"]), int(req["sets"])
        if n_sets < 1 or len(arrays) != n_sets * len(names):
            return {"error": "protocol", "detail": "bind: the arrays are not sets of the named inputs"}
        sets = [
            dict(zip(names, arrays[k * len(names) : (k + 1) * len(names)], strict=True))
            for k in range(n_sets)
        ]
        self.sets = sets
        self.timed = self.runner.rotating(sets, req.get("lib"), str(req.get("why") or ""))
        if self.library:  # the kernels' scratch memory, which the stateless timing overwrites between calls
            from ..backends.call_loop import take_workspace

            self.workspace = take_workspace(self.library, req.get("lib"))
        self.owned = [(label, t, t.numpy().copy()) for label, t in self.runner.owned_state(self.timed)]
        self.recent.append(_flat(self.timed.call_next()))  # every contender's first call: untimed
        return {"ok": True, "how": self.timed.how, **self.position()}

    def position(self) -> dict:
        return {"calls": self.timed.calls, "next": self.timed.next_set}

    def time(self, req: dict) -> dict:
        number = int(req["number"])
        if number > 0:  # 0: an empty request (the judge measures a request's own cost)
            self.recent.clear()  # their memory goes back to the pool, as every other call's does
            self.timed.run(number - min(number, 2))
            for _ in range(min(number, 2)):  # the last two from Python: their outputs are held
                self.recent.append(_flat(self.timed.call_next()))
        return {"ok": True, **self.position()}

    def check(self, req: dict) -> tuple[dict, list[np.ndarray]]:
        """One call on input set `set` (the judge's choice), its outputs returned; before it, the outputs of
        the calls before (whose memory the pool hands this call) are overwritten with a fresh sentinel."""
        seed = int(req["sentinel"])
        for j, outs in enumerate(self.recent):
            for i, t in enumerate(outs):
                _sentinel(t, seed + 1000 * j + i)
        self.recent.clear()
        k = int(req["set"]) % len(self.timed.sets)
        out = _flat(self.timed.call_on(k))
        self.recent.append(out)
        return {"ok": True, "set": k, **self.position()}, [t.numpy() for t in out]

    def stateless(self, req: dict) -> dict:
        """Runner.stateless over the bound input sets and timed calls."""
        out = self.runner.stateless(self.sets[0], self.timed, int(req.get("rounds", 15)))
        return {"ok": True, **out, "workspace": self.workspace}

    def state(self) -> dict:
        for label, t, value in self.owned:
            if not np.array_equal(t.numpy(), value, equal_nan=True):
                raise KernelFault(
                    "input_mutated",
                    f"main's {label} changed between timed calls (a module may keep no state from one call "
                    "to the next)",
                )
        return {"ok": True}


def _serve(sock: socket.socket, backend, session, reference) -> None:
    """The runner's loop: one request, one reply, until "quit" or the judge goes away."""
    served = _Served(backend, session, reference)
    while True:
        try:
            req, arrays = recv(sock)
        except (RunnerDied, OSError, ValueError):
            return
        op = req.get("op")
        try:
            runner = served.runner
            if op == "quit":
                return
            if op == "load":
                send(sock, served.load(req))
            elif op == "load_baseline":
                send(sock, served.load_baseline(req))
            elif op == "pin":
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(0, {int(req["cpu"])})
                send(sock, {"ok": True})
            elif op == "bind":
                send(sock, served.bind(req, arrays))
            elif op == "time":
                send(sock, served.time(req))
            elif op == "check":
                send(sock, *served.check(req))
            elif op == "state":
                send(sock, served.state())
            elif op == "stateless":
                send(sock, served.stateless(req))
            elif op in ("kernels", "vm", "profile", "poisoned"):
                inputs = dict(zip(req["names"], arrays, strict=True))
                if op == "kernels":
                    send(sock, {"ok": True}, runner.run_kernels(inputs, int(req.get("variant", 0))))
                elif op == "vm":
                    send(sock, {"ok": True}, runner.run_vm(inputs))
                elif op == "profile":
                    only = req.get("only")
                    only = [str(n) for n in only] if isinstance(only, list) else None
                    kernels = runner.profile(inputs, TimingConfig(**req["timing"]), only)
                    send(sock, {"ok": True, "kernels": kernels})
                else:  # every kernel call with fresh sentinel outputs, `repeats` times (timed by the judge)
                    for _ in range(int(req["repeats"])):
                        runner.run_kernels(inputs)
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
        _confine(sandbox, parent)
        _serve(sock, backend, session, reference)
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _confine(sandbox: dict | None, parent: int) -> None:
    """The runner dies with its judge (PR_SET_PDEATHSIG) and restricts itself further: the judge's reads,
    no writes (a nested Landlock domain)."""
    from .isolation import prepare_fork

    prctl = prepare_fork()
    if prctl:
        prctl(1, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(137)
    if sandbox:
        from .sandbox import DEVICES_RW, restrict_self

        restrict_self(sandbox["read"], list(DEVICES_RW), sandbox.get("landlock_abi"))


def _threads() -> int | None:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


# ------------------------------------------------------------------------------------------ judge side
def start_runner(backend, session, reference, sandbox: dict | None, spawn: dict | None = None):
    """(RunnerProxy, how): a runner forked from this process while it has one thread (a fork copies only
    the calling thread: locks other threads held would stay held), else a fresh Python process spawned for
    it (`spawn`: what it needs to rebuild the judge's state -- {"problem", "graph_dir", "backend_profile",
    "threads"}), which costs an import of TVM and a build of the reference. Never the judge itself."""
    threads = _threads()
    if threads == 1:
        parent_sock, child_sock = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            parent_sock.close()
            _child(child_sock, backend, session, reference, sandbox, os.getppid())
        child_sock.close()
        return RunnerProxy(parent_sock, pid), "separate process (forked)"
    why = f"the judge has {threads} threads" if threads else "this process's threads cannot be counted"
    if spawn is None:
        raise RunnerDied(f"{why}: a runner cannot be forked safely, and none can be spawned here")
    return spawn_runner({**spawn, "sandbox": sandbox}), f"separate process (spawned: {why})"


def spawn_runner(init: dict) -> RunnerProxy:
    """A runner in a new Python process (`python -m edgekernelbench.harness.runner FD`), initialised by
    `init` over the socket (`_spawned_main`)."""
    import subprocess
    import sys

    parent_sock, child_sock = socket.socketpair()
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgekernelbench.harness.runner", str(child_sock.fileno())],
        pass_fds=[child_sock.fileno()],
        stdin=subprocess.DEVNULL,
    )
    child_sock.close()
    proxy = RunnerProxy(parent_sock, proc.pid, proc)
    proxy._call({"op": "init", **init})
    return proxy


def _spawned_main(fd: int) -> int:
    """A spawned runner: the judge's state rebuilt from the init request (the problem's graph as the
    parent built it, the backend's profile), then confined and serving as a forked one."""
    sock = socket.socket(fileno=fd)
    req, _ = recv(sock)
    if req.get("op") != "init":
        return 2
    from ..tvm_env import set_threads

    set_threads(int(req.get("threads") or 1))
    from pathlib import Path

    from ..backends.base import BackendProfile
    from ..backends.registry import backend_for
    from ..problems import get_problem
    from ..reference import build_reference

    try:
        problem = get_problem(str(req["problem"]))
        if req.get("graph_dir"):
            problem.adopt_graph(Path(str(req["graph_dir"])))
        reference = build_reference(problem)
        backend = backend_for(BackendProfile.from_dict(req["backend_profile"]))
        session = backend.session()
        _confine(req.get("sandbox"), os.getppid())
    except Exception as e:
        send(sock, {"error": "runtime", "detail": "the spawned runner could not start: " + last_line(e)})
        return 1
    send(sock, {"ok": True})
    _serve(sock, backend, session, reference)
    return 0


class _ProxyTimer:
    """run(number) -> seconds per call of a contender in a runner, timed here around one request for
    `number` calls (after an untimed one). The request costs more than its calls: its round trip, and the
    runner's dispatch. `request_overhead_s` estimates that fixed cost from this side, when first asked (by
    the timing protocol's calibration, after the judge pinned both processes to their CPU), from the
    medians of ROUND_TRIP_PROBES requests each of 0 (`round_trip_s`), 1 and 2 calls: w2 - 2 w1 + 2 w0;
    harness.timing.min_round_ms lengthens the contender's rounds to amortise it. Every TVM contender pays
    it alike (each is timed through a runner), and a candidate can only make it look larger (a slower
    round trip or first call), which lengthens its own rounds. `how`: the runner's loop (C or Python);
    `calls`: the calls made at bind time."""

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
    """The judge's handle on a runner: the same methods as Runner, answered by the runner process, with
    its timer measured here."""

    def __init__(self, sock: socket.socket, pid: int, proc=None):
        self.sock, self.pid, self.proc = sock, pid, proc  # proc: a spawned runner's Popen
        self.next_set = 0  # the input set its next timed call takes, as its last reply said
        self.session = None  # a local CPU: no device whose failure could be diagnosed

    def _call(self, header: dict, arrays: list[np.ndarray] | None = None) -> tuple[dict, list[np.ndarray]]:
        try:
            send(self.sock, header, arrays)
            rep, out = recv(self.sock)
        except (RunnerDied, OSError) as e:
            raise RunnerDied(f"the candidate's process died ({self._status()})") from e
        if isinstance(rep.get("next"), int):  # where the timed calls' rotation stands (bind, time, check)
            self.next_set = rep["next"]
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

    def load_baseline(self, name: str) -> float:
        """Loads the TVM baseline `name` (harness/evaluate.py baseline_built) in the runner."""
        rep, _ = self._call({"op": "load_baseline", "name": name})
        return float(rep.get("seconds", 0.0))

    def pin(self, cpu: int) -> None:
        self._call({"op": "pin", "cpu": cpu})

    def _with_inputs(self, header: dict, inputs: dict):
        names, arrays = _inputs(inputs)
        return self._call({**header, "names": names}, arrays)

    def run_kernels(self, inputs, variant: int = 0) -> list[np.ndarray]:
        return self._with_inputs({"op": "kernels", "variant": variant}, inputs)[1]

    def run_vm(self, inputs) -> list[np.ndarray]:
        return self._with_inputs({"op": "vm"}, inputs)[1]

    def bind(self, sets: list[dict], lib: str | None, why: str = "") -> _ProxyTimer:
        """Binds the timed calls' input sets (taken in turn, backends/call_loop.py) and makes the first call,
        untimed; returns the contender run(number) -> seconds per call, measured HERE around a request for
        `number` calls (after an untimed one: what TVM's time evaluator does, every round starts warm).
        `lib`: the C call loop (None: a Python loop, `why`)."""
        names = list(sets[0])
        arrays = [s[n] for s in sets for n in names]
        rep, _ = self._call({"op": "bind", "names": names, "sets": len(sets), "lib": lib, "why": why}, arrays)
        timer = _ProxyTimer(self._call)
        timer.how, timer.calls = str(rep.get("how", "")), int(rep.get("calls", 0))
        return timer

    def check(self, sentinel: int, input_set: int) -> list[np.ndarray]:
        """The outputs of one call on input set `input_set`, made after the outputs of the calls before were
        overwritten with the sentinel drawn from `sentinel`."""
        return self._call({"op": "check", "sentinel": int(sentinel), "set": int(input_set)})[1]

    def stateless(self, rounds: int) -> dict:
        """The runner's stateless timing (Runner.stateless): {"ratio", "seconds", "timed_s", "rounds",
        "kernels", "workspace" (as the runner says)}. Measured in the candidate's process, so it can only
        accuse (a runner that reports its kernels slower is judged worse), never acquit."""
        rep, _ = self._call({"op": "stateless", "rounds": int(rounds)})
        out = {k: rep.get(k) for k in ("ratio", "seconds", "timed_s", "rounds")}
        if not all(isinstance(out[k], (int, float)) and out[k] > 0 for k in ("ratio", "seconds", "timed_s")):
            raise RunnerDied("the candidate's process sent a malformed stateless timing")
        kernels = rep.get("kernels") if isinstance(rep.get("kernels"), list) else []
        return {**out, "kernels": kernels, "workspace": str(rep.get("workspace") or "")[:120]}

    def verify_state(self) -> None:
        """Raises KernelFault("input_mutated") when a constant, weight or bound input of main changed."""
        self._call({"op": "state"})

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


if __name__ == "__main__":
    import sys

    sys.exit(_spawned_main(int(sys.argv[1])))
