"""Ray tasks for the cluster tests (imported by the cluster's workers: tests/ is on their PYTHONPATH): small
stand-ins for a judgment that answers, crashes or hangs, and a look at a worker's environment."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from edgekernelbench.cluster.pool import Started
from edgekernelbench.records import Node


def _started():
    import ray

    return Started(Node(host="test", ray_node=ray.get_runtime_context().get_node_id()))


def square(i: int, seconds: float = 0.0):
    yield _started()
    time.sleep(seconds)
    yield i * i


def crash_once(i: int, marks: str):
    """Kills its worker the first time it runs for `i`, answers the second time."""
    yield _started()
    mark = Path(marks) / f"crashed-{i}"
    if not mark.exists():
        mark.write_text("")
        os._exit(3)
    yield i * i


def crash_always(i: int):
    yield _started()
    os._exit(3)


def hang(i: int):
    yield _started()
    time.sleep(3600)
    yield i


def worker_environment(threads: int, timed: bool) -> dict:
    """What a task's worker (after its start, cluster/tasks.prepare) and a process it starts see of the
    environment, and the CPUs they may run on."""
    from edgekernelbench.cluster.tasks import prepare

    with prepare(threads, timed, wait_s=60) as where:
        child = subprocess.run(
            [
                sys.executable,
                "-c",
                "import json, os; print(json.dumps([dict(os.environ), sorted(os.sched_getaffinity(0))]))",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return {
            "env": dict(os.environ),
            "child": child,
            "secrets": where.secrets,
            "node": where.node,
            "cpus": sorted(os.sched_getaffinity(0)),
        }


def raw_environment() -> dict:
    """A worker's environment as its node gave it (nothing stripped)."""
    return dict(os.environ)
