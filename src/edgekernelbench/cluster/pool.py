"""The driver's loop over a cluster: every item of work run once to its end, whatever happens to the workers.

A task is a Ray generator function that yields `Started(node)` once it holds its cores, then its outcome.
The driver keeps a bounded number of tasks in flight and watches them:

- an outcome: the item is done (yielded once, with it);
- a worker that crashed, a node that died, a task that ran past its deadline after it started (cancelled,
  its worker killed): that attempt is lost and the item is submitted again, up to `retries` times; then it
  is yielded with `Lost` (the caller records the candidate's failure, the run goes on);
- no node of the cluster able to take the item for `unschedulable_s` seconds: the items still waiting are
  yielded with `Lost` too.

An attempt that was given up on and answers anyway is ignored: each item is yielded exactly once.
Progress (done / running / lost attempts, per node) goes to `on_progress` after every change."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..records import Node
from .session import TIMING, Session, alive_nodes

log = logging.getLogger(__name__)
T = TypeVar("T")
WAIT_S = 0.5  # how long the loop waits for an answer before it checks deadlines
NODES_EVERY_S = 5.0  # how often it asks which nodes are alive


@dataclass(frozen=True)
class Started:
    """A task's first message: the node it runs on, with the cores it claimed."""

    node: Node


@dataclass(frozen=True)
class Need:
    """What one task takes of a node: Ray CPUs and timing slots (a timed task: one per thread)."""

    cpus: float = 1.0
    timing_slots: int = 0

    def options(self) -> dict:
        return {"num_cpus": self.cpus, "resources": {TIMING: self.timing_slots} if self.timing_slots else {}}

    def fits(self, resources: dict) -> int:
        """How many such tasks a node with `resources` runs at once."""
        n = int(resources.get("CPU", 0) // self.cpus) if self.cpus else 1 << 30
        if self.timing_slots:
            n = min(n, int(resources.get(TIMING, 0) // self.timing_slots))
        return n


@dataclass(frozen=True)
class Attempt:
    node: str  # Node.label of where it ran; "" when it never started
    why: str


@dataclass(frozen=True)
class Lost:
    """An item no worker finished: `kind` "timeout" (its last attempt ran past the deadline), "memory"
    (Ray killed its worker for memory), "unschedulable" (no node could take it), else "infra" (workers
    crashed, nodes died)."""

    kind: str
    attempts: tuple[Attempt, ...]

    @property
    def why(self) -> str:
        return "; ".join(f"{a.node or 'not started'}: {a.why}" for a in self.attempts)


@dataclass
class NodeCounts:
    done: int = 0
    running: int = 0
    failed: int = 0  # attempts lost on this node


@dataclass
class Progress:
    total: int
    done: int = 0
    running: int = 0
    failed: int = 0  # attempts lost (retried, or given up)
    nodes: dict[str, NodeCounts] = field(default_factory=dict)

    def node(self, label: str) -> NodeCounts:
        return self.nodes.setdefault(label or "not started", NodeCounts())

    def line(self) -> str:
        """ "done 12 · running 2 · failed 1 | host/ab12cd34 7/1/1, host/ef56 5/1/0" (done/running/failed)."""
        per = ", ".join(f"{k} {c.done}/{c.running}/{c.failed}" for k, c in sorted(self.nodes.items()))
        head = f"done {self.done} · running {self.running} · failed {self.failed}"
        return f"{head} | {per} (done/running/failed)" if per else head


@dataclass
class _Flight(Generic[T]):
    item: T
    attempts: list[Attempt]
    node: str = ""
    started: float | None = None


def _kind(e: Exception, ray) -> str:
    ex = ray.exceptions
    if isinstance(e, getattr(ex, "OutOfMemoryError", ())):
        return "memory"
    return "infra"


class Pool(Generic[T]):
    """Runs `task` (a generator function, see the module's docstring) on each item: `args(item)` are its
    arguments, `need` what it takes of a node, `deadline_s` how long it may run once started."""

    def __init__(
        self,
        s: Session,
        task: Callable,
        args: Callable[[T], tuple],
        need: Need,
        deadline_s: float,
        retries: int = 1,
        unschedulable_s: float = 120.0,
        on_progress: Callable[[Progress], None] | None = None,
    ):
        self.s, self.args, self.need, self.deadline_s = s, args, need, deadline_s
        self.retries, self.unschedulable_s, self.on_progress = retries, unschedulable_s, on_progress
        self.remote = s.ray.remote(task).options(max_retries=0, **need.options())

    def _capacity(self) -> int:
        return sum(self.need.fits(n["Resources"]) for n in alive_nodes(self.s.ray))

    def run(self, items: Sequence[T]) -> Iterator[tuple[T, Any]]:
        """(item, outcome or Lost) for every item, as they finish."""
        ray = self.s.ray
        queue: deque[_Flight[T]] = deque(_Flight(it, []) for it in items)
        flights: dict[Any, _Flight[T]] = {}
        progress = Progress(total=len(queue))
        capacity, checked, no_node_since = self._capacity(), time.monotonic(), None

        def report():
            if self.on_progress:
                self.on_progress(progress)

        def lose(gen, f: _Flight[T], why: str, kind: str) -> Iterator[tuple[T, Any]]:
            flights.pop(gen, None)
            f.attempts.append(Attempt(f.node, why))
            progress.failed += 1
            progress.node(f.node).failed += 1
            if f.started is not None:
                progress.running -= 1
                progress.node(f.node).running -= 1
            log.warning("%s: attempt %d lost on %s: %s", f.item, len(f.attempts), f.node or "-", why)
            if len(f.attempts) <= self.retries and kind != "unschedulable":
                queue.appendleft(_Flight(f.item, f.attempts))
            else:
                progress.done += 1
                yield f.item, Lost(kind, tuple(f.attempts))
            report()

        try:
            while queue or flights:
                now = time.monotonic()
                if now - checked > NODES_EVERY_S:
                    capacity, checked = self._capacity(), now
                if capacity == 0:
                    no_node_since = no_node_since or now
                    if now - no_node_since > self.unschedulable_s:
                        why = f"no node of the cluster could take it for {self.unschedulable_s:.0f} s"
                        for gen, f in list(flights.items()):
                            if f.started is None:
                                ray.cancel(gen, force=True)
                                yield from lose(gen, f, why, "unschedulable")
                        while queue:
                            f = queue.popleft()
                            yield from lose(None, f, why, "unschedulable")
                else:
                    no_node_since = None
                while queue and len(flights) < max(2, 2 * capacity):
                    f = queue.popleft()
                    flights[self.remote.remote(*self.args(f.item))] = f
                report()
                if not flights:
                    continue
                ready, _ = ray.wait(list(flights), num_returns=1, timeout=WAIT_S)
                for gen in ready:
                    f = flights[gen]
                    try:
                        msg = ray.get(next(gen))
                    except StopIteration:
                        yield from lose(gen, f, "the task ended without an outcome", "infra")
                        continue
                    except Exception as e:  # noqa: BLE001 -- a worker or node lost: the attempt, not the run
                        yield from lose(
                            gen, f, f"{type(e).__name__}: {str(e).splitlines()[0][:300]}", _kind(e, ray)
                        )
                        continue
                    if isinstance(msg, Started):
                        f.node, f.started = msg.node.label, time.monotonic()
                        progress.running += 1
                        progress.node(f.node).running += 1
                        report()
                        continue
                    flights.pop(gen)
                    progress.done += 1
                    if f.started is not None:  # (a task may answer without starting: no core for it)
                        progress.running -= 1
                        progress.node(f.node).running -= 1
                    progress.node(f.node).done += 1
                    report()
                    yield f.item, msg
                now = time.monotonic()
                for gen, f in list(flights.items()):
                    if f.started is not None and now - f.started > self.deadline_s:
                        ray.cancel(gen, force=True)  # its worker is killed, and the judge's processes with it
                        why = f"ran past {self.deadline_s:.0f} s and was cancelled"
                        yield from lose(gen, f, why, "timeout")
        finally:
            for gen in flights:  # an interrupted driver leaves nothing running for nobody
                ray.cancel(gen, force=True)
