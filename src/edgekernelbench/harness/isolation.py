"""Runs one job in a worker process: a clean environment (no API keys or other secrets), a memory limit,
a wall-clock timeout, its own process group. A crash, hang or memory blow-up of the candidate
becomes a recorded failure; the caller carries on.

The memory limit is an address-space limit (RLIMIT_AS), except for jobs on a local GPU: a GPU runtime
reserves far more virtual address space than it uses (CUDA maps the device's memory and the host's
into one range), so there the parent watches the resident memory of the worker's processes instead
and kills the worker past the limit."""

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
    # where a GPU's driver and toolkit are (not secrets): CUDA devices and libraries, nvcc for TVM
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_HOME",
    "CUDA_PATH",
    "NVIDIA_VISIBLE_DEVICES",
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
    address_space: bool = True  # False: limit the resident memory instead (GPU runtimes; see above)


RSS_POLL_S = 0.05


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


def _limit(memory_mb: int, address_space: bool = True):
    parent = os.getpid()

    def apply():
        if address_space:
            lim = memory_mb * 2**20
            resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        _die_with_parent(parent)

    return apply


def _tree_rss(pid: int) -> int:
    """Resident bytes of process `pid` and its descendants (0 once it is gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total


def _wait(proc: subprocess.Popen, limits: Limits) -> tuple[bytes, bool, bool]:
    """Waits for the worker: (its output, timed out, killed past the resident-memory limit)."""
    if limits.address_space:
        try:
            out, _ = proc.communicate(timeout=limits.timeout_s)
            return out, False, False
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return proc.communicate()[0], True, False
    import threading

    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.append(proc.stdout.read()), daemon=True)
    reader.start()
    deadline, limit = time.monotonic() + limits.timeout_s, limits.memory_mb * 2**20
    timed_out = over = False
    while proc.poll() is None:
        if time.monotonic() > deadline:
            timed_out = True
        elif _tree_rss(proc.pid) > limit:
            over = True
        if timed_out or over:
            _kill_group(proc)
            break
        time.sleep(RSS_POLL_S)
    proc.wait()
    reader.join()
    return b"".join(chunks), timed_out, over


def prepare_fork():
    """libc's prctl, looked up in the parent: the child (between fork and exec, possibly forked while
    other threads of the parent start workers too) must not dlopen anything."""
    global _PRCTL
    if _PRCTL is None and sys.platform.startswith("linux"):
        import ctypes

        try:
            _PRCTL = ctypes.CDLL("libc.so.6", use_errno=True).prctl
        except (OSError, AttributeError):
            _PRCTL = False
    return _PRCTL


_PRCTL = None


def _die_with_parent(parent: int) -> None:
    """Linux: the worker gets SIGKILL when the process that started it dies (it has its own session,
    so a signal to the parent's process group would not reach it). A parent that died before the
    signal was armed has already left the worker to another process: then it stops at once."""
    prctl = _PRCTL
    if prctl:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(137)


def run_in_worker(job: Job, limits: Limits = Limits()) -> Result:
    t0 = time.perf_counter()
    prepare_fork()  # before the fork (see there)
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
            preexec_fn=_limit(limits.memory_mb, limits.address_space),
        )
        out, timed_out, over_memory = _wait(proc, limits)
        _kill_group(proc)  # anything the worker left behind
        text = (out or b"").decode(errors="replace")
        if out_path.exists() and not timed_out:
            import json

            res = Result.from_dict(json.loads(out_path.read_text()))
        else:
            res = Result(job.problem, job.sample, job.backend, candidate=job.candidate)
            if timed_out:
                res.failure("timeout", f"worker ran past {limits.timeout_s:.0f} s and was killed")
            elif over_memory:
                res.failure("memory", f"worker's resident memory passed the limit ({limits.memory_mb} MiB)")
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
