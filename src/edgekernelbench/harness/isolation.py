"""Runs one job in a worker process: a clean environment (no API keys or other secrets), a memory limit,
a wall-clock timeout, its own process group. A crash, hang or memory blow-up of the candidate
becomes a recorded failure; the caller carries on.

The memory limit is an address-space limit (RLIMIT_AS), except for jobs on a local GPU: a GPU runtime
reserves far more virtual address space than it uses (CUDA maps the device's memory and the host's
into one range), so there the parent watches the resident memory of the worker's processes instead
and kills the worker past the limit."""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ..records import Result
from .job import Job
from .sandbox import Isolation

log = logging.getLogger(__name__)

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
    disk_mb: int = 2048  # what a worker may write into its directory (the only place it can write)


RSS_POLL_S = 0.05
DISK_POLL_S = 0.25
MAX_JOB_ENTRIES = 20_000  # files and folders a worker's directory may hold


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
        # NumPy's BLAS starts its threads when NumPy is imported (OpenBLAS: OMP_NUM_THREADS of them), and
        # a process with threads cannot fork its runners safely; the judge does no BLAS work worth them
        OPENBLAS_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def _limit(limits: Limits):
    parent = os.getpid()
    disk_bytes = limits.disk_mb * 2**20

    def apply():
        if limits.address_space:
            lim = limits.memory_mb * 2**20
            resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (disk_bytes, disk_bytes))  # no file past the disk limit
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


MAX_RESULT_BYTES = 64 * 2**20  # a worker's result or module file larger than this is not read


@dataclass
class Worker:
    """One sandboxed worker process and where it keeps its files."""

    proc: subprocess.Popen
    dir: Path
    log: Path
    isolation: Isolation
    deadline: float


def _export_graph(job: Job, directory: Path) -> None:
    """The problem's graph, built here, for the worker to take (Problem.adopt_graph): an L3 model's
    calibration runs ONNX Runtime, whose threads would leave the judge unable to fork its runner. A problem
    that does not build here is left to the worker, which reports it."""
    from ..problems import get_problem

    try:
        get_problem(job.problem).export_graph(directory)
    except Exception as e:  # noqa: BLE001 -- the worker builds it itself, and says what is wrong
        log.debug("%s: graph not handed to the worker: %s", job.problem, e)


def _readable(job: Job) -> list[str]:
    """Files a worker must read beyond Python and the system: the native ONNX Runtime timer, the user's
    problem suite and backend profile files (never the run directory)."""
    from ..backends.profiles import user_profile_files
    from ..problems.user import user_suite_dir

    paths = [job.ort_timer_lib or "", job.call_loop_lib or "", str(user_suite_dir())]
    paths += [str(f) for f in user_profile_files()]
    return [p for p in paths if p]


