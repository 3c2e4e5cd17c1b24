"""Run directories: discover candidate files, evaluate what is not done yet, keep results in the store.

The run directory's layout is rundir.py's.

`ekb baseline` (the baselines and timer floors kept in a run store) is runs/baselines.py.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import metrics
from ..backends.base import BackendProfile
from ..backends.peak import profile_peak
from ..cluster.session import ClusterConfig
from ..errors import MalformedCandidate, RunDirError
from ..files import UntrustedFileError, read_regular, sha256_hex
from ..harness.api import JudgeConfig, evaluate, profile_digest, warm_judge
from ..harness.job import judge_version
from ..harness.peak import datasheet_peak, measure_peak_isolated
from ..ir.spec import MAX_CANDIDATE_BYTES, read_candidate
from ..problems import get_problem
from ..records import Result
from ..rundir import SAMPLE_RE, candidates_dir
from ..store import RunStore, result_status

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CandidateRef:
    problem: str
    sample: int
    path: Path


def discover(run_dir: Path) -> list[CandidateRef]:
    """Every candidate file under RUN_DIR/candidates; unknown problems and stray files are errors."""
    root = candidates_dir(run_dir)
    if not root.is_dir():
        raise RunDirError(
            f"{run_dir}: no candidates/ directory (expected candidates/<problem id>/sample<k>.py|.json)"
        )
    refs: list[CandidateRef] = []
    seen: dict[tuple[str, int], Path] = {}
    for path in sorted(root.rglob("*")):
        if path.is_dir() or path.name.startswith("."):
            continue
        m = SAMPLE_RE.match(path.name)
        problem = path.parent.relative_to(root).as_posix()
        if not m:
            raise RunDirError(f"{path}: candidate files are named sample<k>.py or sample<k>.json")
        get_problem(problem)  # UnknownProblem for a directory that names no problem
        key = (problem, int(m.group(1)))
        if key in seen:
            raise RunDirError(f"{path}: sample {key[1]} of {problem} also given by {seen[key].name}")
        seen[key] = path
        refs.append(CandidateRef(problem, key[1], path))
    if not refs:
        raise RunDirError(f"{run_dir}: candidates/ holds no candidate files")
    return refs


@dataclass
class EvalConfig:
    """A run's configuration: which backends, how the judge judges (one JudgeConfig, carried whole to every
    judgment), and how the run goes."""

    backends: list[str] = field(default_factory=lambda: ["host-cpu"])
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    retry_infra: bool = True  # re-run records whose failure was the harness's, not the candidate's
    jobs: int | None = None  # candidates judged at once where nothing is timed here (None: local_jobs)
    # where the judgments run: a Ray cluster or a local Ray instance (--ray, --jobs N > 1;
    # runs/distributed.py); None: on this machine, by this process's workers
    cluster: ClusterConfig | None = None
    # name -> BackendProfile as its file defines it: each backend's profile, resolved once for the command
    # (the CLI fills it; `profile` resolves a missing one once) and passed down to evaluate() and its workers
    profiles: dict[str, BackendProfile] = field(default_factory=dict)

    def profile(self, backend: str) -> BackendProfile:
        """The backend's profile, with this run's thread count."""
        if backend not in self.profiles:
            from ..backends.registry import get_profile

            self.profiles[backend] = get_profile(backend)
        return self.profiles[backend].with_threads(self.judge.threads)


def local_jobs(backend: str, cfg: EvalConfig) -> int:
    """Workers at once for a backend judged on this machine. One while it times anything here (a
    second worker would disturb the timings); otherwise (emulated or compile-only backends, or
    --no-measure) cfg.jobs, by default as many as the cores allow at cfg.threads each (at most 4)."""
    profile = cfg.profile(backend)
    if cfg.judge.measure and profile.can_time:
        return 1
    if cfg.jobs:
        return max(1, cfg.jobs)
    return max(1, min(4, (os.cpu_count() or 1) // max(1, cfg.judge.threads)))


def candidate_digest(path: Path) -> str | None:
    """SHA-256 of a candidate file's current bytes, read as untrusted (files.read_regular, as
    ir.spec.read_candidate reads it); None when it cannot be read that way."""
    try:
        return sha256_hex(read_regular(path, MAX_CANDIDATE_BYTES))
    except UntrustedFileError:
        return None


def pending(store: RunStore, refs: list[CandidateRef], backend: str, retry_infra: bool) -> list[CandidateRef]:
    """The candidates to judge (again) on `backend`: those without a stored result whose row of the run
    store authenticates (none, or a forged or edited one), those whose candidate file's bytes are not the
    ones judged (Result.candidate_sha256; a result without it, from before it was recorded, counts as
    changed), those a judge of another version judged (Result.judge_version: its rules -- inputs, checks,
    baselines -- were not this judge's) and, with `retry_infra`, those whose failure was the harness's
    ("infra")."""
    stored = {(r.problem, r.sample): r for r in store.results(backend)}
    current = judge_version()
    out = []
    for ref in refs:
        r = stored.get((ref.problem, ref.sample))
        if (
            r is None
            or (retry_infra and result_status(r) == "infra")
            or not r.candidate_sha256
            or r.candidate_sha256 != candidate_digest(ref.path)
            or r.judge_version != current
        ):
            out.append(ref)
    return out


def read_ref(ref: CandidateRef, backend: str, cfg: EvalConfig):
    """(KernelSpec, SHA-256 of its bytes) of a candidate file, read as untrusted; or, when it does not parse,
    its recorded failure (a Result: parse_error, whatever the file holds being the candidate's fault)."""
    try:
        return read_candidate(ref.path, ref.problem)
    except Exception as e:  # noqa: BLE001 -- whatever the file holds is the candidate's fault: recorded
        why = str(e) if isinstance(e, MalformedCandidate) else f"{ref.path}: {type(e).__name__}: {e}"
        res = Result(ref.problem, ref.sample, backend, candidate=str(ref.path)).failure("parse_error", why)
        # the bytes that failed to parse: a resumed run skips them until they change
        return stamp(res, candidate_digest(ref.path) or "", cfg.profile(backend))


def stamp(res: Result, digest: str, profile: BackendProfile) -> Result:
    """A result the driver made itself (a candidate that does not parse, a judgment the cluster lost): the
    candidate's bytes, this judge and the profile, as evaluate() records them."""
    res.candidate_sha256, res.judge_version, res.profile_sha256 = (
        digest,
        judge_version(),
        profile_digest(profile),
    )
    return res


def evaluate_ref(
    ref: CandidateRef, backend: str, cfg: EvalConfig, tracker: str | None = None, peak: dict | None = None
) -> Result:
    read = read_ref(ref, backend, cfg)
    if isinstance(read, Result):
        return read
    spec, digest = read
    return evaluate(
        ref.problem,
        spec,
        cfg.profile(backend),
        replace(cfg.judge, tracker=tracker),
        sample=ref.sample,
        source=str(ref.path),
        peak=peak,
        candidate_sha256=digest,
    )


def preflight(backends: list[str], cfg: EvalConfig) -> None:
    """What would stop a backend midway, checked for all of them before any is run: a local GPU
    profile without its device (one clear error instead of a run that stops after the first backends)."""
    from ..backends.gpu import require_device
    from ..backends.hostinfo import require_isa

    for backend in backends:
        require_device(cfg.profile(backend), cfg.judge.tracker)
        if not (cfg.cluster and cfg.cluster.address):  # a cluster's nodes check their own CPU (cluster/tasks)
            require_isa(cfg.profile(backend))


def device_plan(backend: str, cfg: EvalConfig) -> tuple[str | None, int]:
    """(tracker, devices) when `backend` runs on remote devices (its profile's rpc_key has devices on the
    tracker, or its run is "remote"); (None, 1) for a local or emulated backend."""
    profile = cfg.profile(backend)
    if not (cfg.judge.tracker or profile.run == "remote"):
        return None, 1
    from ..backends.rpc import remote_plan

    tracker, n = remote_plan(profile, cfg.judge.tracker)
    return (tracker, max(1, n)) if tracker else (None, 1)


def _evaluate_all(todo, backend, cfg, tracker, workers, peak=None):
    """Yields (ref, Result) as items finish: in order for one worker; with several (one per remote device),
    from parallel threads, each driving one worker process."""
    if workers <= 1 or len(todo) <= 1:
        with warm_judge():  # every judgment forked from one warm judge (harness/zygote.py)
            for ref in todo:
                yield ref, evaluate_ref(ref, backend, cfg, tracker, peak)
        return
    from concurrent.futures import ThreadPoolExecutor, as_completed

    from ..harness.isolation import prepare_fork

    prepare_fork()  # what the workers' preexec_fn needs, resolved before threads start forking

    with ThreadPoolExecutor(max_workers=min(workers, len(todo)), thread_name_prefix="ekb-device") as pool:
        futures = {pool.submit(evaluate_ref, ref, backend, cfg, tracker, peak): ref for ref in todo}
        try:
            for fut in as_completed(futures):
                yield futures[fut], fut.result()
        finally:
            for fut in futures:
                fut.cancel()


def eval_run(
    run_dir: Path,
    cfg: EvalConfig,
    problems: list[str] | None = None,
    on_start: Callable[[str, int], None] | None = None,
    on_result: Callable[[Result], None] | None = None,
    on_progress: Callable | None = None,
) -> dict[str, int]:
    """Evaluates every pending (problem, sample, backend); returns counts of what was done. With
    cfg.cluster, the judgments of locally judged backends run on Ray (runs/distributed.py; `on_progress` gets
    its cluster.pool.Progress); the run store is written here, by this process only, one result per
    judgment (JudgmentKey: an answer that comes twice is recorded once)."""
    from ..backends.hostinfo import node_here
    from ..cluster.tasks import JudgmentKey

    refs = discover(run_dir)
    if problems:
        wanted = {get_problem(p).id for p in problems}
        refs = [r for r in refs if r.problem in wanted]
    counts = {"evaluated": 0, "skipped": 0, "correct": 0}
    preflight(cfg.backends, cfg)
    with RunStore(run_dir) as store, contextlib.ExitStack() as stack:
        store.set_meta("eval_config", {"backends": cfg.backends, **cfg.judge.record()})
        store.record_environment()  # the machine and software versions, for the report
        here, on_ray = None, None
        for backend in cfg.backends:
            todo = pending(store, refs, backend, cfg.retry_infra)
            counts["skipped"] += len(refs) - len(todo)
            tracker, workers = device_plan(backend, cfg) if todo else (None, 1)
            if todo and tracker is None:
                workers = local_jobs(backend, cfg)
            if on_start:
                on_start(backend, len(todo))
            if todo and tracker is None and cfg.cluster is not None:
                if on_ray is None:
                    from .distributed import RayJudging

                    on_ray = stack.enter_context(RayJudging(cfg.cluster, cfg.judge.threads))
                judged = on_ray.judge(store, todo, backend, cfg, on_progress)
            else:
                measured = cfg.judge.measure and todo
                peak = backend_peak(store, cfg.profile(backend), cfg.judge.threads) if measured else None
                judged = (
                    (res, peak) for _ref, res in _evaluate_all(todo, backend, cfg, tracker, workers, peak)
                )
            recorded: set[JudgmentKey] = set()
            for res, peak in judged:
                key = JudgmentKey.of(res)
                if key in recorded:
                    log.warning("%s: judged twice; the second result is dropped", key)
                    continue
                recorded.add(key)
                if res.node is None and tracker is None:  # judged here, by this process's workers
                    here = here or node_here()
                    res.node = here
                problem = get_problem(res.problem)
                res.roofline = metrics.result_roofline(res, peak, problem.cost.bytes_written, problem.integer)
                store.put(res)
                counts["evaluated"] += 1
                counts["correct"] += int(res.correct)
                if on_result:
                    on_result(res)
    return counts


def backend_peak(store: RunStore, backend: str | BackendProfile, threads: int) -> dict | None:
    """The backend's peaks for the roofline and the judge's plausibility check: the profile's when
    measured by `ekb peak` (same thread count), else measured here once per run directory (cached in the
    run store's meta "peak:<backend>:<threads>"; only a cached record that authenticates is used, any
    other is measured again and replaced; a record cached before per-level bandwidths existed has no
    "levels" and still serves, as one memory roof), else the profile's datasheet figures when the
    backend cannot be measured here."""
    from ..backends.registry import as_profile

    profile = as_profile(backend, threads)
    peak = profile_peak(profile, threads)
    if peak:
        return peak
    key = f"peak:{profile.name}:{threads}"
    cached = store.get_meta(key)  # authenticated only: a forged huge peak would turn the check off
    if cached:
        return cached
    peak = measure_peak_isolated(profile, threads)
    if peak:
        store.set_meta(key, peak)
    return peak or datasheet_peak(profile, threads)
