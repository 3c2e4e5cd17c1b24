"""A warm judge: one sandboxed process from which the builders and judges of an episode, of `ekb eval`'s
judgments or of a cluster worker's are forked.

A judgment used to start two Python processes (the builder and the judge), each importing TVM (1.5 s,
the larger part of a judgment of a small kernel). So `warm_judge()` (harness/api.py) keeps one process --
the zygote -- for as long as a problem's agent episodes (agents/run.py) or a run lasts
(`lasting_warm_judge()`: a cluster worker's life), for every problem it judges (a child of another
problem than the first builds that problem's reference and baselines itself, from the graph its parent
hands it). It is started exactly like a worker
(harness/isolation.py: a clean environment, resource limits, the sandbox's namespaces), does trusted work
only (imports TVM and the harness, builds the first problem's reference and the tvm-default baseline:
nothing seed-dependent, no oracle output, nothing of any candidate) and then only forks, on the parent's
request, a child that runs the worker's code on one job (harness/worker.py) exactly as a fresh worker
would.

Each child starts clean: a copy of that state and nothing else (no candidate has run in the zygote, and a
child's changes stay in its own copy). Before it reads anything a candidate controls it enters a PID
namespace of its own (and a mount namespace, with a private /proc): it cannot name the zygote or any
other child, and every process it starts dies with it (the kernel kills a PID namespace's members when
its first process exits; that process dies with its parent, which the zygote kills on the parent's
request). Then it applies the job's Landlock rules to itself, as a fresh worker does: its job directory
is the only place it can write, and from Landlock ABI 6 on it can neither signal nor reach the abstract
sockets of processes outside its domain (the zygote is outside it); Landlock forbids a child to ptrace
the zygote, so /proc/<pid>/mem and environ of the zygote stay closed too.

The protocol, JSON lines over the zygote's stdin and stdout (only the parent holds them; a child's
standard streams are its log file and, for the judge, a pipe of its own):
    parent -> zygote  {"op": "start", "id", "job", "out", "log", "cwd", "stdin", "cpus"} (cpus: the CPUs
                      the child may run on, the parent's at that moment)  {"op": "feed", "id", "data"}
                      (writes to the child's stdin, then closes it)  {"op": "kill", "id"}
    zygote -> parent  {"ready": true} or {"ready": false, "why"} once; {"id", "exit"} when a child ends
                      (exit: the worker's exit code, or -N when signal N ended it)
Where the zygote cannot fork safely (more than one thread after its imports) or cannot give a child its
own namespaces, it says so in its first line and the parent judges without it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import sys
from pathlib import Path

CLONE_NEWNS, CLONE_NEWPID = 0x00020000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18
PR_SET_PDEATHSIG = 1


# ------------------------------------------------------------------------------------------ the zygote
def _libc():
    return ctypes.CDLL(None, use_errno=True)


def preload(spec: dict) -> None:
    """The zygote's trusted work: TVM and the harness imported, the problem's reference built, and on this
    machine's CPU the tvm-default baseline built (harness/evaluate.py keeps it for the judge)."""
    from ..tvm_env import set_threads

    set_threads(int(spec["threads"]))
    from ..baselines.ort_isa import apply_pin

    apply_pin(spec.get("ort_isa"), spec.get("ort_isa_unavailable", ""))  # before onnxruntime loads
    import tvm  # noqa: F401
    from tvm import relax  # noqa: F401

    from ..ir import replay  # noqa: F401
    from ..ir.int8_dot import register_intrinsics
    from ..problems import get_problem
    from ..reference import build_reference
    from . import builder, evaluate, runner, worker  # noqa: F401

    register_intrinsics()  # the project's tensor intrinsics (parsed TVMScript: 0.13 s in every builder)

    problem = get_problem(spec["problem"])
    problem.adopt_graph(Path(spec["graph_dir"]))  # the parent's (an L3 model's calibration runs ORT)
    reference = build_reference(problem)
    if spec.get("backend_profile"):
        from ..backends.base import BackendProfile
        from ..backends.registry import backend_for

        backend = backend_for(BackendProfile.from_dict(spec["backend_profile"]))
        from ..baselines.tvm_default import baseline_built

        mod, built = baseline_built("tvm-default", reference, backend)
        kernels = [gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
        if kernels and hasattr(built.kernels, "mod"):  # LLVM generates a library's code at its first use
            built.kernels[kernels[0]]


class _Zygote:
    def __init__(self):
        self.libc = _libc()
        self.children: dict[int, str] = {}  # pid -> request id
        self.feeds: dict[str, int] = {}  # request id -> write end of the child's stdin
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        self.buf = b""

    def emit(self, msg: dict) -> None:
        data = (json.dumps(msg) + "\n").encode()
        while data:
            data = data[os.write(1, data) :]

    def own_fds(self) -> list[int]:
        return [self.wake_r, self.wake_w, *self.feeds.values()]

    def start(self, req: dict) -> None:
        stdin_r = stdin_w = None
        if req.get("stdin"):
            stdin_r, stdin_w = os.pipe()
        zygote = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                _child(self.libc, req, stdin_r, [*self.own_fds(), *([stdin_w] if stdin_w else [])], zygote)
            except BaseException:  # noqa: BLE001 -- nothing may escape into the zygote's loop
                with contextlib.suppress(Exception):
                    import traceback

                    traceback.print_exc()
            finally:
                os._exit(125)
        self.children[pid] = str(req["id"])
        if stdin_r is not None:
            os.close(stdin_r)
            self.feeds[str(req["id"])] = stdin_w

    def feed(self, req: dict) -> None:
        fd = self.feeds.pop(str(req["id"]), None)
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.write(fd, str(req.get("data", "")).encode())
        os.close(fd)

    def kill(self, req: dict) -> None:
        for pid, rid in self.children.items():
            if rid == str(req["id"]):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            rid = self.children.pop(pid, None)
            if rid is None:
                continue
            fd = self.feeds.pop(rid, None)
            if fd is not None:
                os.close(fd)
            self.emit({"id": rid, "exit": os.waitstatus_to_exitcode(status)})

    def requests(self):
        """Yields the parent's requests; returns when the parent closes the zygote's stdin."""
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                if line.strip():
                    yield json.loads(line)
            ready, _, _ = select.select([0, self.wake_r], [], [])
            if self.wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(self.wake_r, 4096)
                self.reap()
            if 0 in ready:
                data = os.read(0, 1 << 16)
                if not data:
                    return
                self.buf += data

    def serve(self) -> int:
        os.set_blocking(self.wake_r, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that SIGCHLD wakes the select
        ops = {"start": self.start, "feed": self.feed, "kill": self.kill}
        for req in self.requests():
            op = ops.get(req.get("op"))
            if op is not None:
                op(req)
        for pid in list(self.children):  # the parent is gone: so is every child
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return 0


def _pdeathsig(libc) -> None:
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _child(libc, req: dict, stdin_r: int | None, close: list[int], zygote: int) -> None:
    """The forked child (before the worker's code): its own streams, a PID and mount namespace of its own
    with a private /proc; its first process there runs the worker's code and dies with this one."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _pdeathsig(libc)
    if os.getppid() != zygote:  # the zygote died before the signal was armed
        os._exit(137)
    if req.get("cpus"):  # the CPUs the parent may use now, not those it had when the zygote started
        os.sched_setaffinity(0, [int(c) for c in req["cpus"]])
    log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.dup2(stdin_r if stdin_r is not None else os.open(os.devnull, os.O_RDONLY), 0)
    for fd in {log, *([stdin_r] if stdin_r is not None else []), *close}:
        with contextlib.suppress(OSError):
            os.close(fd)
    os.chdir(req["cwd"])
    os.setsid()  # a process group of its own: kill(0, ...) in it reaches neither the zygote nor a sibling
    _own_namespaces(libc)
    alive_r, alive_w = os.pipe()  # the first process's way to know its parent is still there
    pid = os.fork()
    if pid == 0:
        os.close(alive_w)
        _pdeathsig(libc)
        os.set_blocking(alive_r, False)
        try:
            if os.read(alive_r, 1) == b"":  # end of file: the parent died before the signal was armed
                os._exit(137)
        except BlockingIOError:
            pass
        os.close(alive_r)
        os._exit(_first_process(libc, req))
    os.close(alive_r)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


def _own_namespaces(libc) -> None:
    """This process's next child starts a PID namespace of its own, in a mount namespace of its own whose
    mounts stay private (its /proc is mounted there: `_mount_proc`). Raises OSError."""
    if libc.unshare(CLONE_NEWPID | CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWPID | CLONE_NEWNS)")
    if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "mount: making / private")


def _mount_proc(libc) -> bool:
    """A /proc of this PID namespace's own, over the inherited one."""
    return libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) == 0


def _first_process(libc, req: dict) -> int:
    """Process 1 of the child's PID namespace: a private /proc, then the worker's code on the job."""
    if not _mount_proc(libc):
        print(f"warm judge: /proc not remounted: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 126
    os.environ["HOME"] = os.environ["TMPDIR"] = req["cwd"]
    from .worker import main

    try:
        code = main(["worker", req["job"], req["out"]])
    except SystemExit as e:  # a candidate's sys.exit while it was materialized, as in a fresh worker
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        code = 1
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    return code


def _can_fork_children(libc) -> str | None:
    """None when a child can get its own PID and mount namespaces and a /proc here, else why not."""
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        return f"the warm judge has {threads} threads after its imports: forking is not safe"
    pid = os.fork()
    if pid == 0:
        try:
            _own_namespaces(libc)
        except OSError:
            os._exit(1)
        inner = os.fork()
        if inner == 0:
            os._exit(0 if _mount_proc(libc) else 2)
        _, st = os.waitpid(inner, 0)
        os._exit(os.waitstatus_to_exitcode(st))
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return None if code == 0 else f"a forked child cannot have its own PID namespace and /proc (code {code})"


def main(argv: list[str]) -> int:
    z = _Zygote()
    try:
        preload(json.loads(Path(argv[1]).read_text()))
        why = _can_fork_children(z.libc)
    except Exception as e:  # noqa: BLE001 -- reported to the parent, which judges without a warm judge
        why = f"{type(e).__name__}: {e}"
    z.emit({"ready": why is None, **({"why": why} if why else {})})
    if why is not None:
        return 1
    return z.serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
