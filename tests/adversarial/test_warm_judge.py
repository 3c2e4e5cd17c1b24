"""The warm judge (harness/zygote.py): the builders and judges of an episode forked from one process.

Same verdicts as fresh workers, the same sandbox for each child plus a PID namespace of its own, nothing a
candidate does reaches the next candidate, and a warm judge that dies mid-job costs a re-judgment, never a
wrong verdict."""

from __future__ import annotations

import os
import signal

import psutil
import pytest
from test_python_attacks import PROBLEM, RIGHT, WRONG, attack, daemons, tell

from edgekernelbench.generators.reference_candidates import reference_spec
from edgekernelbench.harness import isolation
from edgekernelbench.harness.api import evaluate, warm_judge
from edgekernelbench.harness.isolation import Limits
from edgekernelbench.harness.timing import TimingConfig
from edgekernelbench.ir.spec import KernelSpec
from edgekernelbench.problems import get_problem

pytestmark = pytest.mark.fresh_workers  # outside the session's warm judge (tests/conftest.py)

LIMITS = Limits(timeout_s=120, memory_mb=4096)


def judge(module: str, **kw):
    spec = KernelSpec(problem=PROBLEM, module=module, method="attack")
    kw.setdefault("trials", 2)
    kw.setdefault("measure", False)
    return evaluate(PROBLEM, spec, limits=LIMITS, **kw)


@pytest.fixture
def started(monkeypatch):
    """The warm judges started during the test (their WarmJudge handles)."""
    out = []
    real = isolation._start_warm

    def counting(job, limits, key):
        warm, why = real(job, limits, key)
        out.append(warm)
        return warm, why

    monkeypatch.setattr(isolation, "_start_warm", counting)
    return out


def test_an_episode_is_judged_by_children_of_one_warm_judge(started):
    with warm_judge():
        right = judge(attack("pass", RIGHT), measure=True, timing=TimingConfig.quick())
        wrong = judge(attack("pass", WRONG))
        again = judge(attack("pass", RIGHT))
    assert right.correct and "tvm-default" in right.speedups, right.detail
    assert wrong.reason == "wrong_output"
    assert again.correct
    assert len(started) == 1 and started[0] is not None
    assert started[0].proc.poll() is not None  # closed with the block
    for r in (right, wrong, again):
        assert all(r.extra["isolation"][p]["forked"] for p in ("builder", "judge")), r.extra["isolation"]
    assert right.extra["runner"] == "separate process (forked)"
    fresh = judge(attack("pass", WRONG))  # outside the block: fresh workers again
    assert fresh.reason == "wrong_output" and not fresh.extra["isolation"]["judge"]["forked"]


def test_a_forked_builder_sees_only_its_own_pid_namespace():
    code = "import os\n" + tell("'pids %s in %s' % (sorted(os.listdir('/proc')), os.getcwd())")
    with warm_judge():
        r = judge(
            attack(code.replace("os.listdir('/proc')", "p for p in os.listdir('/proc') if p.isdigit()"))
        )
    assert r.reason == "parse_error" and r.detail.startswith("pids ['1'] in "), r.detail
    assert r.detail.endswith("/build"), r.detail


def test_what_a_candidate_does_in_its_child_does_not_reach_the_next_candidate():
    """The attack patches the judge's comparison and the harness's modules, kills every process it can
    name and tries its parents; the next candidate, wrong, is still found wrong, and a right one right."""
    code = (
        "import os, signal\n"
        "import edgekernelbench.harness.evaluate as ev\n"
        "ev._compare = lambda *a, **k: (None, '', [0.0], [0.0])\n"
        "ev.check_correctness = lambda *a, **k: ev.Correctness(correct=True, trials=5)\n"
        "for pid in (-1, 1, os.getppid(), 0):\n"
        "    try:\n"
        "        os.kill(pid, signal.SIGKILL)\n"
        "    except OSError:\n"
        "        pass\n"
    )
    with warm_judge():
        first = judge(attack(code))
        after = judge(attack("pass", WRONG))
        right = judge(attack("pass", RIGHT))
    assert not first.correct, (first.reason, first.detail)
    assert after.reason == "wrong_output", (after.reason, after.detail)
    assert right.correct, right.detail
    assert after.extra["isolation"]["judge"]["forked"]


