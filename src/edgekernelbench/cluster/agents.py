"""`ekb agent --ray ADDRESS` / `--jobs N`: one (problem, method) episode per task.

An episode runs whole on one worker -- its search's judgments, its final judgments -- so its warm judge and
kernel cache stay warm; it holds one timing slot per thread throughout (its judgments time). The worker
gets a copy of the kernel database and a scratch run directory, keeps the trajectory in memory
(agents.episode.StepLog) and returns everything: the steps, the final candidates and their judgments, the
decisions it added to its copy of the kernel database, the files it wrote (MetaSchedule's database). The
driver writes all of it -- the run store, the run directory, the kernel database -- as `ekb agent` on one
machine does. Model calls go to the driver (cluster/mailbox.py): workers hold no key. An episode that the
cluster loses twice (crashed worker, hung task, dead node) is recorded as failed and runs again when the
command is run again.

Episodes run at once, so one cannot reuse the decisions another finds during the run (on one machine,
later problems see earlier ones'); decisions in the kernel database before the run are every episode's."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..agents.episode import AgentConfig, Step, StepLog
from ..agents.model import ModelService
from ..agents.run import NO_MODEL, EpisodeOutcome, finished, record_outcome, run_episode, skip_cli, start_run
from ..errors import EKBError
from ..harness.api import Limits
from ..kerneldb import KernelDB
from ..problems import get_problem
from ..records import Node
from ..store import RunStore
from .pool import Lost, Need, Pool, Started
from .session import ClusterConfig, check_nodes, session
from .tasks import known_peaks, node_peak, peak_key, prepare, profile_here

log = logging.getLogger(__name__)
RETRIES = 1
MAX_FILES_BYTES = 256 * 2**20  # what an episode's files may weigh in all (MetaSchedule's database)


@dataclass(frozen=True)
class EpisodeTask:
    problem: str
    method: str
    cfg: AgentConfig
    kernels: tuple = ()  # the kernel database's entries when the run started (Entry.to_dict())
    peaks: dict = field(default_factory=dict)  # CPU model -> the backend's peaks there
    mailbox: Any = None  # the driver's model mailbox (cluster/mailbox.py); None: no model

    def __str__(self) -> str:
        return f"{self.problem} {self.method}"


@dataclass
class EpisodeResult:
    outcome: EpisodeOutcome
    node: Node  # where it ran
    steps: list[Step]
    kernels: list[dict]  # decisions new or improved in the worker's copy of the kernel database
    files: list[tuple[str, bytes]]  # (path relative to the run directory, content)
    measured_peak: bool = False
    secrets: tuple[str, ...] = ()


def deadline_s(cfg: AgentConfig) -> float:
    """How long an episode may run once started: its wall-clock budget, then its final judgments (two, each
    a builder, a judge and maybe a fresh judge under the judge's timeout), then a margin."""
    timeout = (cfg.limits or Limits()).timeout_s
    return cfg.budget.wall_s + 6 * timeout + 300


def episode_task(task: EpisodeTask):
    """A Ray generator task: Started(node), then an EpisodeResult."""
    with prepare(task.cfg.threads, timed=True, wait_s=deadline_s(task.cfg)) as where:
        yield Started(where.node)
        yield _episode(task, where)


def _episode(task: EpisodeTask, where) -> EpisodeResult:
    from .mailbox import MailboxService

    cfg, peak, measured = task.cfg, None, False
    with tempfile.TemporaryDirectory(prefix="ekb-episode-") as tmp:
        scratch = Path(tmp)
        run_dir, db = scratch / "run", scratch / "kernels.db"
        steps = StepLog()
        service = MailboxService(task.mailbox, cfg.model) if task.mailbox is not None and cfg.model else None
        try:
            profile = profile_here(cfg.backend)  # this node's vector width and caches for the search
            peak, measured = node_peak(profile, cfg.threads, where.node.cpu_model, task.peaks)
            with KernelDB(db) as kdb:
                kdb.import_entries(task.kernels)
            cfg = replace(cfg, backend=profile, kernel_db=db, peak=peak)
            outcome = run_episode(get_problem(task.problem), task.method, cfg, steps, run_dir, service)
        except Exception as e:  # noqa: BLE001 -- the episode's failure, recorded; the run goes on
            log.exception("%s: the episode failed", task)
            why = f"the episode failed on {where.node.label}: {type(e).__name__}: {e}"
            outcome = EpisodeOutcome(task.problem, task.method, {"status": "failed", "why": why}, peak=peak)
        for final in outcome.finals:
            final.result.node = where.node
        return EpisodeResult(
            outcome,
            where.node,
            steps.steps,
            _added(db, task.kernels),
            _files(run_dir),
            measured,
            where.secrets,
        )


def _key(d: dict) -> tuple:
    return (d["workload"], d["target"], d["problem"], d["method"], d.get("speedup"), str(d["layers"]))


def _added(db: Path, before) -> list[dict]:
    """The entries of the worker's kernel database that were not in it when the episode started."""
    old = {_key(d) for d in before}
    with KernelDB(db) as kdb:
        return [d for d in (e.to_dict() for e in kdb.entries()) if _key(d) not in old]


def _files(run_dir: Path) -> list[tuple[str, bytes]]:
    """The regular files under `run_dir` (links are not followed), up to MAX_FILES_BYTES in all."""
    out, total = [], 0
    for path in sorted(run_dir.rglob("*")) if run_dir.is_dir() else []:
        if path.is_symlink() or not path.is_file():
            continue
        size = path.stat().st_size
        if total + size > MAX_FILES_BYTES:
            log.warning("%s: left out of the episode's files (over %d MiB)", path, MAX_FILES_BYTES >> 20)
            continue
        total += size
        out.append((path.relative_to(run_dir).as_posix(), path.read_bytes()))
    return out


def write_files(run_dir: Path, files: list[tuple[str, bytes]]) -> None:
    """An episode's files, into the run directory: only relative paths inside it, nothing followed."""
    root = Path(run_dir).resolve()
    for rel, data in files:
        target = (root / rel).resolve()
        if Path(rel).is_absolute() or ".." in Path(rel).parts or root not in target.parents:
            log.warning("an episode's file %r is not inside the run directory: not written", rel)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)


