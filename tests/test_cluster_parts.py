"""The parts of judging on Ray that need no cluster: physical cores and their claims (cluster/cores.py),
secrets (cluster/environ.py), where a result was judged in the report, and the one-line errors of the
commands (Ray missing, nobody at an address, an external agent on a cluster)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from test_cli import TINY, write_candidates
from test_harness import CORRECT

from edgekernelbench.cluster.cores import CoreBusy, Cores, claim_cores, parse_cpu_list, physical_cores
from edgekernelbench.cluster.environ import clean_environ, secret_names, strip_secrets, without_secrets
from edgekernelbench.records import Node, Result, Timing
from edgekernelbench.report.summary import node_lines, node_rows


def test_cpu_lists():
    assert parse_cpu_list("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpu_list("5") == (5,)


def fake_sysfs(root, siblings: dict[int, str], name="thread_siblings_list"):
    for cpu, text in siblings.items():
        d = root / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / name).write_text(text + "\n")
    return root


def test_physical_cores_count_smt_siblings_once(tmp_path):
    root = fake_sysfs(tmp_path, {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3"})
    assert physical_cores(root, {0, 1, 2, 3}) == Cores(((0, 2), (1, 3)), f"sysfs topology ({root})")
    assert physical_cores(root, {0, 1, 2}).groups == ((0, 2), (1,))  # only the CPUs it may use
    newer = fake_sysfs(tmp_path / "newer", {0: "0-1", 1: "0-1"}, "core_cpus_list")
    assert physical_cores(newer, {0, 1}).groups == ((0, 1),)
    bare = physical_cores(tmp_path / "nothing", {0, 1})
    assert bare.groups == ((0,), (1,)) and "every CPU counted" in bare.source


@pytest.fixture
def one_core(monkeypatch, tmp_path):
    """This process's first CPU as a core of its own, its lock files in a directory of the test."""
    monkeypatch.setenv("EKB_CORE_LOCKS", str(tmp_path / "locks"))
    return Cores(((min(os.sched_getaffinity(0)),),), "test")