def test_no_process_a_forked_builder_starts_survives_it():
    tag, code = daemons()
    with warm_judge():
        r = judge(attack(code))
        left = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", tag]]
    for p in left:
        p.kill()
    assert r.reason == "wrong_output", (r.reason, r.detail)
    assert not left, f"{len(left)} process(es) outlived the candidate's child"


def test_a_warm_judge_that_dies_mid_job_costs_a_fresh_judgment(monkeypatch, started):
    from edgekernelbench.harness.warm import WarmJudge

    real = WarmJudge.launch
    killed = []

    def launch_then_die(self, *a, **k):
        child = real(self, *a, **k)
        if not killed:  # the first child's start: the warm judge is killed under it
            killed.append(self.proc.pid)
            os.killpg(self.proc.pid, signal.SIGKILL)
        return child

    monkeypatch.setattr(WarmJudge, "launch", launch_then_die)
    with warm_judge():
        r = judge(attack("pass", WRONG))
        r2 = judge(attack("pass", RIGHT))
    assert killed
    assert r.reason == "wrong_output" and not r.extra["isolation"]["judge"]["forked"], r.extra["isolation"]
    assert r2.correct and r2.extra["isolation"]["judge"]["forked"]  # a new warm judge for the next job
    assert len(started) == 2


def test_an_l3_models_judge_runs_its_candidate_in_a_separate_process():
    """Building an L3 model runs ONNX Runtime for its calibration, whose threads left the judge unable to
    fork its runner: the candidate's native code ran inside the judge. The parent now hands the built
    graph to its workers."""
    problem = get_problem("L3/cnn1d_har")
    r = evaluate(problem.id, reference_spec(problem), measure=False, trials=1, limits=LIMITS)
    assert r.correct, r.detail
    assert r.extra["runner"] == "separate process (forked)", r.extra["runner"]


def test_a_problem_takes_the_graph_its_parent_built(tmp_path):
    from edgekernelbench.problems.base import Problem

    built = get_problem(PROBLEM)
    built.export_graph(tmp_path)
    fields = ("id", "level", "domain", "category", "source", "graph")
    twin = Problem(**{f: getattr(built, f) for f in fields})
    assert twin.adopt_graph(tmp_path)
    assert twin.model.SerializeToString() == built.model.SerializeToString()
    assert twin.inputs == built.inputs
    assert not twin.adopt_graph(tmp_path)  # built already: kept
    assert not Problem(**{f: getattr(built, f) for f in fields}).adopt_graph(tmp_path / "none")


