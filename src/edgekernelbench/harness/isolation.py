"""Runs one job in a worker process: a clean environment (no API keys or other secrets), an address-space
limit, a wall-clock timeout, its own process group. A crash, hang or memory blow-up of the candidate
becomes a recorded failure; the caller carries on."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .job import Job
from .result import Result

# Only these variables reach a worker; everything else (API keys, tokens, credentials) stays behind.
ENV_ALLOW = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "PYTHONPATH",
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "EKB_PROBLEM_MODULES",
)
MEMORY_MARKERS = (
    "MemoryError",
    "bad_alloc",
    "Cannot allocate memory",
    "out of memory",
    "OutOfMemory",
    "failed to allocate",
    "Failed to allocate",
)


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 300.0
    memory_mb: int = 6144  # address space; TVM and LLVM need about 1.5 GiB of it to start


def worker_env(threads: int, home: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ}
    from ..backends.profiles import user_profile_files
    from ..problems.user import user_suite_dir

    env.update(
        EKB_USER_SUITE=str(user_suite_dir()),
        # the parent's user profiles, resolved before HOME changes (dict keeps order, drops repeats)
        EKB_PROFILES=os.pathsep.join(dict.fromkeys(str(f) for f in user_profile_files())),
        HOME=home,
        TMPDIR=home,
        TVM_NUM_THREADS=str(threads),
        OMP_NUM_THREADS=str(threads),
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def _limit(memory_mb: int):
    def apply():
        lim = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        _die_with_parent()

    return apply


def _die_with_parent() -> None:
    """Linux: the worker gets SIGKILL when the process that started it dies (it has its own session,
    so a signal to the parent's process group would not reach it)."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def run_in_worker(job: Job, limits: Limits = Limits()) -> Result:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ekb-worker-") as tmp:
        job_path, out_path = Path(tmp, "job.json"), Path(tmp, "result.json")
        job_path.write_text(job.to_json())
        cmd = [sys.executable, "-m", "edgekernelbench.harness.worker", str(job_path), str(out_path)]
        proc = subprocess.Popen(
            cmd,
            env=worker_env(job.threads, tmp),
            cwd=tmp,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_limit(limits.memory_mb),
        )
        try:
            out, _ = proc.communicate(timeout=limits.timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, _ = proc.communicate()
            timed_out = True
        _kill_group(proc)  # anything the worker left behind
        text = (out or b"").decode(errors="replace")
        if out_path.exists() and not timed_out:
            import json

            res = Result.from_dict(json.loads(out_path.read_text()))
        else:
            res = Result(job.problem, job.sample, job.backend, candidate=job.candidate)
            if timed_out:
                res.failure("timeout", f"worker ran past {limits.timeout_s:.0f} s and was killed")
            elif any(m in text for m in MEMORY_MARKERS):
                res.failure(
                    "memory", f"worker ran out of memory (limit {limits.memory_mb} MiB): " + _tail(text)
                )
            else:
                sig = -proc.returncode if proc.returncode and proc.returncode < 0 else None
                why = f"signal {signal.Signals(sig).name}" if sig else f"exit code {proc.returncode}"
                res.failure("crash", f"worker died ({why}): {_tail(text)}")
    if res.reason in ("runtime_error", "compile_error") and any(m in res.detail for m in MEMORY_MARKERS):
        res.reason = "memory"
    res.eval_seconds = time.perf_counter() - t0
    return res


def _tail(text: str, n: int = 1500) -> str:
    return text.strip()[-n:]


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
