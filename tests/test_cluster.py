"""Judging on Ray (cluster/, runs/distributed.py): a local cluster of two worker nodes for the module (a head
without CPUs, two nodes of one CPU and one timing slot each, started from an environment that holds an API
key, as someone's shell might), the tiny test problems, correctness only where timing is not the point.

The verdicts equal a serial run's; a timed judgment runs on a core claimed alone; no API key reaches a
worker (nor the processes it starts), and an agent's model calls are made by the driver, with its key; a
worker that crashes or hangs is its item's retry, then its recorded failure; a node killed mid-run and the
run still judges every candidate exactly once (last: it leaves the cluster one node short)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from test_cli import TINY, write_candidates
from test_harness import CORRECT, prim

ray = pytest.importorskip("ray", reason="Ray is in the dev extra: pip install -e '.[dev]'")

from edgekernelbench.cluster.pool import Lost, Need, Pool  # noqa: E402
from edgekernelbench.cluster.session import ClusterConfig, session  # noqa: E402
from edgekernelbench.harness.api import JudgeConfig, TimingConfig  # noqa: E402
from edgekernelbench.runs import EvalConfig, eval_run  # noqa: E402
from edgekernelbench.store import RunStore  # noqa: E402

NODE_SECRET = "sk-ekb-test-node-secret"  # in the environment the nodes were started from
DRIVER_SECRET = "sk-ekb-test-driver-only"  # in the driver's environment only
WRONG = prim("for i, j in T.grid(4, 8):\n    out[i, j] = x[i, j] * w1[j]")
SYNTAX = "this is not python ("
# a killed node declared dead after about 5 s (Ray's default: 15 s), not so fast that a busy machine's slow
# heartbeat counts as a death
HEALTH = {
    "health_check_period_ms": 1000,
    "health_check_failure_threshold": 5,
    "health_check_timeout_ms": 1000,
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from ray.cluster_utils import Cluster

    logs = tempfile.mkdtemp(prefix="ekbray-")  # short: Ray's socket paths must fit in 107 bytes
    env = {
        "RAY_AUTH_MODE": "disabled",  # no token file in ~/.ray on a shared machine
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_TMPDIR": logs,  # the cluster's logs, sockets and address file, removed at the end
        "EKB_CORE_LOCKS": str(tmp_path_factory.mktemp("core-locks")),
        "OPENAI_API_KEY": NODE_SECRET,
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    c = None
    try:
        c = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 0, "include_dashboard": False, "_system_config": HEALTH},
        )
        for _ in range(2):
            c.add_node(num_cpus=1, resources={"ekb_timing_slot": 1})
        c.wait_for_nodes()
        del os.environ["OPENAI_API_KEY"]  # the driver's own environment holds no node secret
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if c is not None:
            c.shutdown()  # its own processes only (never `ray stop`: it stops every Ray of the machine)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(logs, ignore_errors=True)


def worker_ids(c) -> set[str]:
    return {n.node_id for n in c.worker_nodes}


def verdicts(run_dir: Path) -> dict:
    with RunStore(run_dir) as store:
        return {(r.problem, r.sample): (r.correct, r.reason) for r in store.results()}


def correctness_only(address: str | None = None) -> EvalConfig:
    cfg = EvalConfig(judge=JudgeConfig(trials=2, measure=False), jobs=1)
    if address:
        cfg.cluster = ClusterConfig(address=address)
    return cfg


def test_verdicts_on_two_nodes_equal_a_serial_runs(cluster, tmp_path):
    texts = {0: CORRECT, 1: WRONG, 2: SYNTAX}
    serial, spread = tmp_path / "serial", tmp_path / "cluster"
    write_candidates(serial, texts)
    write_candidates(spread, texts)
    eval_run(serial, correctness_only())
    seen = []
    counts = eval_run(spread, correctness_only(cluster.address), on_progress=lambda p: seen.append(p.line()))
    assert counts["evaluated"] == 3
    assert (
        verdicts(spread)
        == verdicts(serial)
        == {
            (TINY, 0): (True, None),
            (TINY, 1): (False, "wrong_output"),
            (TINY, 2): (False, "parse_error"),
        }
    )
    with RunStore(spread) as store:
        nodes = {r.sample: r.node for r in store.results()}
        isolation = {r.sample: r.extra["isolation"] for r in store.results()}
    with RunStore(serial) as store:  # builder and judge in the same sandbox as on one machine
        assert isolation == {r.sample: r.extra["isolation"] for r in store.results()}
    assert {n.ray_node for n in nodes.values()} == worker_ids(cluster)  # both nodes judged, nothing else
    assert all(not n.timing_core and n.cpus and n.cpu_model for n in nodes.values())
    assert seen and seen[-1].startswith("done 3 · running 0 · failed 0")
    again = eval_run(spread, correctness_only(cluster.address))  # resumed: nothing left to judge
    assert (again["evaluated"], again["skipped"]) == (0, 3)
    # the report says which node judged what
    p = subprocess.run(
        [sys.executable, "-m", "edgekernelbench.cli", "report", str(spread), "--per-problem"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    assert "judged by node" in p.stdout
    for n in nodes.values():
        assert n.label in p.stdout


def test_a_timed_judgment_holds_a_core_of_its_own(cluster, tmp_path):
    write_candidates(tmp_path, {0: CORRECT})
    quick = TimingConfig(warmup_ms=2.0, min_repeat_ms=2.0, rounds=5)
    cfg = EvalConfig(judge=JudgeConfig(trials=2, timing=quick, baselines=("tvm-default",)))
    cfg.cluster = ClusterConfig(address=cluster.address)
    eval_run(tmp_path, cfg)
    with RunStore(tmp_path) as store:
        (res,) = store.results()
        peaks = store.meta_keys("peak:host-cpu:1@")
    assert res.correct and res.runtime is not None and "tvm-default" in res.speedups
    assert res.node.timing_core and len(res.node.cpus) == 1 and res.node.ray_node in worker_ids(cluster)
    assert res.timing_env.cpus == list(res.node.cpus)  # the judge ran pinned to the claimed core
    assert peaks == [f"peak:host-cpu:1@{res.node.cpu_model}"]  # measured on the node, kept for the run


def test_no_api_key_reaches_a_worker(cluster):
    import cluster_tasks

    from edgekernelbench.cluster.session import check_nodes

    with session(ClusterConfig(address=cluster.address)) as s:
        check_nodes(s, timed=True)  # a run's first look at the nodes, in fresh workers
        # both nodes were started with it: the probe read it in their workers' environment ...
        assert sum("OPENAI_API_KEY" in w for w in s.warnings) == 2
        seen = ray.get(
            [
                ray.remote(cluster_tasks.worker_environment).options(num_cpus=1).remote(1, t)
                for t in (True, False)
            ]
        )
    for got in seen:  # ... but a task's worker and what it starts never see it
        env, child_cpus = json.loads(got["child"])
        assert "OPENAI_API_KEY" not in got["env"] and "OPENAI_API_KEY" not in env
        assert child_cpus == got["cpus"] == list(got["node"].cpus)  # started processes stay on its core
    assert seen[0]["node"].timing_core and not seen[1]["node"].timing_core


def test_a_local_instance_starts_without_the_drivers_secrets():
    """`--jobs N`: the local instance's workers never get the keys; the driver keeps them."""
    script = """
import json, os, ray
from edgekernelbench.cluster.session import ClusterConfig, session
import cluster_tasks
with session(ClusterConfig(jobs=1)) as s:
    env = ray.get(ray.remote(cluster_tasks.raw_environment).remote())
    print(json.dumps({"local": s.local, "worker": "OPENAI_API_KEY" in env, "driver": os.environ.get("OPENAI_API_KEY")}))
"""
    where = tempfile.mkdtemp(prefix="ekbt-")  # short: Ray's socket paths
    env = {**os.environ, "OPENAI_API_KEY": DRIVER_SECRET, "RAY_AUTH_MODE": "disabled", "RAY_TMPDIR": where}
    try:
        p = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
        )
        assert p.returncode == 0, p.stderr[-3000:]
        got = json.loads(p.stdout.strip().splitlines()[-1])
        assert got == {"local": True, "worker": False, "driver": DRIVER_SECRET}
        assert os.listdir(where) == []  # the instance's logs and sockets went with it
    finally:
        shutil.rmtree(where, ignore_errors=True)


