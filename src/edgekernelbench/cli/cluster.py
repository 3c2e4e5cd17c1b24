"""`ekb cluster`: start a Ray node that can judge (its timing slots declared, no secrets in its environment),
and see what the nodes of a cluster are (docs/cluster.md)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import click
from rich.table import Table
from rich.text import Text

from ..errors import EKBError
from .common import console


@click.group("cluster")
def cluster():
    """Ray clusters for `ekb eval --ray` and `ekb agent --ray` (docs/cluster.md)."""


def ray_start_command(
    head: bool, address: str | None, port: int, cpus: int | None, slots: int, temp_dir: str | None
) -> list[str]:
    """`ray start` for a node of an ekb cluster: its CPUs, `slots` timing slots (cluster/cores.py), no
    dashboard, no usage statistics."""
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start"]
    cmd += ["--head", "--port", str(port)] if head else ["--address", str(address)]
    cmd += ["--resources", json.dumps({"ekb_timing_slot": slots}), "--disable-usage-stats"]
    cmd += ["--include-dashboard=false"] if head else []
    cmd += ["--num-cpus", str(cpus)] if cpus else []
    cmd += ["--temp-dir", temp_dir] if temp_dir else []
    return cmd


@cluster.command("start")
@click.option("--head", is_flag=True, help="Start the cluster's head node here.")
@click.option("--address", metavar="HOST:PORT", help="Join the cluster whose head is there.")
@click.option("--port", type=click.IntRange(1, 65535), default=6379, show_default=True, help="Head port.")
@click.option("--num-cpus", type=click.IntRange(1), help="CPUs this node offers (default: Ray's count).")
@click.option(
    "--timing-slots",
    type=click.IntRange(0),
    help="Timed judgments at once on this node (default: its physical cores, SMT siblings counted once). "
    "Fewer on a VM whose vCPUs share physical cores unseen; 0: this node only checks correctness.",
)
@click.option("--temp-dir", help="Ray's logs and sockets (default: Ray's, /tmp/ray).")
@click.option("--dry-run", is_flag=True, help="Print the `ray start` command instead of running it.")
def start(head, address, port, num_cpus, timing_slots, temp_dir, dry_run):
    """Start a Ray node for ekb: `ray start` with this node's timing slots declared as the custom resource
    ekb_timing_slot, and an environment without API keys or other secrets (its workers inherit it)."""
    from ..cluster.cores import timing_slots as physical_slots
    from ..cluster.environ import clean_environ, secret_names
    from ..cluster.session import require_ray

    if head == bool(address):
        raise EKBError("give either --head (start a cluster here) or --address HOST:PORT (join one)")
    slots = physical_slots() if timing_slots is None else timing_slots
    cmd = ray_start_command(head, address, port, num_cpus, slots, temp_dir)
    if dry_run:
        click.echo(shlex.join(cmd))
        return
    require_ray()
    left = secret_names()
    if left:
        console.print(f"leaving out of the node's environment: {', '.join(left)}")
    p = subprocess.run(cmd, env=clean_environ(), capture_output=True, text=True)
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise EKBError(f"ray start failed: {tail[0]}")
    where = f"127.0.0.1:{port} (or this host's address)" if head else address
    console.print(f"started a Ray node with {slots} timing slot(s); point ekb at it: --ray {where}")


@cluster.command("status")
@click.option("--ray", "address", metavar="ADDRESS", required=True, help="The cluster's head HOST:PORT.")
def status(address):
    """The nodes of a cluster as ekb sees them: CPU, ISA, CPUs and timing slots, physical cores, the judge
    they run, and any secrets their workers' environment held (they are removed before every task)."""
    from ..cluster.session import ClusterConfig, check_nodes, session

    with session(ClusterConfig(address=address)) as s:
        reports = check_nodes(s, timed=False)
        t = Table(title=f"the Ray cluster at {address}")
        for c in ("node", "CPU", "ISA", "CPUs", "timing slots", "physical cores", "judge", "secrets"):
            t.add_column(c)
        for r in reports:
            n = r.node
            t.add_row(
                Text(n.label),
                Text(f"{n.cpu_model} ({n.llvm_cpu})"),
                ",".join(n.isa),
                f"{r.cpus:g}",
                f"{r.timing_slots:g}",
                str(r.physical_cores),
                Text(r.judge_version),
                ", ".join(r.secrets) or "-",
            )
        console.print(t)
        for line in s.warnings:
            console.print(Text(f"warning: {line}", style="yellow"), soft_wrap=True)
