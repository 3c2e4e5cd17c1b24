"""The parent's handle on a warm judge (harness/zygote.py, which says what it is and how it talks): it
starts the zygote's children, feeds their stdin, kills them and hears them end; harness/isolation.py uses
a child (`ForkedWorker`) as it uses a fresh worker's subprocess.Popen."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

READY_TIMEOUT_S = 180.0


class ZygoteDied(RuntimeError):
    """The warm judge ended (or sent what it never sends) while a job of it ran."""


class WarmJudge:
    """The parent's handle on a zygote: starts children, feeds their stdin, kills them, hears them end."""

    def __init__(self, key, proc: subprocess.Popen, home: Path):
        self.key, self.proc, self.home = key, proc, home
        # compiled kernels of its judges' candidates (backends/kernel_cache.py): only its judges write here
        self.kernel_cache = home / "kernels"
        self.kernel_cache.mkdir(mode=0o700, exist_ok=True)
        self.exits: dict[str, int] = {}
        self.buf = b""
        self.next_id = 0
        self.dead = False

    # the channel
    def _send(self, msg: dict) -> None:
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as e:
            self.dead = True
            raise ZygoteDied(f"the warm judge is gone: {e}") from e

    def _line(self, deadline: float | None) -> dict | None:
        """The zygote's next message; None when the deadline passed first."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            data = os.read(fd, 1 << 16)
            if not data:
                self.dead = True
                raise ZygoteDied("the warm judge ended")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except ValueError as e:
            self.dead = True
            raise ZygoteDied("the warm judge sent a malformed line") from e
        if not isinstance(msg, dict):
            self.dead = True
            raise ZygoteDied("the warm judge sent a malformed line")
        return msg

    def ready(self, timeout: float = READY_TIMEOUT_S) -> str | None:
        """None once the zygote is ready to fork; else why it cannot be used."""
        try:
            msg = self._line(time.monotonic() + timeout)
        except ZygoteDied as e:
            return str(e)
        if msg is None:
            return f"the warm judge was not ready within {timeout:.0f} s"
        return None if msg.get("ready") is True else str(msg.get("why") or "the warm judge is not usable")

    def wait_exit(self, rid: str, deadline: float | None) -> int | None:
        while rid not in self.exits:
            msg = self._line(deadline)
            if msg is None:
                return None
            if "id" in msg and isinstance(msg.get("exit"), int):
                self.exits[str(msg["id"])] = msg["exit"]
        return self.exits.pop(rid)

    def launch(self, job_path: Path, out_path: Path, log: Path, cwd: Path, stdin: bool) -> ForkedWorker:
        self.next_id += 1
        rid = str(self.next_id)
        req = {"op": "start", "id": rid, "job": str(job_path), "out": str(out_path), "log": str(log)}
        with contextlib.suppress(AttributeError, OSError):  # the CPUs this thread may use now (cluster/cores)
            req["cpus"] = sorted(os.sched_getaffinity(0))
        self._send({**req, "cwd": str(cwd), "stdin": stdin})
        return ForkedWorker(self, rid, stdin)

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdout.close()
        import shutil

        shutil.rmtree(self.home, ignore_errors=True)


class _Feed:
    """A forked judge's stdin as the parent writes it (harness/isolation.py: one line, then close)."""

    def __init__(self, child: ForkedWorker):
        self.child, self.data = child, b""

    def write(self, data: bytes) -> None:
        self.data += data

    def close(self) -> None:
        self.child.zygote._send({"op": "feed", "id": self.child.rid, "data": self.data.decode()})


class ForkedWorker:
    """What harness/isolation.py uses of a worker's subprocess.Popen, for a child of a warm judge."""

    def __init__(self, zygote: WarmJudge, rid: str, stdin: bool):
        self.zygote, self.rid = zygote, rid
        self.pid = None  # in the zygote's PID namespace: not a PID this process could signal
        self.returncode: int | None = None
        self.stdin = _Feed(self) if stdin else None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            deadline = None if timeout is None else time.monotonic() + timeout
            try:
                code = self.zygote.wait_exit(self.rid, deadline)
            except ZygoteDied:
                code = -signal.SIGKILL
            if code is None:
                raise subprocess.TimeoutExpired(f"warm judge child {self.rid}", timeout)
            self.returncode = code
        return self.returncode

    def poll(self) -> int | None:
        try:
            return self.wait(0)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ZygoteDied):
                self.zygote._send({"op": "kill", "id": self.rid})