def test_a_warm_judges_kernels_are_compiled_once_and_no_candidate_can_write_them(started):
    """The judges of a warm judge compile a candidate's kernels into its kernel cache, each once; a
    builder (the candidate's Python) can neither add nor replace an object file there, so the next
    candidate links only what a judge compiled."""

    def poison(cache, names) -> str:  # writes, or tries to, the object files there and one of its own
        files = [str(cache / n) for n in ["evil.o", *names]]
        return (
            "out = []\n"
            f"for f in {files!r}:\n"
            "    try:\n"
            "        open(f, 'wb').write(b'poison'); out.append('wrote ' + f)\n"
            "    except OSError as e:\n"
            "        out.append(type(e).__name__)\n" + tell("'; '.join(out)")
        )

    with warm_judge():
        first = judge(attack("pass", RIGHT))
        cache = started[0].kernel_cache
        before = {p.name: p.read_bytes() for p in cache.glob("*.o")}
        poisoned = judge(attack(poison(cache, before), RIGHT))
        again = judge(attack("pass", RIGHT))
        wrong = judge(attack("pass", WRONG))
        after = {p.name: p.read_bytes() for p in cache.glob("*.o")}
    assert first.correct and first.extra["kernel_cache"]["compiled"] >= 1, first.extra.get("kernel_cache")
    assert first.extra["isolation"]["judge"]["write"] == ["job directory", "kernel cache"]
    assert first.extra["isolation"]["builder"]["write"] == ["job directory"]
    assert poisoned.reason == "parse_error", poisoned.detail
    assert "wrote" not in poisoned.detail and poisoned.detail.count("PermissionError") == 1 + len(before)
    assert again.correct and again.extra["kernel_cache"]["compiled"] == 0, again.extra.get("kernel_cache")
    assert wrong.reason == "wrong_output" and wrong.extra["kernel_cache"]["compiled"] >= 1
    assert before and all(after[name] == data for name, data in before.items())
    assert not any(p.endswith("evil.o") for p in after)


def test_a_cluster_workers_warm_judge_serves_every_problem_on_the_cores_it_has_now(started):
    """A cluster worker (cluster/tasks.py) keeps one warm judge for its life and judges one candidate per
    task, of any problem: a job of another problem than the one the warm judge preloaded is forked from it
    too (it takes that problem's graph from the parent), with the same verdicts; and each child runs on the
    CPUs its parent holds when it is started, not on those the warm judge had when it started."""
    import threading

    other = get_problem("L1/relu6_mobilenetv2")
    where = "'cpus %s' % sorted(os.sched_getaffinity(0))"
    out: dict = {}

    def worker() -> None:
        isolation.lasting_warm_judge()
        try:
            out["first"] = judge(attack("pass", RIGHT))
            out["other"] = evaluate(other.id, reference_spec(other), measure=False, trials=2, limits=LIMITS)
            cpu = min(os.sched_getaffinity(0))
            os.sched_setaffinity(0, {cpu})  # as cluster.cores.claim_cores pins a task's thread
            out["cpu"] = cpu
            out["pinned"] = judge(attack("import os\n" + tell(where)))
            out["wrong"] = judge(attack("pass", WRONG))
        finally:
            isolation._close_slot(isolation._WARM.slot)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert out["first"].correct and out["other"].correct, (out["first"].detail, out["other"].detail)
    assert out["other"].extra["isolation"]["judge"]["forked"], out["other"].extra["isolation"]
    assert out["wrong"].reason == "wrong_output"
    assert out["pinned"].detail == f"cpus [{out['cpu']}]", out["pinned"].detail
    assert len(started) == 1 and started[0] is not None  # one warm judge for both problems
    assert started[0].proc.poll() is not None  # closed with the worker's slot


def test_the_methods_of_a_problem_share_one_warm_judge(started, tmp_path):
    """`ekb agent`'s methods on one problem are judged by children of one warm judge (started for the
    problem, whose reference and baseline it builds once); the next problem gets a warm judge of its own."""
    from test_agents import config  # the agent tests' configuration: short protocol, 2 trials

    from edgekernelbench.agents.run import run_agents
    from edgekernelbench.store import RunStore

    cfg = config(tmp_path, budget=1, reuse=False)
    problems = [get_problem(PROBLEM), get_problem("L1/relu6_mobilenetv2")]
    run_agents(tmp_path / "run", problems, ["direct", "leka"], cfg)
    assert len(started) == 2 and all(w is not None for w in started)
    assert [w.key[0] for w in started] == [p.id for p in problems]
    assert all(w.proc.poll() is not None for w in started)  # each closed after its problem
    with RunStore(tmp_path / "run") as store:
        results = store.results()
    assert len(results) == 6 and all(r.correct for r in results)  # direct, direct@B, leka per problem
    assert all(r.extra["isolation"]["judge"]["forked"] for r in results)