def test_the_agents_model_calls_are_made_by_the_driver(cluster, tmp_path, monkeypatch):
    from llm_fake_server import FakeLLM
    from test_agents import TINY_OK, config

    from edgekernelbench.cluster.agents import run_agents_on_cluster
    from edgekernelbench.problems import get_problem

    monkeypatch.setenv("OPENAI_COMPATIBLE_API_KEY", DRIVER_SECRET)
    run = tmp_path / "run"
    with FakeLLM({TINY: [TINY_OK]}) as fake:
        cfg = config(tmp_path, model=f"openai-compatible:{fake.openai_url}:local-model", budget=1)
        counts = run_agents_on_cluster(
            run, [get_problem(TINY)], ["direct"], cfg, ClusterConfig(cluster.address)
        )
        auth = [c["auth"] for c in fake.calls]
    assert counts == {"done": 1, "skipped": 0}
    assert auth == [f"Bearer {DRIVER_SECRET}"]  # the driver's key: a worker would have had none
    with RunStore(run) as store:
        runs, steps, results = store.agent_runs(), store.agent_steps(TINY, "direct"), store.results()
    assert runs[(TINY, "direct")]["status"] == "done"
    assert [s["kind"] for s in steps] == ["model", "judge", "final"]
    assert {r.sample for r in results} == {0, 1} and all(r.correct for r in results)
    assert all(r.node.ray_node in worker_ids(cluster) and r.node.timing_core for r in results)
    assert (run / "responses.jsonl").is_file()  # the driver's log of the answers
    assert (run / "candidates" / TINY / "sample0.json").is_file()


