"""cli: an external coding agent (Claude Code, Codex CLI, Aider, ...) run as a subprocess in a prepared
workspace, with the same model and budget.

The workspace (RUN_DIR/agents/cli/<problem>/workspace) holds TASK.md (the versioned `cli_task` template),
reference.py (the reference TVMScript) and `check`, a small script that sends candidate.py to this process
over a UNIX socket: here the candidate is judged by the same judge as `ekb eval` (one evaluation of the
budget; past B, `check` is refused) and the verdict goes back as text. The agent runs confined
(harness.api.confine_command: Landlock, it can write only beneath its workspace; HOME is inside it), with
the wall-clock cap left of the budget; a crash or a hang (killed at the cap) is recorded and the run goes
on. Its last candidate.py is its final candidate, judged afresh by the run when it stops (agents/run.py).
Its own model calls and tokens happen inside the agent and are not counted here (recorded as such)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..generators.reference_candidates import reference_spec
from ..harness.api import confine_command
from ..ir.spec import KernelSpec
from ..llm.prompts import render_prompt
from .budget import BudgetExhausted
from .episode import Episode, profile_rows, verdict_text

MAX_CANDIDATE = 1 << 20
CHECK = """#!{python}
# Sends candidate.py to the judge and prints its verdict (EdgeKernelBench `ekb agent --methods cli`).
import os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect({sock!r})
s.sendall(b"check\\n")
out = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    out += chunk
text = out.decode(errors="replace")
print(text)
sys.exit(0 if text.startswith("correct") else 1)
"""


def workspace(ep: Episode) -> Path:
    return Path(ep.run_dir) / "agents" / "cli" / ep.problem.id.replace("/", "_") / "workspace"


def _candidate(ws: Path) -> tuple[str | None, str]:
    path = ws / "candidate.py"
    if not path.is_file():
        return None, "no candidate.py in the workspace"
    if path.stat().st_size > MAX_CANDIDATE:
        return None, "candidate.py is larger than 1 MiB"
    return path.read_text(errors="replace"), ""


def _spec(ep: Episode, code: str) -> KernelSpec:
    return KernelSpec(problem=ep.problem.id, method=f"agent:{ep.method}", schedule_code=code)


def _verdict(res) -> str:
    lines = [verdict_text(res)]
    if not res.correct and res.detail:
        lines.append(res.detail.strip()[-1500:])
    for r in profile_rows(res):
        lines.append(f"kernel {r.kernel}: {100 * r.share:.1f}% of the time, {r.us:.2f} us")
    return "\n".join(lines) + "\n"


class CheckServer:
    """Answers the workspace's `check`: judges candidate.py, counting the budget. Served from the thread
    that runs the episode (the run store and the judge are used from one thread), between polls of the
    agent's process."""

    def __init__(self, ep: Episode, ws: Path):
        self.ep, self.ws = ep, ws
        self.dir = tempfile.mkdtemp(prefix="ekb-cli-")  # a short path: UNIX socket names are short
        self.path = os.path.join(self.dir, "judge.sock")
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(self.path)
        self.sock.listen(4)
        self.last: tuple[str, object] | None = None  # (digest of the checked file, its result)
        self.checks = 0

    def wait(self, proc: subprocess.Popen, timeout: float) -> int:
        """Serves checks until `proc` exits (its exit code); past `timeout` s, subprocess.TimeoutExpired."""
        deadline = time.monotonic() + timeout
        while (code := proc.poll()) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, timeout)
            ready, _, _ = select.select([self.sock], [], [], min(0.2, left))
            if ready:
                self._answer()
        return code

    def _answer(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            try:
                conn.settimeout(10.0)  # a client that connects and says nothing does not stall the episode
                conn.recv(64)
                conn.sendall(self._check().encode())
            except OSError:
                return

    def _check(self) -> str:
        code, why = _candidate(self.ws)
        if code is None:
            return f"refused: {why}\n"
        self.checks += 1
        try:
            res = self.ep.judge(_spec(self.ep, code), label=f"check {self.checks}")
        except BudgetExhausted as e:
            self.ep.record(kind="check-refused", why=str(e))
            return f"refused: the budget is spent ({e})\n"
        self.last = (hashlib.sha256(code.encode()).hexdigest(), res)
        return _verdict(res)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
            os.rmdir(self.dir)


def prepare(ep: Episode, sock_path: str) -> Path:
    ws = workspace(ep)
    ws.mkdir(parents=True, exist_ok=True)
    (ws / ".home").mkdir(exist_ok=True)
    task = render_prompt("cli_task", ep.problem, ep.cfg.backend, budget=ep.cfg.budget.evals)
    (ws / "TASK.md").write_text(task.user)
    (ws / "reference.py").write_text(reference_spec(ep.problem).module)
    check = ws / "check"
    check.write_text(CHECK.format(python=sys.executable, sock=sock_path))
    check.chmod(0o755)
    return ws


def run_cli(ep: Episode) -> None:
    if not ep.cfg.agent_cmd:
        ep.record(kind="skipped", why="no --agent-cmd")
        return
    server = CheckServer(ep, workspace(ep))
    try:
        ws = prepare(ep, server.path)
        argv = shlex.split(
            ep.cfg.agent_cmd.format(workspace=ws, task=ws / "TASK.md", model=ep.cfg.model or "")
        )
        env = {
            **os.environ,
            "HOME": str(ws / ".home"),
            "EKB_MODEL": ep.cfg.model or "",
            "EKB_CHECK": str(ws / "check"),
        }
        log_path = ws.parent / "agent.log"
        timeout = max(1.0, ep.cfg.budget.wall_s - ep.usage.wall_s)
        t0 = time.monotonic()
        outcome = {"kind": "agent", "command": argv, "calls_counted": False}
        with open(log_path, "wb") as log:
            try:
                proc = subprocess.Popen(
                    confine_command([str(ws)], argv),
                    cwd=ws,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as e:
                ep.record(**outcome, status="failed to start", error=str(e))
                return
            try:
                code = server.wait(proc, timeout)
                outcome.update(status="exited" if code == 0 else "crashed", exit_code=code)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                outcome.update(status="timeout", exit_code=None)
        outcome["seconds"] = round(time.monotonic() - t0, 3)
        outcome["log_tail"] = log_path.read_text(errors="replace")[-1000:]
        ep.record(**outcome)
        _final(ep, server, ws)
    finally:
        server.close()


def _final(ep: Episode, server: CheckServer, ws: Path) -> None:
    """The agent's last candidate.py: the run judges it afresh (uncharged), like every method's final
    candidate; its last check's result, when the file is unchanged, is kept as what the agent saw."""
    code, why = _candidate(ws)
    if code is None:
        ep.record(kind="final-missing", error=why)
        return
    digest = hashlib.sha256(code.encode()).hexdigest()
    checked = server.last[1] if server.last and server.last[0] == digest else None
    ep.final = (_spec(ep, code), checked)