def _start(job: Job, job_dir: Path, limits: Limits, *, stdin=subprocess.DEVNULL, warm=None) -> Worker:
    """Starts `python -m edgekernelbench.harness.worker` on `job` in its own sandbox (harness/sandbox.py):
    job_dir is the only place it can write; its output goes to a log file beside job_dir (not in it).
    `warm` (a WarmJudge): the worker is forked from it instead (harness/zygote.py), same sandbox."""
    from .sandbox import plan

    job_dir.mkdir(mode=0o700)
    profile = job.resolved_profile() if job.task != "build" else None
    remote = bool(profile and (job.tracker or profile.run == "remote"))
    gpu = bool(profile and profile.uses_local_gpu(job.tracker))
    prefix, iso = plan(str(job_dir), network=remote, extra_read=_readable(job), gpu=gpu)
    if warm is not None and job.task == "evaluate":  # a judge: it may also write its warm judge's kernels
        job.kernel_cache = iso.kernel_cache = str(warm.kernel_cache)
        iso.write.append(job.kernel_cache)
    job.sandbox = {"read": iso.read, "write": iso.write, "landlock_abi": iso.landlock_abi}
    job_path, out_path = job_dir / "job.json", job_dir / "result.json"
    job_path.write_text(job.to_json())
    log = job_dir.parent / f"{job_dir.name}.log"
    if warm is not None:  # its children have the problem's graph already (the zygote's) or take it here
        iso.forked = True
        if job.task in ("build", "evaluate") and job.problem != warm.key[0]:
            _export_graph(job, job_dir)
        proc = warm.launch(job_path, out_path, log, job_dir, stdin=stdin == subprocess.PIPE)
        return Worker(proc, job_dir, log, iso, time.monotonic() + limits.timeout_s)
    if job.task in ("build", "evaluate"):
        _export_graph(job, job_dir)
    with open(log, "wb") as out:
        proc = _popen(
            [*prefix, sys.executable, "-m", "edgekernelbench.harness.worker", str(job_path), str(out_path)],
            job_dir,
            job.threads,
            limits,
            stdin=stdin,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Worker(proc, job_dir, log, iso, time.monotonic() + limits.timeout_s)


def _popen(argv: list[str], home: Path, threads: int, limits: Limits, **streams) -> subprocess.Popen:
    """A sandboxed process (a worker, or a warm judge's zygote): the clean environment with `home` as its
    home and temporary directory, its own session, the limits, and death with this process."""
    return subprocess.Popen(
        argv,
        env=worker_env(threads, str(home)),
        cwd=home,
        start_new_session=True,
        preexec_fn=_limit(limits),
        **streams,
    )


def _wait(w: Worker, limits: Limits) -> tuple[bool, str]:
    """Waits for the worker until its deadline: (timed out, the limit it was killed past: "memory" -- its
    resident memory, where that is what is limited --, "disk" -- what it wrote into its directory --, or
    ""). Whatever it left behind is killed (its process group; its PID namespace dies with it)."""
    timed_out, over = False, ""
    memory, disk = limits.memory_mb * 2**20, limits.disk_mb * 2**20
    poll = DISK_POLL_S if limits.address_space else RSS_POLL_S
    while True:
        try:
            w.proc.wait(timeout=max(0.0, min(poll, w.deadline - time.monotonic())))
            break
        except subprocess.TimeoutExpired:
            pass
        if time.monotonic() > w.deadline:
            timed_out = True
        elif not limits.address_space and _tree_rss(w.proc.pid) > memory:
            over = "memory"
        elif _dir_over(w.dir, disk):
            over = "disk"
        if timed_out or over:
            break
    _kill_group(w.proc)
    w.proc.wait()
    return timed_out, over


def _dir_over(directory: Path, limit: int) -> bool:
    """Whether `directory` holds more than `limit` bytes (allocated blocks) or more than MAX_JOB_ENTRIES
    entries; links are not followed."""
    total = entries = 0
    todo = [str(directory)]
    while todo:
        try:
            it = os.scandir(todo.pop())
        except OSError:
            continue
        with it:
            for e in it:
                entries += 1
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += st.st_blocks * 512
                if entries > MAX_JOB_ENTRIES or total > limit:
                    return True
                if e.is_dir(follow_symlinks=False):
                    todo.append(e.path)
    return False


def _read_capped(path: Path) -> str | None:
    """The text of a file a worker wrote (its result, its status, its log): a regular file of at most
    MAX_RESULT_BYTES opened without following a link (files.read_regular), else None -- whatever is there
    instead (a symlink to /proc/self/mem or environ, a FIFO, a huge file) is never followed or read."""
    from ..files import UntrustedFileError, read_regular

    try:
        return read_regular(path, MAX_RESULT_BYTES, root=path.parent).decode(errors="replace")
    except UntrustedFileError:
        return None


def _died(w: Worker, job: Job, limits: Limits, timed_out: bool, over: str, who: str) -> Result:
    """The failure of a worker that left no readable result."""
    text = _read_capped(w.log) or ""
    res = Result(job.problem, job.sample, job.backend, candidate=job.candidate)
    if timed_out:
        return res.failure("timeout", f"{who} ran past {limits.timeout_s:.0f} s and was killed")
    if over == "disk":
        limit = f"{limits.disk_mb} MiB or {MAX_JOB_ENTRIES} files"
        return res.failure("disk", f"{who} wrote more than {limit} into its directory")
    if over:
        return res.failure("memory", f"{who}'s resident memory passed the limit ({limits.memory_mb} MiB)")
    if any(m in text for m in MEMORY_MARKERS):
        return res.failure(
            "memory", f"{who} ran out of memory (limit {limits.memory_mb} MiB): " + _tail(text)
        )
    code = w.proc.returncode
    sig = -code if code and code < 0 else (code - 128 if code and code > 128 else None)
    why = f"signal {signal.Signals(sig).name}" if sig in iter(signal.Signals) else f"exit code {code}"
    return res.failure("crash", f"{who} died ({why}): {_tail(text)}")


def _judge_result(w: Worker, job: Job, limits: Limits, timed_out: bool, over: str) -> Result:
    text = None if timed_out else _read_capped(w.dir / "result.json")
    if text is None:
        return _died(w, job, limits, timed_out, over, "worker")
    import json

    try:
        res = Result.from_dict(json.loads(text))
    except (ValueError, TypeError, KeyError) as e:
        return Result(job.problem, job.sample, job.backend, candidate=job.candidate).failure(
            "infra", f"the judge's result does not parse: {type(e).__name__}: {e}"
        )
    return check_result(res, job)


def run_in_worker(job: Job, limits: Limits = Limits()) -> Result:
    """Judges one job. A candidate goes through two sandboxed processes: the builder (everything the
    candidate controls as Python: harness/builder.py) and the judge (loads the builder's IRModule JSON as
    data, verifies, builds, checks against the oracle, times); within `warm_judge()`, both are forked from
    the thread's warm judge (harness/zygote.py) where it serves the job. A job without a candidate (task
    "floors") runs in one sandboxed worker. Whatever goes wrong with one job is that job's recorded
    failure ("infra" when it is not the candidate's: the harness's own), never an exception that ends a
    run."""
    t0 = time.perf_counter()
    prepare_fork()  # before the fork (see there)
    try:
        with tempfile.TemporaryDirectory(prefix="ekb-job-") as tmp:
            res = _run_job_here(job, limits, Path(tmp))
    except Exception as e:  # noqa: BLE001 -- one candidate's failure, recorded; the run goes on
        log.exception("%s#%d: the harness failed on this job", job.problem, job.sample)
        res = Result(job.problem, job.sample, job.backend, candidate=job.candidate).failure(
            "infra", f"the harness failed on this candidate: {type(e).__name__}: {e}"
        )
    if res.reason in ("runtime_error", "compile_error") and any(m in res.detail for m in MEMORY_MARKERS):
        res.reason = "memory"
    res.eval_seconds = time.perf_counter() - t0
    return res


def _run_job_here(job: Job, limits: Limits, tmp: Path) -> Result:
    if job.task == "evaluate":
        res = _judge_warm(job, limits, tmp)
        return res if res is not None else _build_and_judge(job, limits, tmp)
    w = _start(replace(job), tmp / "worker", limits)
    res = _judge_result(w, job, limits, *_wait(w, limits))
    res.extra["isolation"] = w.isolation.describe()
    return res


def _build_and_judge(job: Job, limits: Limits, tmp: Path, warm=None) -> Result:
    """The judge starts first and does its trusted work (reference, baselines, oracle) while the builder
    materializes the candidate; the judge then gets the builder's module file (copied into its own
    directory by this process) through its stdin, and nothing else from the builder. `warm`: both are
    forked from this warm judge (harness/zygote.py)."""
    from .builder import MODULE_FILE

    t0 = time.perf_counter()
    judge_job = replace(job, spec=judge_spec(job.spec), handoff=True)
    judge = _start(judge_job, tmp / "judge", limits, stdin=subprocess.PIPE, warm=warm)
    builder_job = Job(
        problem=job.problem,
        sample=job.sample,
        backend=job.backend,
        spec=job.spec,
        candidate=job.candidate,
        threads=job.threads,
        timeout_s=job.timeout_s,
        task="build",
    )
    builder = _start(builder_job, tmp / "build", limits, warm=warm)
    t_started = time.perf_counter()
    isolation = {"builder": builder.isolation.describe(), "judge": judge.isolation.describe()}
    failure = _builder_failure(builder, job, limits, *_wait(builder, limits))
    t_built = time.perf_counter()
    module = None
    if failure is None:
        module, failure = _builder_module(builder, job)
    if failure is None:
        _write_new(judge.dir / MODULE_FILE, module)
        with contextlib.suppress(BrokenPipeError, OSError):  # a judge that stopped early says why itself
            judge.proc.stdin.write((MODULE_FILE + "\n").encode())
            judge.proc.stdin.close()
        res = _judge_result(judge, job, limits, *_wait(judge, limits))
        res.extra["parent_phases"] = {  # what this process waited for (the judge's own: extra["phases"])
            "started": round(t_started - t0, 4),
            "builder": round(t_built - t_started, 4),
            "judge_after_builder": round(time.perf_counter() - t_built, 4),
        }
        traces = _builder_status(builder).get("schedule_traces")
        if traces and isinstance(traces, dict):  # what a model's schedule_code did, as replayable traces
            res.extra["schedule_traces"] = traces
    else:
        _kill_group(judge.proc)
        judge.proc.wait()
        res = failure
        _fill_from_spec(res, job)
    res.extra["isolation"] = isolation
    return res


def _builder_module(w: Worker, job: Job) -> tuple[bytes | None, Result | None]:
    """(the module the builder wrote, None), or (None, the candidate's failure): the builder runs what the
    candidate controls, so its directory is read as hostile -- module.json must be a regular file of at
    most MAX_RESULT_BYTES, not a link (files.read_regular)."""
    from ..files import UntrustedFileError, read_regular
    from .builder import MODULE_FILE

    try:
        return read_regular(w.dir / MODULE_FILE, MAX_RESULT_BYTES, root=w.dir), None
    except UntrustedFileError as e:
        out = Result(job.problem, job.sample, job.backend, candidate=job.candidate)
        missing = not os.path.lexists(w.dir / MODULE_FILE)
        why = "the builder wrote no module" if missing else f"the builder's module is not a plain file: {e}"
        return None, out.failure("parse_error" if missing else "forbidden", why)


def _write_new(path: Path, data: bytes) -> None:
    """Writes a file that must not exist yet (O_EXCL, O_NOFOLLOW: nothing there is followed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _builder_status(w: Worker) -> dict:
    import json

    from .builder import STATUS_FILE

    text = _read_capped(w.dir / STATUS_FILE)
    try:
        status = json.loads(text) if text else {}
    except ValueError:
        status = {}
    return status if isinstance(status, dict) else {}


BUILDER_REASONS = ("parse_error", "decision_error", "signature")


def _builder_failure(w: Worker, job: Job, limits: Limits, timed_out: bool, over: str) -> Result | None:
    """None when the builder says it made a module; else the candidate's failure (the builder's reason,
    limited to the reasons a builder can give, or how it died)."""
    status = {} if timed_out else _builder_status(w)
    if status.get("ok") is True:
        return None
    if not status:
        return _died(w, job, limits, timed_out, over, "builder")
    reason = status.get("reason") if status.get("reason") in BUILDER_REASONS else "parse_error"
    detail = status.get("detail")
    return Result(job.problem, job.sample, job.backend, candidate=job.candidate).failure(
        reason, detail if isinstance(detail, str) else "the builder failed"
    )


def judge_spec(spec: dict) -> dict:
    """What the judge gets of a spec: no module text, no schedule code, no traces (the builder's job),
    only the data it needs: the spec's identity (hash), who made it, and its target attributes."""
    from ..errors import MalformedCandidate
    from ..ir.spec import KernelSpec

    try:
        full = KernelSpec.from_dict(spec)
    except MalformedCandidate:  # the builder reports it as the candidate's parse error
        return {"problem": spec.get("problem"), "spec_hash": "", "method": "", "target_attrs": {}}
    return {
        "problem": full.problem,
        "spec_hash": full.hash(),
        "method": full.method,
        "target_attrs": dict(full.decisions.target_attrs),
    }


def _fill_from_spec(res: Result, job: Job) -> None:
    """A builder failure: the record's spec hash and method, read from the spec as data."""
    from ..ir.spec import KernelSpec
    from ..problems import get_problem

    with contextlib.suppress(Exception):
        spec = KernelSpec.from_dict(job.spec)
        res.spec_hash, res.method = spec.hash(), spec.method
    with contextlib.suppress(Exception):
        problem = get_problem(job.problem)
        res.flops, res.bytes = problem.flops, problem.bytes_moved


def check_result(res: Result, job: Job) -> Result:
    """The parent's check of what a judge returned: it is about this job, its reason is a known one, its
    timings are finite and positive, and its speedups follow from its own timing rounds (recomputed here
    from the rounds the judge reported; a mismatch means the judge's result was tampered with)."""
    import math

    from ..records import FAIL_REASONS
    from .timing import paired_speedup

    def bad(why: str, reason: str = "infra") -> Result:
        out = Result(job.problem, job.sample, job.backend, candidate=job.candidate)
        return out.failure(reason, f"the judge's result was rejected: {why}")

    if (res.problem, res.sample, res.backend) != (job.problem, job.sample, job.backend):
        return bad(f"it is about {res.problem}#{res.sample} on {res.backend}")
    if res.reason is not None and res.reason not in FAIL_REASONS:
        return bad(f"unknown failure reason {res.reason!r}")
    if res.correct and res.reason is not None:
        return bad("correct with a failure reason")
    if res.seed is not None and (not isinstance(res.seed, int) or isinstance(res.seed, bool) or res.seed < 0):
        return bad(f"its seed {res.seed!r} is not a non-negative integer")
    if job.seed is not None and res.seed not in (None, job.seed):
        return bad(f"it used seed {res.seed}, the job gave {job.seed}")
    timings = ([res.runtime] if res.runtime else []) + list(res.baselines.values())
    for t in timings:
        if not all(
            isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in [t.median, *t.samples]
        ):
            return bad("a timing that is not a finite positive number", "forbidden")
    if res.runtime is not None:
        for name, t in res.baselines.items():
            s, lo, hi = paired_speedup(t, res.runtime)
            got = res.speedups.get(name)
            if got is None or not math.isclose(got, s, rel_tol=1e-9):
                return bad(
                    f"its speedup vs {name} ({got}) does not follow from its timings ({s:.6g})", "forbidden"
                )
            res.speedups[name], res.speedup_ci[name] = s, [lo, hi]
        if set(res.speedups) - set(res.baselines):
            return bad("a speedup against a baseline it did not time", "forbidden")
    return res


def _tail(text: str, n: int = 1500) -> str:
    return text.strip()[-n:]


def _kill_group(proc) -> None:
    if not isinstance(proc, subprocess.Popen):  # forked from a warm judge: it kills what it forked
        proc.kill()
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


# ------------------------------------------------------------------------------------------ warm judges
_WARM = threading.local()


@contextlib.contextmanager
def warm_judge():
    """Within this block, the candidates this thread judges on this machine's CPU are built and judged by
    processes forked from one warm judge (harness/zygote.py): TVM imported once, not once per process, and
    the first job's problem's reference and tvm-default baseline built in it (a child of another problem
    builds its own: a zygote started per problem would cost a TVM import each). Closed when the block
    ends; nested blocks share the outer one."""
    if getattr(_WARM, "slot", None) is not None:
        yield
        return
    _WARM.slot = slot = {"judge": None, "refused": {}}
    try:
        yield
    finally:
        _WARM.slot = None
        _close_slot(slot)


def lasting_warm_judge() -> None:
    """warm_judge() for the rest of this thread's life (it ends with the process; its zygote with its
    stdin): a cluster worker's, which judges one candidate per task, of whatever problem comes
    (cluster/tasks.py). A thread in a warm_judge() block keeps that one."""
    if getattr(_WARM, "slot", None) is not None:
        return
    _WARM.slot = slot = {"judge": None, "refused": {}}
    import atexit

    atexit.register(_close_slot, slot)


def _close_slot(slot: dict) -> None:
    if slot["judge"] is not None:
        slot["judge"].close()
        slot["judge"] = None


def _warm_key(job: Job, limits: Limits) -> tuple | None:
    """What a warm judge is started for; None: this job is not one a warm judge serves (a device, a GPU,
    a remote backend: those keep fresh workers)."""
    if job.task != "evaluate" or job.tracker or not limits.address_space:
        return None
    profile = job.resolved_profile()
    if profile.kind != "host" or profile.run != "local":
        return None
    import json

    return (
        job.problem,
        json.dumps(job.backend_profile, sort_keys=True),
        json.dumps(job.ort_isa, sort_keys=True),  # its processes hide those CPUID bits from ONNX Runtime
        job.threads,
        limits.memory_mb,
    )


def _warm_for(job: Job, limits: Limits):
    """The thread's warm judge for `job`, started (or replaced) when needed; None: judge without one."""
    slot = getattr(_WARM, "slot", None)
    key = _warm_key(job, limits) if slot is not None else None
    if key is None:
        return None
    current = slot["judge"]  # it serves any problem: key[0] is the one it preloaded
    if current is not None and (
        current.key[1:] != key[1:] or current.dead or current.proc.poll() is not None
    ):
        current.close()
        slot["judge"] = current = None
    if current is None:
        if key in slot["refused"]:  # per problem: its preload may be what failed
            return None
        current, why = _start_warm(job, limits, key)
        if current is None:
            log.warning("judging without a warm judge: %s", why)
            slot["refused"][key] = why
            return None
        slot["judge"] = current
    return current


def _start_warm(job: Job, limits: Limits, key: tuple):
    """(WarmJudge, "") once its zygote is ready, else (None, why)."""
    import json

    from .sandbox import plan
    from .warm import WarmJudge

    home = Path(tempfile.mkdtemp(prefix="ekb-warm-"))
    prefix, iso = plan(str(home), extra_read=_readable(job))
    if not prefix:
        shutil.rmtree(home, ignore_errors=True)
        return None, "no namespaces here: " + "; ".join(iso.weaker)
    spec = home / "preload.json"
    _export_graph(job, home)
    spec.write_text(
        json.dumps(
            {
                "problem": job.problem,
                "graph_dir": str(home),
                "threads": job.threads,
                "backend_profile": job.backend_profile,
                "ort_isa": job.ort_isa,
                "ort_isa_unavailable": job.ort_isa_unavailable,
            }
        )
    )
    with open(home / "zygote.log", "wb") as err:
        proc = _popen(
            [*prefix, sys.executable, "-m", "edgekernelbench.harness.zygote", str(spec)],
            home,
            job.threads,
            limits,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
        )
    warm = WarmJudge(key, proc, home)
    why = warm.ready()
    if why is not None:
        warm.close()
        return None, why
    return warm, ""


def _judge_warm(job: Job, limits: Limits, tmp: Path) -> Result | None:
    """The job judged by processes forked from the thread's warm judge; None: not served by one (no warm
    judge, or it died during the job: the job is then judged again by fresh workers)."""
    warm = _warm_for(job, limits)  # the thread's own: no other thread uses it
    if warm is None:
        return None
    res = _build_and_judge(job, limits, tmp, warm=warm)
    if warm.dead:
        log.warning(
            "%s#%d: the warm judge ended mid-job; judged again by fresh workers", job.problem, job.sample
        )
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        return None
    return res
