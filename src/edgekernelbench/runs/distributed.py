"""`ekb eval --ray ADDRESS` / `--jobs N`: the judgments of a run on Ray, driven from here.

The driver reads the candidate files (workers never see the run directory), sends each judgment as a task
(cluster/tasks.py: one judgment, its spec as data), and writes what comes back to the run store -- the only
process that does. A timed backend's judgments each take one timing slot per thread (cluster/cores.py: a
physical core nobody else uses while it times); correctness-only ones take CPUs. A judgment whose workers
crashed, hung or lost their node is tried once more, then recorded as its failure (cluster/pool.py).

The backend's peaks (for the plausibility check and the roofline) are per CPU model: a node whose CPU the
run has no peaks for measures its own once, and the driver keeps them in the run store's meta
("peak:<backend>:<threads>@<cpu model>") for the rest of the run and the next one."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator

from ..cluster.pool import Lost, Need, Pool
from ..cluster.session import ClusterConfig, check_nodes, session
from ..cluster.tasks import JudgeOutcome, JudgeTask, JudgmentKey, judge_task, known_peaks, peak_key
from ..records import Result
from ..store import RunStore

log = logging.getLogger(__name__)
RETRIES = 1  # a lost judgment is tried once more before it is recorded as its failure
LOST_REASONS = {"timeout": "timeout", "memory": "memory"}  # Lost.kind -> Result.reason; else "infra"


def deadline_s(timeout_s: float) -> float:
    """How long a judgment may run on a worker once started: its builder and judge, a fresh judge when its
    speed must be confirmed (harness.api.check_plausible), each under the judge's timeout; then a margin."""
    return 3 * timeout_s + 120


def lost_result(task: JudgeTask, lost: Lost) -> Result:
    from . import stamp

    res = Result(task.key.problem, task.key.sample, task.key.backend, candidate=task.source)
    n = len(lost.attempts)
    res.failure(
        LOST_REASONS.get(lost.kind, "infra"), f"the cluster lost this judgment {n} time(s): {lost.why}"
    )
    res.extra["cluster_attempts"] = [dataclasses.asdict(a) for a in lost.attempts]
    return stamp(res, task.key.candidate_sha256, task.profile)


def checked(task: JudgeTask, out: JudgeOutcome) -> Result:
    """The worker's result, when it is about the judgment sent; else the harness's failure."""
    from . import stamp

    res = out.result
    if isinstance(res, Result) and JudgmentKey.of(res) == task.key:
        return res
    got = JudgmentKey.of(res) if isinstance(res, Result) else type(res).__name__
    bad = Result(task.key.problem, task.key.sample, task.key.backend, candidate=task.source)
    bad.failure("infra", f"the worker answered about {got}, not about this judgment")
    return stamp(bad, task.key.candidate_sha256, task.profile)


class RayJudging(contextlib.AbstractContextManager):
    """The Ray session of one `ekb eval` (opened at its first judgment on Ray, closed at its end)."""

    def __init__(self, cfg: ClusterConfig, threads: int):
        self._session = session(cfg, threads)
        self.s = None
        self.checked: set[bool] = set()
        self.warned: set[str] = set()

    def __enter__(self) -> RayJudging:
        self.s = self._session.__enter__()
        return self

    def __exit__(self, *exc):
        return self._session.__exit__(*exc)

    def _check(self, timed: bool) -> None:
        if timed in self.checked:
            return
        check_nodes(self.s, timed)
        for line in self.s.warnings:
            if line not in self.warned:
                self.warned.add(line)
                log.warning("%s", line)
        self.checked.add(timed)

    def judge(
        self, store: RunStore, todo: list, backend: str, cfg, on_progress: Callable | None = None
    ) -> Iterator[tuple[Result, dict | None]]:
        """(Result, the peaks its roofline is computed on) of every candidate of `todo` on `backend`."""
        from . import read_ref

        profile = cfg.profile(backend)
        threads = cfg.judge.threads
        timed = bool(cfg.judge.measure and profile.can_time)
        self._check(timed)
        peaks = known_peaks(store, profile, threads, self.s.local) if timed else {}
        tasks = []
        for ref in todo:
            read = read_ref(ref, backend, cfg)
            if isinstance(read, Result):  # does not parse: recorded here, nothing to send
                yield read, None
                continue
            spec, digest = read
            key = JudgmentKey(ref.problem, ref.sample, profile.name, digest)
            tasks.append(JudgeTask(key, spec.to_dict(), str(ref.path), profile, cfg.judge, timed, peaks))
        need = Need(cpus=threads, timing_slots=threads if timed else 0)
        pool = Pool(
            self.s, judge_task, lambda t: (t,), need, deadline_s(cfg.judge.limits.timeout_s), RETRIES,
            on_progress=on_progress,
        )  # fmt: skip
        for task, out in pool.run(tasks):
            if isinstance(out, Lost):
                yield lost_result(task, out), None
                continue
            res = checked(task, out)
            if out.measured_peak and out.peak and res.node is not None:
                peaks[res.node.cpu_model] = out.peak  # the tasks not sent yet carry it
                store.set_meta(peak_key(profile, threads, res.node.cpu_model), out.peak)
            if out.secrets and res.node is not None and res.node.label not in self.warned:
                self.warned.add(res.node.label)
                log.warning(
                    "node %s: its workers' environment held %s (removed)", res.node.label, out.secrets
                )
            yield res, out.peak