def pool_run(address, task, items, args, deadline_s=60.0):
    with session(ClusterConfig(address=address)) as s:
        return dict(Pool(s, task, args, Need(cpus=1), deadline_s, retries=1).run(items))


def test_a_worker_that_crashes_or_hangs_is_retried_then_recorded(cluster, tmp_path):
    import cluster_tasks

    got = pool_run(cluster.address, cluster_tasks.square, [1, 2, 3], lambda i: (i, 0.1))
    assert got == {1: 1, 2: 4, 3: 9}
    got = pool_run(cluster.address, cluster_tasks.crash_once, [4, 5], lambda i: (i, str(tmp_path)))
    assert got == {4: 16, 5: 25}  # each crashed once, then answered on its retry
    got = pool_run(cluster.address, cluster_tasks.crash_always, [6], lambda i: (i,))
    assert isinstance(got[6], Lost) and got[6].kind == "infra" and len(got[6].attempts) == 2
    got = pool_run(cluster.address, cluster_tasks.hang, [7], lambda i: (i,), deadline_s=2.0)
    assert isinstance(got[7], Lost) and got[7].kind == "timeout" and len(got[7].attempts) == 2
    assert all("ran past 2 s" in a.why for a in got[7].attempts)


def test_a_node_killed_mid_run_and_every_candidate_judged_once(cluster, tmp_path):
    """Last in the module: it leaves the cluster one node short."""
    texts = {k: CORRECT if k % 2 == 0 else WRONG for k in range(4)}
    write_candidates(tmp_path, texts)
    killed, lines, recorded = [], [], []

    def kill_a_busy_node(progress):
        lines.append(progress)
        busy = [label for label, c in progress.nodes.items() if c.running > 0]
        if not killed and progress.running == 2 and busy:
            node = next(n for n in cluster.worker_nodes if busy[0].endswith(n.node_id[:8]))
            killed.append(node.node_id)
            cluster.remove_node(node, allow_graceful=False)

    counts = eval_run(
        tmp_path, correctness_only(cluster.address), on_result=recorded.append, on_progress=kill_a_busy_node
    )
    assert killed, "no moment with both nodes busy"
    assert counts["evaluated"] == 4 and sorted(r.sample for r in recorded) == list(range(4))  # once each
    assert verdicts(tmp_path) == {
        (TINY, k): (True, None) if k % 2 == 0 else (False, "wrong_output") for k in range(4)
    }
    assert lines[-1].failed >= 1  # the killed node's judgment was lost, and judged again on the other
    with RunStore(tmp_path) as store:
        assert len(store.results()) == 4