def run_agents_on_cluster(
    run_dir: Path,
    problems: list,
    methods: list[str],
    cfg: AgentConfig,
    cluster: ClusterConfig,
    on_done: Callable[[str, str, dict], None] | None = None,
    on_progress: Callable | None = None,
) -> dict[str, int]:
    """agents.run.run_agents on Ray: the episodes at once, one per task; returns counts (done, skipped)."""
    if cfg.agent_cmd and "cli" in methods:
        raise EKBError(
            "method cli runs an external agent, which needs API keys on the node that runs it: not on a "
            "cluster (run it without --ray and --jobs)"
        )
    run_dir = Path(run_dir)
    counts = {"done": 0, "skipped": 0}
    with RunStore(run_dir) as store, session(cluster, cfg.threads) as s, contextlib.ExitStack() as stack:
        done = start_run(store, methods, cfg)
        todo = []
        for problem in problems:
            for method in methods:
                if finished(done, problem.id, method):
                    counts["skipped"] += 1
                elif method == "cli":
                    counts["done"] += 1
                    record = skip_cli(store, problem.id)
                    if on_done:
                        on_done(problem.id, method, record)
                else:
                    todo.append((problem.id, method))
        if not todo:
            return counts
        check_nodes(s, timed=True)
        for line in s.warnings:
            log.warning("%s", line)
        mailbox = None
        if cfg.model and any(m not in NO_MODEL for _, m in todo):
            from .mailbox import ModelDesk

            service = ModelService(cfg.model, run_dir, cfg.cache_path, cfg.use_cache)
            mailbox = stack.enter_context(ModelDesk(s, service)).mailbox
        profile, threads = cfg.backend, cfg.threads
        peaks = known_peaks(store, profile, threads, s.local)
        with KernelDB(cfg.kernel_db) as kdb:
            kernels = tuple(e.to_dict() for e in kdb.entries())
        sent = replace(cfg, peak=None)
        tasks = [EpisodeTask(p, m, sent, kernels, peaks, mailbox) for p, m in todo]
        need = Need(cpus=threads, timing_slots=threads)
        pool = Pool(s, episode_task, lambda t: (t,), need, deadline_s(cfg), RETRIES, on_progress=on_progress)
        for task, out in pool.run(tasks):
            if isinstance(out, Lost):
                record = {"status": "failed", "why": f"the cluster lost this episode: {out.why}"}
                store.put_agent_run(task.problem, task.method, record)
            else:
                record = _record(store, run_dir, cfg, out, peaks)
            counts["done"] += 1
            if on_done:
                on_done(task.problem, task.method, record)
    return counts


def _record(store: RunStore, run_dir: Path, cfg: AgentConfig, out: EpisodeResult, peaks: dict) -> dict:
    """Writes what a worker returned, as `ekb agent` on one machine would have."""
    o, node = out.outcome, out.node
    if out.secrets:
        log.warning("node %s: its workers' environment held %s (removed)", node.label, ", ".join(out.secrets))
    if out.measured_peak and o.peak:
        peaks[node.cpu_model] = o.peak
        store.set_meta(peak_key(cfg.backend, cfg.threads, node.cpu_model), o.peak)
    store.clear_agent_steps(o.problem, o.method)
    for step in out.steps:
        store.put_agent_step(step.problem, step.method, step.step, step.record)
    write_files(run_dir, out.files)
    if out.kernels:
        with KernelDB(cfg.kernel_db) as kdb:
            kdb.import_entries(out.kernels)
    if o.record.get("status") != "done":
        store.put_agent_run(o.problem, o.method, o.record)
        return o.record
    return record_outcome(store, run_dir, o, cfg)