def test_a_timed_claim_holds_its_core_alone(one_core):
    before = os.sched_getaffinity(0)
    with claim_cores(1, exclusive=True, wait_s=5, cores=one_core) as claim:
        assert claim.exclusive and claim.cpus == one_core.groups[0]
        assert os.sched_getaffinity(0) == set(claim.cpus)
        child = subprocess.run(
            [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert child.stdout.strip() == str(list(claim.cpus))  # what it starts runs there too
        for exclusive in (True, False):  # nobody else on it while it times, timed or not
            with pytest.raises(CoreBusy), claim_cores(1, exclusive, wait_s=0.2, cores=one_core):
                pass
    assert os.sched_getaffinity(0) == before  # released and restored
    with claim_cores(1, exclusive=True, wait_s=1, cores=one_core):
        pass


def test_untimed_claims_share_a_core_a_timed_one_waits_for(one_core):
    with claim_cores(1, exclusive=False, wait_s=1, cores=one_core), claim_cores(1, False, 1, one_core) as b:
        assert not b.exclusive and b.cpus == one_core.groups[0]
        with pytest.raises(CoreBusy, match="no 1 free core"), claim_cores(1, True, 0.2, one_core):
            pass


def test_an_untimed_claim_runs_on_every_core_no_timed_claim_holds(monkeypatch, tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("one CPU here: nothing to spread over")
    monkeypatch.setenv("EKB_CORE_LOCKS", str(tmp_path))
    two = Cores(((cpus[0],), (cpus[1],)), "test")
    with claim_cores(1, False, 1, two) as a:
        assert a.cpus == (cpus[0], cpus[1])  # its builder and judge spread over both
        # a timed claim waits for a core no untimed task holds
        with pytest.raises(CoreBusy), claim_cores(1, True, 0.2, two):
            pass
    with claim_cores(1, True, 1, two) as timed, claim_cores(1, False, 1, two) as untimed:
        assert timed.cpus == (cpus[0],) and untimed.cpus == (cpus[1],)  # never on the timed core


def test_secrets_are_named_kept_out_and_given_back(monkeypatch):
    env = {
        "OPENAI_API_KEY": "a",
        "ANTHROPIC_API_KEY": "b",
        "HF_TOKEN": "c",
        "AWS_SECRET_ACCESS_KEY": "d",
        "DB_PASSWORD": "e",
        "RAY_AUTH_MODE": "disabled",
        "PATH": "/bin",
        "EKB_PROBLEM_MODULES": "x",
    }
    assert secret_names(env) == [
        "ANTHROPIC_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "HF_TOKEN",
        "OPENAI_API_KEY",
    ]
    assert clean_environ(env) == {"RAY_AUTH_MODE": "disabled", "PATH": "/bin", "EKB_PROBLEM_MODULES": "x"}
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with without_secrets() as gone:
        assert "OPENAI_API_KEY" in gone and "OPENAI_API_KEY" not in os.environ
    assert os.environ["OPENAI_API_KEY"] == "sk-test"
    assert "OPENAI_API_KEY" in strip_secrets() and "OPENAI_API_KEY" not in os.environ


def timed(sample: int, node: Node | None) -> Result:
    t = Timing(1e-5, 0.0, 1e-5, 1e-5, 3, 10, [1e-5] * 3)
    return Result(TINY, sample, "host-cpu", correct=True, runtime=t, node=node)


def test_the_report_says_which_node_judged_what_and_when_cpus_differ():
    a = Node("h1", "a" * 56, "AMD EPYC", "znver4", ("avx2",), (0,), True)
    b = Node("h2", "b" * 56, "Intel Xeon", "cascadelake", ("avx2", "avx512f"), (1,), True)
    results = [timed(0, a), timed(1, a), timed(2, b), Result(TINY, 3, "host-cpu", node=b), timed(4, None)]
    rows = {r.node: r for r in node_rows(results)}
    assert set(rows) == {"h1/aaaaaaaa", "h2/bbbbbbbb", "unknown"}
    assert (rows["h2/bbbbbbbb"].judged, rows["h2/bbbbbbbb"].timed, rows["h2/bbbbbbbb"].correct) == (2, 1, 1)
    (line,) = node_lines(results)
    assert (
        "2 CPU models" in line and "2 on AMD EPYC (znver4" in line and "1 on Intel Xeon (cascadelake" in line
    )
    assert node_lines(results[:2]) == []
    again = Result.from_dict(results[2].to_dict())  # as the run store keeps it
    assert again.node == b and again.node.label == "h2/bbbbbbbb"


def ekb_main(*args) -> int:
    from edgekernelbench.cli import main

    return main([str(a) for a in args])


def test_asking_for_ray_without_it_is_one_line(tmp_path, monkeypatch, capsys):
    write_candidates(tmp_path, {0: CORRECT})
    monkeypatch.setitem(sys.modules, "ray", None)  # as if it were not installed
    for args in (("eval", tmp_path, "--jobs", "2"), ("eval", tmp_path, "--ray", "127.0.0.1:6379")):
        assert ekb_main(*args) == 2
        err = capsys.readouterr().err.strip()
        assert (
            err
            == "ekb: error: Ray is not installed: pip install 'edgekernelbench[cluster]' (--ray and --jobs N > 1 use it)"
        )


def test_nobody_at_the_address_is_one_line(tmp_path, capsys):
    write_candidates(tmp_path, {0: CORRECT})
    assert ekb_main("eval", tmp_path, "--ray", "127.0.0.1:1", "--no-measure") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ekb: error: --ray 127.0.0.1:1: no Ray cluster answers there") and "\n" not in err
    assert ekb_main("eval", tmp_path, "--ray", "ray://10.0.0.1:10001", "--no-measure") == 2
    assert "Ray Client addresses are not supported" in capsys.readouterr().err
    assert ekb_main("eval", tmp_path, "--ray", "headnode", "--no-measure") == 2
    assert "give the head's address as HOST:PORT" in capsys.readouterr().err


def test_an_external_agent_is_refused_on_ray(tmp_path, capsys):
    args = (
        "agent",
        "--out",
        tmp_path,
        "--problem",
        TINY,
        "--methods",
        "cli",
        "--agent-cmd",
        "true",
        "--jobs",
        "2",
    )
    assert ekb_main(*args) == 2
    assert "not on Ray" in capsys.readouterr().err


def test_cluster_start_declares_the_timing_slots(capsys):
    assert ekb_main("cluster", "start", "--head", "--timing-slots", "3", "--num-cpus", "4", "--dry-run") == 0
    out = capsys.readouterr().out
    assert (
        "start --head --port 6379" in out and """'{"ekb_timing_slot": 3}'""" in out and "--num-cpus 4" in out
    )
    assert ekb_main("cluster", "start", "--dry-run") == 2
    assert "give either --head" in capsys.readouterr().err


def test_an_episodes_files_come_back_into_the_run_directory_only(tmp_path):
    from edgekernelbench.cluster.agents import _files, write_files

    scratch = tmp_path / "scratch"
    (scratch / "agents" / "metaschedule" / "L1_x").mkdir(parents=True)
    (scratch / "agents" / "metaschedule" / "L1_x" / "database_tuning_record.json").write_text("[1]\n")
    (scratch / "agents" / "link").symlink_to(tmp_path / "elsewhere")
    files = _files(scratch)
    assert files == [("agents/metaschedule/L1_x/database_tuning_record.json", b"[1]\n")]  # no link followed
    run = tmp_path / "run"
    run.mkdir()
    write_files(run, [*files, ("../escaped.txt", b"x"), ("/tmp/abs.txt", b"y")])
    assert (run / files[0][0]).read_bytes() == b"[1]\n"
    assert not (tmp_path / "escaped.txt").exists() and not (run / "tmp").exists()


def test_progress_reads_per_node():
    from edgekernelbench.cluster.pool import Progress

    p = Progress(total=5, done=3, running=2, failed=1)
    p.node("h/aaaaaaaa").done, p.node("h/aaaaaaaa").running = 2, 1
    p.node("h/bbbbbbbb").done, p.node("h/bbbbbbbb").failed = 1, 1
    assert (
        p.line() == "done 3 · running 2 · failed 1 | h/aaaaaaaa 2/1/0, h/bbbbbbbb 1/0/1 (done/running/failed)"
    )


def test_a_node_resolves_the_profile_itself_and_refuses_an_isa_it_lacks():
    from edgekernelbench.backends.hostinfo import host_facts, missing_features
    from edgekernelbench.backends.profiles import load_profiles
    from edgekernelbench.cluster.tasks import NodeCannotRun, profile_here

    profiles = load_profiles()
    assert profile_here(profiles["host-cpu"]).vector_bits == host_facts().vector_bits  # this node's, detected
    pinned = profiles["host-avx512"]
    missing = missing_features(pinned)
    if missing:  # an AVX2-only CPU: its candidates would die of SIGILL here
        with pytest.raises(NodeCannotRun, match=missing[0]):
            profile_here(pinned)
    else:
        assert profile_here(pinned).vector_bits == 512
