"""A Ray session for one command: connected to an existing cluster (`--ray ADDRESS`) or a local instance
started here with N workers (`--jobs N`), and closed when the command ends (a local instance's processes
stop with it; a cluster is only disconnected from -- its nodes are someone else's to stop).

Ray is an optional dependency (`pip install 'edgekernelbench[cluster]'`): it is imported here only, and
its absence is one clear error for the commands that ask for it."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import EKBError
from ..records import Node
from .environ import without_secrets

log = logging.getLogger(__name__)

TIMING = "ekb_timing_slot"  # the custom resource a node declares: one per physical core it times on
QUIET_ENV = {"RAY_USAGE_STATS_ENABLED": "0"}


class ClusterError(EKBError):
    """The cluster cannot be used: Ray missing, an address nobody answers at, nodes that cannot judge."""


@dataclass(frozen=True)
class ClusterConfig:
    """Where a command's work runs: `address` an existing cluster's (its head's host:port, or "auto"); None:
    a local instance of `jobs` workers on this machine."""

    address: str | None = None
    jobs: int = 1

    def describe(self) -> str:
        return (
            f"the Ray cluster at {self.address}"
            if self.address
            else f"a local Ray instance ({self.jobs} workers)"
        )


def require_ray():
    """The ray module; ClusterError (one line) when it is not installed."""
    try:
        import ray
    except ImportError:
        raise ClusterError(
            "Ray is not installed: pip install 'edgekernelbench[cluster]' (--ray and --jobs N > 1 use it)"
        ) from None
    return ray


def check_address(address: str) -> None:
    """An address that is not HOST:PORT (or "auto"), or one nobody answers at, is one clear error now
    (ray.init would retry for minutes)."""
    if address == "auto":
        return
    if address.startswith("ray://"):
        raise ClusterError(
            f"--ray {address}: Ray Client addresses are not supported; give the head's address HOST:PORT "
            "and run ekb on a machine of the cluster"
        )
    host, sep, port = address.rpartition(":")
    if not (sep and host and port.isdigit()):
        raise ClusterError(f"--ray {address}: give the head's address as HOST:PORT (or auto)")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=5):
            pass
    except (OSError, ValueError) as e:
        raise ClusterError(f"--ray {address}: no Ray cluster answers there ({e})") from None


AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
_TOKEN = secrets.token_hex(32)  # this process's local instances' Ray token: never written to disk


def _local_auth() -> Callable[[], None]:
    """Token authentication for a local instance, with a token of this process's given in the environment,
    unless the user set up Ray's authentication (its variables, or ~/.ray/auth_token): ray.init would
    otherwise write ~/.ray/auth_token, after which `ray start --head` on this machine asks for a token that
    `ray start --address` does not send. Returns what puts the environment back."""
    if any(k in os.environ for k in AUTH_ENV) or (Path.home() / ".ray" / "auth_token").exists():
        return lambda: None
    os.environ["RAY_AUTH_TOKEN"] = _TOKEN

    def restore() -> None:
        for k in AUTH_ENV:
            os.environ.pop(k, None)  # Ray sets RAY_AUTH_MODE=token itself

    return restore


SOCKET_ROOM = 30  # Ray's socket paths (AF_UNIX: at most 107 bytes) take ~75 bytes below its directory


def _short_tmp() -> str:
    """Where a local instance's directory goes: $RAY_TMPDIR, else the temporary directory when its path is
    short enough for Ray's sockets, else /tmp."""
    for d in (os.environ.get("RAY_TMPDIR"), tempfile.gettempdir()):
        if d and len(d) <= SOCKET_ROOM and os.path.isdir(d):
            return d
    return "/tmp"


@dataclass
class Session:
    """A connected Ray: its module, whether this command started it, and the driver's node."""

    ray: Any
    local: bool
    driver_node: str  # Ray's id of the node the driver runs on
    warnings: list[str] = field(default_factory=list)


def _init_kwargs() -> dict:
    return {"log_to_driver": False, "logging_level": "ERROR", "include_dashboard": False}


@contextlib.contextmanager
def session(cfg: ClusterConfig, threads: int = 1) -> Iterator[Session]:
    """Ray for one command. A Ray this process is already connected to (a benchmark's, a test's) is used as
    it is and left connected."""
    ray = require_ray()
    for k, v in QUIET_ENV.items():
        os.environ.setdefault(k, v)
    if ray.is_initialized():
        yield Session(ray, False, ray.get_runtime_context().get_node_id())
        return
    if cfg.address:
        check_address(cfg.address)
        try:
            kwargs = _init_kwargs()
            del kwargs["include_dashboard"]  # a setting of the head, not of a driver that connects
            ray.init(address=cfg.address, **kwargs)
        except Exception as e:  # noqa: BLE001 -- Ray's own errors: one line
            raise ClusterError(f"--ray {cfg.address}: cannot connect: {type(e).__name__}: {e}") from None
    else:
        from .cores import timing_slots

        cpus = max(1, cfg.jobs) * max(1, threads)
        logs = tempfile.mkdtemp(prefix="ekb-ray-", dir=_short_tmp())  # its logs and sockets: removed with it
        restore = _local_auth()
        try:
            with without_secrets():  # the instance's processes (its workers) start without them
                slots = min(cpus, timing_slots())
                ray.init(num_cpus=cpus, resources={TIMING: slots}, _temp_dir=logs, **_init_kwargs())
        except Exception as e:  # noqa: BLE001 -- Ray's own errors: one line
            restore()
            raise ClusterError(
                f"a local Ray instance did not start ({type(e).__name__}: {str(e).splitlines()[0][:300]}); "
                f"its logs are in {logs}"
            ) from None
    ok = False
    try:
        yield Session(ray, not cfg.address, ray.get_runtime_context().get_node_id())
        ok = True
    finally:
        ray.shutdown()
        if not cfg.address:
            restore()
        if not cfg.address:
            if ok:
                shutil.rmtree(logs, ignore_errors=True)
            else:
                log.warning("the local Ray instance's logs are kept in %s", logs)


@dataclass(frozen=True)
class NodeReport:
    """What one node says of itself before a run (`probe`)."""

    node: Node
    judge_version: str
    physical_cores: int
    timing_slots: float  # as the node declares them to Ray
    cpus: float
    secrets: tuple[str, ...]  # names of secrets its workers' environment held (stripped)


def probe(node_id: str, timing_slots: float, cpus: float) -> NodeReport:
    """Runs on a node: what it is and which judge it runs."""
    from ..backends.hostinfo import node_here
    from ..harness.api import judge_version
    from .cores import physical_cores
    from .environ import strip_secrets

    secrets = strip_secrets()
    return NodeReport(
        node_here(node_id), judge_version(), physical_cores().count, timing_slots, cpus, secrets
    )


def alive_nodes(ray) -> list[dict]:
    return [n for n in ray.nodes() if n.get("Alive")]


def check_nodes(s: Session, timed: bool) -> list[NodeReport]:
    """Every node that can take work answers a probe before the run: one that runs another judge (its
    results would be judged by other rules) is an error; one that held secrets, or declares more timing
    slots than it has physical cores, is a warning (Session.warnings). No node able to do the work: an
    error."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from ..harness.api import judge_version

    ray = s.ray
    nodes = [n for n in alive_nodes(ray) if n["Resources"].get("CPU", 0) > 0]
    if timed:
        nodes = [n for n in nodes if n["Resources"].get(TIMING, 0) > 0]
    if not nodes:
        what = f"CPUs and a {TIMING} resource" if timed else "CPUs"
        raise ClusterError(
            f"no node of the cluster has {what}: start its nodes with `ekb cluster start` (docs/cluster.md)"
            + (", or judge correctness only (--no-measure)" if timed else "")
        )
    remote = ray.remote(probe)
    refs = [
        remote.options(
            num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        ).remote(n["NodeID"], n["Resources"].get(TIMING, 0), n["Resources"].get("CPU", 0))
        for n in nodes
    ]
    try:
        reports = ray.get(refs, timeout=300)
    except Exception as e:  # noqa: BLE001 -- a node that cannot even import ekb
        raise ClusterError(
            f"a node of the cluster could not run ekb's probe: {type(e).__name__}: {e}"
        ) from None
    mine = judge_version()
    for r in reports:
        if r.judge_version != mine:
            raise ClusterError(
                f"node {r.node.label} runs {r.judge_version}, this driver {mine}: install the same "
                "EdgeKernelBench on every node"
            )
        if r.secrets:
            s.warnings.append(
                f"node {r.node.label}: its workers' environment held {', '.join(r.secrets)} (removed before "
                "every task); start nodes with `ekb cluster start`, which leaves them out"
            )
        if r.timing_slots > r.physical_cores:
            s.warnings.append(
                f"node {r.node.label} declares {r.timing_slots:g} timing slots but has {r.physical_cores} "
                "physical cores: timed tasks wait for a free core there"
            )
    return reports
