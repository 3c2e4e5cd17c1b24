"""What a cluster's worker runs for `ekb eval`: one judgment (`judge_task`), with what every task does first
(`prepare`): strip secrets, claim its cores, say where it runs.

The worker gets everything as data from the driver -- the candidate's spec (read by the driver from the run
directory, which workers never see), the backend's profile, the judge's configuration -- and returns a
Result; it never writes the run store. Every judgment goes through harness.api.evaluate, as on one machine:
builder and judge in their sandboxed processes, forked from the worker's warm judge (harness/zygote.py,
kept for the worker's life) onto the cores the task claimed."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..backends.base import BackendProfile
from ..errors import EKBError
from ..harness.api import JudgeConfig, evaluate, lasting_warm_judge
from ..harness.peak import datasheet_peak, measure_peak_isolated
from ..machine import cpu_model
from ..records import Node, Result
from ..store import RunStore
from .cores import Claim, CoreBusy, claim_cores
from .environ import strip_secrets
from .pool import Started

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JudgmentKey:
    """What identifies a judgment: a retried task, or an answer that comes twice, is recorded once."""

    problem: str
    sample: int
    backend: str
    candidate_sha256: str

    @classmethod
    def of(cls, res: Result) -> JudgmentKey:
        return cls(res.problem, int(res.sample), res.backend, res.candidate_sha256)

    def __str__(self) -> str:
        return f"{self.problem}#{self.sample} on {self.backend}"


@dataclass(frozen=True)
class JudgeTask:
    key: JudgmentKey
    spec: dict  # KernelSpec.to_dict(), as the driver read it from the candidate file
    source: str  # the candidate file's path on the driver (for the record)
    profile: BackendProfile  # resolved once by the driver, with the run's threads
    judge: JudgeConfig
    timed: bool  # its judgment times: it runs on cores claimed for timing alone
    peaks: dict = field(default_factory=dict)  # CPU model -> the backend's peaks there (known to the driver)

    def __str__(self) -> str:
        return str(self.key)


@dataclass
class JudgeOutcome:
    result: Result
    peak: dict | None = None  # the peaks the judgment used (for the driver's roofline)
    measured_peak: bool = False  # measured on this node by this task: the driver keeps it for the run
    secrets: tuple[str, ...] = ()  # secrets this worker's environment held (removed)


@dataclass(frozen=True)
class Placement:
    node: Node
    secrets: tuple[str, ...]


@contextlib.contextmanager
def prepare(threads: int, timed: bool, wait_s: float) -> Iterator[Placement]:
    """A task's start on its worker: its secrets removed, `threads` physical cores claimed (exclusively when
    it times) and this worker pinned to them, the node described."""
    secrets = strip_secrets()
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    with claim_cores(threads, exclusive=timed, wait_s=wait_s) as claim:
        yield Placement(_node(node_id, claim), secrets)


def _node(node_id: str, claim: Claim) -> Node:
    from ..backends.hostinfo import node_here

    return node_here(node_id, claim.cpus, claim.exclusive)


_MEASURED: dict[tuple[str, int], dict | None] = {}  # this worker process's measurements


def _measured_here(profile: BackendProfile, threads: int) -> dict | None:
    key = (json.dumps(profile.to_dict(), sort_keys=True, default=str), threads)
    if key not in _MEASURED:
        _MEASURED[key] = measure_peak_isolated(profile, threads)
    return _MEASURED[key]


def node_peak(profile: BackendProfile, threads: int, cpu_model: str, known: dict) -> tuple[dict | None, bool]:
    """(the backend's peaks on this node, whether they were measured here now): the profile's own (`ekb
    peak`), else the driver's for this CPU model, else measured on this node once per worker process, else
    the datasheet's."""
    from ..backends.peak import profile_peak

    peak = profile_peak(profile, threads) or known.get(cpu_model)
    if peak:
        return peak, False
    measured = _measured_here(profile, threads)
    return (measured, True) if measured else (datasheet_peak(profile, threads), False)


def peak_key(profile: BackendProfile, threads: int, cpu: str) -> str:
    return f"peak:{profile.name}:{threads}@{cpu}"


def known_peaks(store: RunStore, profile: BackendProfile, threads: int, local: bool) -> dict[str, dict]:
    """CPU model -> the backend's peaks there, as the run store keeps them (authenticated rows only); on a
    local instance also the peaks measured on this machine by a run without Ray."""
    prefix = peak_key(profile, threads, "")
    peaks = {k[len(prefix) :]: store.get_meta(k) for k in store.meta_keys(prefix)}
    here = store.get_meta(f"peak:{profile.name}:{threads}") if local else None
    if here and cpu_model() not in peaks:
        peaks[cpu_model()] = here
    return {cpu: p for cpu, p in peaks.items() if p}


class NodeCannotRun(EKBError):
    """The backend's ISA is one this node's CPU lacks."""


def profile_here(profile: BackendProfile) -> BackendProfile:
    """The profile as this node resolves it (a host profile takes the node's vector width and caches:
    backends.hostinfo.resolve_host); NodeCannotRun when its ISA is one this node lacks (its candidates
    would die of SIGILL here)."""
    from ..backends.hostinfo import missing_features, resolve_host

    missing = missing_features(profile)
    if missing:
        raise NodeCannotRun(f"{profile.name} needs {', '.join(missing)}, which this node's CPU lacks")
    return resolve_host(profile)


def judge_task(task: JudgeTask):
    """A Ray generator task: Started(node), then a JudgeOutcome."""
    deadline = task.judge.limits.timeout_s
    try:
        with prepare(task.judge.threads, task.timed, wait_s=deadline) as where:
            yield Started(where.node)
            yield _judge(task, where)
    except CoreBusy as e:
        res = Result(task.key.problem, task.key.sample, task.key.backend, candidate=task.source)
        yield JudgeOutcome(res.failure("infra", f"no core to judge it on: {e}"))


def _judge(task: JudgeTask, where: Placement) -> JudgeOutcome:
    from ..ir.spec import KernelSpec

    peak, measured = None, False
    try:
        profile = profile_here(task.profile)
        if task.timed:
            peak, measured = node_peak(profile, task.judge.threads, where.node.cpu_model, task.peaks)
        lasting_warm_judge()  # this worker's judgments, of any problem, forked from one warm judge
        res = evaluate(
            task.key.problem,
            KernelSpec.from_dict(task.spec),
            profile,
            task.judge,
            sample=task.key.sample,
            source=task.source,
            peak=peak,
            candidate_sha256=task.key.candidate_sha256,
        )
    except Exception as e:  # noqa: BLE001 -- the harness's (or this node's) failure on this candidate: recorded
        log.exception("%s: the worker failed", task.key)
        res = Result(task.key.problem, task.key.sample, task.key.backend, candidate=task.source)
        res.failure("infra", f"{where.node.label} could not judge it: {type(e).__name__}: {e}")
    res.node = where.node
    return JudgeOutcome(res, peak, measured, where.secrets)
