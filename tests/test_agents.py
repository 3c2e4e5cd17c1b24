"""Agents end to end: a scripted model on the local fake server drives LEKA, direct and flat; a scripted
stand-in plays the external coding agent; the offline proposer runs through `ekb agent`. Every candidate is
judged by the real judge; the budget is never exceeded; trajectories and the kernel database are kept."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import textwrap

import pytest
from llm_fake_server import FakeLLM

from edgekernelbench.agents.budget import Budget, BudgetExhausted, Usage
from edgekernelbench.agents.episode import AgentConfig, ProfileRow
from edgekernelbench.agents.run import run_agents
from edgekernelbench.backends.registry import get_profile
from edgekernelbench.harness.api import TimingConfig
from edgekernelbench.kerneldb import Entry, KernelDB
from edgekernelbench.problems import get_problem
from edgekernelbench.store import RunStore

MATMUL, TINY = "L1/tiny_matmul_128", "L1/tiny_scale_add"
QUICK = TimingConfig(warmup_ms=2.0, min_repeat_ms=2.0, rounds=5)


def answer(code: str) -> dict:
    return {"text": "Here you go:\n```python\n" + textwrap.dedent(code).strip() + "\n```\n"}


NO_CODE = {"text": "I would tile the loops and vectorize the inner one."}
BAD_STEP = answer(
    """
    def schedule(name, sch):
        b = sch.get_sblock("matmul")
        i, j, k = sch.get_loops(b)
        sch.split(j, factors=[7, 5])
    """
)
WRONG = answer(  # accumulates in float16: outside the tolerance
    """
    def schedule(name, sch):
        b = sch.get_sblock("matmul")
        sch.cache_write(b, 0, "global")
        sch.unsafe_set_dtype(b, 0, "float16")
    """
)
FAST = answer(
    """
    def schedule(name, sch):
        b = sch.get_sblock("matmul")
        i, j, k = sch.get_loops(b)
        io, ii = sch.split(i, factors=[None, 4])
        jo, ji = sch.split(j, factors=[None, 32])
        sch.reorder(io, jo, k, ii, ji)
        sch.unroll(ii)
        sch.vectorize(ji)
        sch.decompose_reduction(b, k)
    """
)
TINY_OK = answer(
    """
    def schedule(name, sch):
        block = sch.get_child_blocks(sch.get_sblock("root"))[-1]
        sch.vectorize(sch.get_loops(block)[-1])
    """
)


def config(tmp_path, model=None, budget=4, **kw) -> AgentConfig:
    return AgentConfig(
        backend=get_profile("host-cpu", 1),
        trials=2,
        timing=QUICK,
        final_timing=None,  # the final judgments with the same short protocol (fast tests)
        budget=Budget(calls=budget, evals=budget, wall_s=kw.pop("wall_s", 600)),
        model=model,
        cache_path=tmp_path / "llm_cache.db",
        kernel_db=tmp_path / "kernels.db",
        **kw,
    )


def steps(run_dir, method):
    with RunStore(run_dir) as s:
        return s.agent_steps(method=method), s.agent_runs(), {(r.problem, r.sample): r for r in s.results()}


class ScriptedEp:
    """An Episode whose judge is scripted: `speedup(spec)` is the candidate's speedup over tvm-default
    (None: wrong); `judged` holds (spec, keyword arguments) of each judgment, `steps` what was recorded."""

    method = "leka"

    def __init__(self, speedup):
        self.problem, self.speedup, self.judged, self.steps = get_problem(TINY), speedup, [], []

    def judge(self, spec, **kw):
        from edgekernelbench.records import Result

        self.judged.append((spec, kw))
        s = self.speedup(spec)
        res = Result(
            problem=TINY, sample=4, backend="host-cpu", correct=s is not None, speedups={"tvm-default": s}
        )
        res.speedup_ci = {"tvm-default": [s * 0.99, s * 1.01]} if s else {}
        return res

    def record(self, **kw):
        self.steps.append(kw)


def test_budget_counts_and_stops():
    u = Usage(Budget(calls=2, evals=1, wall_s=100))
    u.charge_call()
    u.charge_call()
    with pytest.raises(BudgetExhausted, match="model calls"):
        u.charge_call()
    u.charge_eval()
    with pytest.raises(BudgetExhausted, match="evaluations"):
        u.charge_eval()
    assert (u.calls, u.evals, u.stopped) == (2, 1, "evals")
    u.record_tokens(10, 5, 0.5, cached=False)
    u.record_tokens(10, 5, None, cached=True)
    assert u.input_tokens == 20 and u.cost is None and u.cached_calls == 1


def test_patience_stops_after_judgments_that_kept_nothing():
    u = Usage(Budget(calls=9, evals=9, wall_s=100), patience=2)
    for improved in (True, False, True, False, False):
        u.charge_eval()
        u.judged(improved)
    with pytest.raises(BudgetExhausted, match="patience"):
        u.charge_eval()
    assert (u.evals, u.stopped) == (5, "patience")
    off = Usage(Budget(calls=9, evals=3, wall_s=100))  # patience 0: only the budget stops it
    for _ in range(3):
        off.charge_eval()
        off.judged(False)
    with pytest.raises(BudgetExhausted, match="evaluations"):
        off.charge_eval()


def test_leka_stops_when_its_patience_runs_out(tmp_path):
    """Budget 6, patience 2: the start and a faster schedule improve, then a wrong answer and one that fails
    at a step do not; LEKA stops there with budget left, and says why."""
    run = tmp_path / "run"
    with FakeLLM({MATMUL: [FAST, WRONG, BAD_STEP, FAST, FAST]}) as fake:
        cfg = config(tmp_path, model=f"openai-compatible:{fake.openai_url}:local-model", budget=6, patience=2)
        run_agents(run, [get_problem(MATMUL)], ["leka"], cfg)
    trajectory, runs, results = steps(run, "leka")
    usage = runs[(MATMUL, "leka")]["usage"]
    assert usage["evals"] == 4 and usage["stopped"] == "patience", usage
    assert [s.get("improved") for s in trajectory if s.get("kind") == "judge"] == [True, True, False, False]
    assert any(s.get("kind") == "stop" and "patience" in s.get("why", "") for s in trajectory)
    assert results[(MATMUL, 4)].correct


def test_leka_with_a_scripted_model(tmp_path):
    """Answers that have no code, fail at a named step, are wrong, then correct and faster: LEKA feeds each
    verdict back, keeps only the correct and faster layer, and stays within the budget."""
    run = tmp_path / "run"
    with FakeLLM({MATMUL: [NO_CODE, BAD_STEP, WRONG, FAST]}) as fake:
        cfg = config(tmp_path, model=f"openai-compatible:{fake.openai_url}:local-model", budget=4)
        run_agents(run, [get_problem(MATMUL)], ["leka"], cfg)
        prompts = [c["body"]["messages"][-1]["content"] for c in fake.calls]
    trajectory, runs, results = steps(run, "leka")
    usage = runs[(MATMUL, "leka")]["usage"]
    assert usage["calls"] == 4 and usage["evals"] == 4 and usage["input_tokens"] == 4000
    judged = [s for s in trajectory if s.get("kind") == "judge"]
    reasons = [s["verdict"]["reason"] for s in judged]
    assert reasons == [None, "decision_error", "wrong_output", None], reasons
    assert "step" in judged[1]["verdict"]["detail"] and "loop layer" in judged[1]["verdict"]["detail"]
    # each verdict went back to the model in the next prompt
    assert "no usable code" in prompts[1]
    assert "decision_error" in prompts[2] and "step 2 (schedule_code)" in prompts[2]
    # three attempts at the loop layer failed: the fourth call asks for the memory layer
    assert "## This step: the loop layer" in prompts[2] and "## This step: the memory layer" in prompts[3]
    assert all("`matmul`" in p and "## This step: the" in p for p in prompts)
    accepted = [s for s in trajectory if s.get("kind") == "accept"]
    assert len(accepted) == 1 and accepted[0]["speedup"] > 1.5
    final = results[(MATMUL, 4)]
    assert final.correct and final.method == "agent:leka" and final.speedups["tvm-default"] > 1.5
    spec = json.loads((run / "candidates" / MATMUL / "sample4.json").read_text())
    # the kept layer is data: the trace the accepted code made, in the layer it was asked for
    assert spec["decisions"]["memory"].get("matmul") and not spec.get("schedule_code")
    with KernelDB(tmp_path / "kernels.db") as db:
        (entry,) = db.entries()
    assert entry.problem == MATMUL and entry.method == "leka" and entry.speedup > 1.5


def test_leka_reuses_the_kernel_database(tmp_path):
    """A workload found in the database is replayed first, before any budget is spent on it."""
    run1, run2 = tmp_path / "r1", tmp_path / "r2"
    with FakeLLM({MATMUL: [FAST]}) as fake:
        cfg = config(tmp_path, model=f"openai-compatible:{fake.openai_url}:local-model", budget=2)
        run_agents(run1, [get_problem(MATMUL)], ["leka"], cfg)
        n_calls = len(fake.calls)
        run_agents(
            run2, [get_problem(MATMUL)], ["leka"], config(tmp_path, budget=1)
        )  # offline, one evaluation
    trajectory, runs, results = steps(run2, "leka")
    assert n_calls >= 1
    assert trajectory[0]["kind"] == "reuse" and trajectory[0]["kernels"] == ["matmul"]
    first = next(s for s in trajectory if s.get("kind") == "judge")
    assert first["verdict"]["correct"] and first["verdict"]["speedups"]["tvm-default"] > 1.5
    assert runs[(MATMUL, "leka")]["usage"]["evals"] == 1


def test_leka_offline_judges_the_graph_layer(tmp_path, monkeypatch):
    """The builtin proposer offers NHWC for a convolution: LEKA judges it right after the start. With
    an acceptance that keeps every correct decision, whatever its time, the NHWC candidate is kept: the judge
    found it correct, it holds the graph passes and decisions keyed by the NHWC graph's kernels."""
    from edgekernelbench.agents import leka
    from edgekernelbench.ir.spec import KernelSpec
    from edgekernelbench.search.graph import CLIP_AS_OPS, NHWC, graph_key
    from edgekernelbench.search.kernels import kernels

    conv = get_problem("L1/tiny_conv3x3")  # + ReLU6: the clamps as operators, then channels last
    monkeypatch.setattr(leka, "improves", lambda res, best: res.correct)
    run_agents(tmp_path / "run", [conv], ["leka"], config(tmp_path, budget=2, reuse=False))
    trajectory, runs, results = steps(tmp_path / "run", "leka")
    judged = [s for s in trajectory if s.get("kind") == "judge"]
    assert judged[1].get("layer") == "graph" and "NHWC" in judged[1]["proposal"]
    assert [s["layer"] for s in trajectory if s.get("kind") == "accept"] == ["graph"]
    graph = KernelSpec.from_json(json.dumps(judged[1]["spec"]))
    assert judged[1]["verdict"]["correct"] and graph.decisions.graph["passes"] == CLIP_AS_OPS + NHWC
    nhwc = {k.name: k.workload for k in kernels(conv.id, graph_key(CLIP_AS_OPS + NHWC))}
    assert graph.decisions.workloads and all(nhwc[n] == w for n, w in graph.decisions.workloads.items())
    assert results[(conv.id, 4)].correct  # the final candidate (the best measured, either graph)


def test_the_graph_layer_keeps_only_a_correct_and_faster_graph(monkeypatch):
    """_graph_layer with a scripted judge: a wrong graph, then a correct but not faster one (within
    MIN_GAIN), and one faster by its estimate whose confidence interval reaches below the best, are dropped
    and the proposer is left on the reference's graph; a correct and faster one is kept, and the next
    change is judged on top of it."""
    from edgekernelbench.agents import leka
    from edgekernelbench.records import Result
    from edgekernelbench.search.graph import graph_key

    class Proposer:
        graph = ""

        def graphs(self):
            return [
                ("graph A", [{"name": "FoldConstant", "args": {}}]),
                ("graph B", [{"name": "FuseTIR", "args": {}}]),
            ]

        def start(self, name):
            return None

    class Ep:
        problem, method = get_problem(TINY), "leka"
        cfg = type("Cfg", (), {"reuse": False})

        def __init__(self, verdicts):
            self.verdicts, self.judged, self.steps, self.accepted = list(verdicts), [], [], []

        def judge(self, spec, **kw):
            self.judged.append(spec)
            correct, s, *ci = self.verdicts.pop(0)
            speedups = {"tvm-default": s} if correct else {}
            res = Result(problem=TINY, sample=4, backend="host-cpu", correct=correct, speedups=speedups)
            res.speedup_ci = {"tvm-default": ci[0]} if ci else {}
            self.accepted.append(kw["accept"](res))  # what the episode will hold as its best
            return res

        def record(self, **kw):
            self.steps.append(kw)

    monkeypatch.setattr(leka, "kernels", lambda pid, graph="": ())
    monkeypatch.setattr(leka, "same_graph", lambda pid, a, b: False)
    a, b = (passes for _, passes in Proposer().graphs())
    for verdicts, kept in (
        ([(False, 0.0), (True, 1.01)], []),  # wrong; within MIN_GAIN: nothing kept
        ([(True, 1.5, [0.97, 1.6]), (True, 1.3, [0.99, 1.4])], []),  # lucky rounds: nothing kept
        ([(True, 0.5), (True, 1.5)], b),  # slower; faster: B kept
        ([(True, 1.5), (True, 2.0)], a + b),  # A kept, then B on top of it
    ):
        ep, prop = Ep(verdicts), Proposer()
        out = leka._graph_layer(ep, None, prop, "t", best=1.0)
        assert [s.decisions.graph["passes"] for s in ep.judged] == [a, (a if kept == a + b else []) + b]
        assert ep.accepted == [kept == a + b, bool(kept)]
        if not kept:
            assert out is None and prop.graph == ""
        else:
            assert out[3] == kept and out[4] == verdicts[-1][1] and prop.graph == graph_key(kept)
            assert ep.steps[-1] == {
                "kind": "accept",
                "layer": "graph",
                "proposal": "graph B",
                "speedup": out[4],
            }


def test_a_graph_change_that_rewrites_nothing_costs_no_judgment(monkeypatch):
    """_graph_layer skips a graph change whose module is the graph it would be judged against
    (`same_graph`): recorded as a proposal that changes nothing, no judgment spent; the next one is judged.
    It is handed to the retry (a change kept there may give it something to rewrite), which judges it only
    then."""
    from edgekernelbench.agents import leka
    from edgekernelbench.records import Result

    judged, steps = [], []

    class Proposer:
        graph = ""

        def graphs(self):
            return [
                ("no-op", [{"name": "FoldConstant", "args": {}}]),
                ("real", [{"name": "FuseTIR", "args": {}}]),
            ]

        def start(self, name):
            return None

    class Ep:
        problem, method = get_problem(TINY), "leka"
        cfg = type("Cfg", (), {"reuse": False})

        def judge(self, spec, **kw):
            judged.append(spec.decisions.graph["passes"])
            return Result(
                problem=TINY, sample=4, backend="host-cpu", correct=True, speedups={"tvm-default": 1.0}
            )

        def record(self, **kw):
            steps.append(kw)

    monkeypatch.setattr(leka, "kernels", lambda pid, graph="": ())
    monkeypatch.setattr(leka, "same_graph", lambda pid, a, b: "FoldConstant" in b)
    rejected = []
    leka._graph_layer(Ep(), None, Proposer(), "t", best=1.0, rejected=rejected)
    assert judged == [[{"name": "FuseTIR", "args": {}}]]
    trial = [{"name": "FoldConstant", "args": {}}]
    assert rejected[0] == ("no-op", trial)
    # nor judged again on the tuned kernels while it still rewrites nothing (_graph_retry's _retry_one)
    assert leka._retry_one(Ep(), "no-op", trial, {}, {}, {}, leka.Whole([]), 1.0, []) is None
    assert len(judged) == 1
    assert steps[0] == {
        "kind": "proposal",
        "layer": "graph",
        "proposal": "no-op",
        "error": "changes nothing in this graph",
    }


def test_a_graph_is_also_kept_by_its_kernels_total_time():
    """A graph change is judged once and the whole model's time is noisy: one whose kernels' total in the
    judge's profile is below the best's by MIN_GAIN is kept though its whole-model speedup is within noise
    of the best's (the best's speedup then stays); not when the whole model is slower by more than
    WHOLE_SLACK, when the kernels are not faster, or without a profile of the best. Kernels the change
    left as they were are not counted."""
    from edgekernelbench.agents import leka
    from edgekernelbench.records import Result, kernel_times

    def res(s, us):
        r = Result(problem=TINY, sample=4, backend="host-cpu", correct=True, speedups={"tvm-default": s})
        r.speedup_ci = {"tvm-default": [s * 0.95, s * 1.05]}
        r.kernels = kernel_times([{"kernel": "a", "median": u * 1e-6, "share": 0.5} for u in us])
        return r

    best_rows = [ProfileRow(kernel="a", us=10.0, share=0.5), ProfileRow(kernel="b", us=10.0, share=0.5)]
    assert leka.improves_whole(res(55.7, [8.0, 8.0]), 55.0, best_rows)  # 20% less kernel time
    assert not leka.improves_whole(res(45.0, [8.0, 8.0]), 55.0, best_rows)  # the model 18% slower
    assert not leka.improves_whole(res(55.7, [9.9, 9.9]), 55.0, best_rows)  # kernels 1% faster only
    assert not leka.improves_whole(res(55.7, [8.0, 8.0]), 55.0, None)  # no profile of the best
    assert leka.improves_whole(res(70.0, [12.0, 12.0]), 55.0, best_rows)  # surely faster as a whole
    wrong = Result(problem=TINY, sample=4, backend="host-cpu", correct=False)
    assert not leka.improves_whole(wrong, 55.0, best_rows)
    # a change that leaves kernel "b" as it was: b's noise is left out of both totals
    two = res(55.7, [])
    two.kernels = kernel_times(
        [
            {"kernel": "a", "median": 8e-6, "share": 0.1},  # 20% faster than the best's 10 us
            {"kernel": "b", "median": 93e-6, "share": 0.9},  # the same code, measured 3% slower this time
        ]
    )
    rows_ab = [ProfileRow(kernel="a", us=10.0, share=0.1), ProfileRow(kernel="b", us=90.0, share=0.9)]
    assert not leka.improves_whole(two, 55.0, rows_ab)  # all kernels: 101 us against 100
    assert leka.improves_whole(two, 55.0, rows_ab, same=frozenset({"b"}))  # the changed one: 8 against 10
    assert not leka.improves_whole(two, 55.0, rows_ab, same=frozenset({"a", "b"}))  # nothing changed


def test_a_dropped_graph_change_is_judged_again_on_the_tuned_kernels(monkeypatch):
    """_graph_retry with a scripted judge: a correct graph change the graph layer dropped (an epilogue
    rewrite: the same kernels, one renamed) is judged again with the kept decisions carried to the changed
    graph's kernels by call order; kept when its changed kernels are faster (`improves_whole`, the
    unchanged kernel left out of the totals), the proposer moved to that graph with its tried points
    carried; not kept when not faster; a change that calls other kernels is not judged again. The graph
    layer hands over only the correct changes it dropped."""
    from edgekernelbench.agents import leka
    from edgekernelbench.agents.proposers import BuiltinProposer
    from edgekernelbench.records import Result, kernel_times
    from edgekernelbench.search.graph import graph_key
    from edgekernelbench.search.kernels import KernelInfo

    rint, split = [{"name": "QuantizeRint", "args": {}}], [{"name": "FuseTIR", "args": {}}]
    graphs = {
        "": (KernelInfo("conv", "w_conv", "conv2d", None), KernelInfo("quantize", "w_q", "injective", None)),
        graph_key(rint): (
            KernelInfo("conv", "w_conv", "conv2d", None),
            KernelInfo("quantize_rint", "w_r", "injective", None),
        ),
        graph_key(split): (KernelInfo("a", "x", "conv2d", None),),
    }
    monkeypatch.setattr(leka, "kernels", lambda pid, graph="": graphs[graph])
    monkeypatch.setattr(leka, "same_graph", lambda pid, a, b: False)  # the kernels above are scripted

    class Ep:
        problem, method = get_problem(TINY), "leka"
        cfg = type("Cfg", (), {"reuse": False})

        def __init__(self, verdicts):
            self.verdicts, self.judged, self.steps = list(verdicts), [], []

        def judge(self, spec, **kw):
            self.judged.append(spec)
            correct, s, us = self.verdicts.pop(0)
            res = Result(
                problem=TINY, sample=4, backend="host-cpu", correct=correct, speedups={"tvm-default": s}
            )
            res.speedup_ci = {"tvm-default": [s * 0.95, s * 1.05]}
            res.kernels = kernel_times(
                [{"kernel": k, "median": u * 1e-6, "share": 0.5} for k, u in us.items()]
            )
            return res

        def record(self, **kw):
            self.steps.append(kw)

    # the graph layer: a wrong change and a correct, not faster one; only the correct one is handed over
    class Graphs:
        graph = ""

        def graphs(self):
            return [("split", split), ("rint", rint)]

        def start(self, name):
            return {"loop": [["start", name]]}

    ep, rejected = Ep([(False, 0.0, {}), (True, 10.0, {"conv": 5.0, "quantize_rint": 5.0})]), []
    rows = [ProfileRow(kernel="conv", us=5.0, share=0.5), ProfileRow(kernel="quantize", us=5.0, share=0.5)]
    assert (
        leka._graph_layer(
            ep, None, Graphs(), "t", 10.0, rows, {"conv": "w_conv", "quantize": "w_q"}, rejected
        )
        is None
    )
    assert rejected == [("rint", rint)]

    tuned = {"conv": {"loop": [["tile", "conv"]]}, "quantize": {"loop": [["vectorize", "quantize"]]}}
    ks = {k.name: k for k in graphs[""]}
    workloads = {k.name: k.workload for k in graphs[""]}

    class Proposer:
        graph = ""

        def __init__(self):
            self.carried = []

        def carry(self, old, new, names):
            self.carried.append((old, new, names))

    for faster in (True, False):
        prop, whole = Proposer(), leka.Whole()
        # the unchanged conv measured 20% slower (noise), the rewritten quantize 40% faster
        ep = Ep([(True, 10.1, {"conv": 6.0, "quantize_rint": 3.0 if faster else 5.0})])
        todo = [("split", split), ("rint", rint)]
        out = leka._graph_retry(ep, prop, ks, dict(tuned), {"conv"}, workloads, whole, 10.0, rows, todo)
        assert len(ep.judged) == 1 and todo == []  # "split" calls other kernels: not judged again
        spec = ep.judged[0]
        assert spec.decisions.graph["passes"] == rint
        assert spec.decisions.loop == {
            "conv": [["tile", "conv"]],
            "quantize_rint": [["vectorize", "quantize"]],
        }
        ks2, state2, reused2, workloads2, best2, rows2 = out
        if faster:
            assert list(ks2) == ["conv", "quantize_rint"] and reused2 == {"conv"}
            assert state2 == {"conv": tuned["conv"], "quantize_rint": tuned["quantize"]}
            assert workloads2 == {"conv": "w_conv", "quantize_rint": "w_r"} and whole.passes == rint
            assert best2 == 10.1 and prop.graph == graph_key(rint)
            assert prop.carried == [("", graph_key(rint), {"conv": "conv", "quantize": "quantize_rint"})]
            assert ep.steps[-1]["kind"] == "accept" and ep.steps[-1]["proposal"] == "rint"
        else:
            assert (ks2, state2, workloads2, best2, rows2) == (ks, tuned, workloads, 10.0, rows)
            assert whole.passes == [] and prop.graph == "" and prop.carried == []

    # the builtin proposer: the points tried on a kernel count as tried on its counterpart
    builtin = BuiltinProposer.__new__(BuiltinProposer)
    builtin.tried = {
        ("", "quantize", "loop"): {"p1"},
        ("", "conv", "loop"): {"p2"},
        ("g", "quantize", "loop"): {"x"},
    }
    builtin.carry("", "r", {"quantize": "quantize_rint", "conv": "conv"})
    assert builtin.tried[("r", "quantize_rint", "loop")] == {"p1"} and builtin.tried[
        ("r", "conv", "loop")
    ] == {"p2"}
    assert ("r", "quantize", "loop") not in builtin.tried


def test_a_dropped_graph_change_that_calls_other_kernels_is_judged_at_their_first_points(monkeypatch):
    """_graph_retry, scripted judge: a dropped change whose graph calls other kernels (channels last: a
    transpose before and after the convolution) is judged again with its kernels at the proposer's first
    points in that graph (the cost model's cheapest point; here scripted), a kernel with a tuned kernel's
    workload keeping the tuned decisions; kept when faster (the proposer moved to the new graph), dropped
    when not (the proposer left on the old one). A proposer with no first points (the scripted ones of
    the test above) judges no such change."""
    from edgekernelbench.agents import leka
    from edgekernelbench.search.graph import graph_key
    from edgekernelbench.search.kernels import KernelInfo

    nhwc = [{"name": "ConvertLayout", "args": {}}]
    graphs = {
        "": (KernelInfo("conv", "w_nchw", "conv2d", None), KernelInfo("relu", "w_relu", "injective", None)),
        graph_key(nhwc): (
            KernelInfo("transpose", "w_t", "injective", None),
            KernelInfo("conv_nhwc", "w_nhwc", "conv2d", None),
            KernelInfo("relu_1", "w_relu", "injective", None),
            KernelInfo("transpose1", "w_t1", "injective", None),
        ),
    }
    monkeypatch.setattr(leka, "kernels", lambda pid, graph="": graphs[graph])
    monkeypatch.setattr(leka, "same_graph", lambda pid, a, b: False)

    def Ep(s):
        return ScriptedEp(lambda spec: s)

    class Proposer:
        graph = ""

        def __init__(self):
            self.asked = []

        def first_point(self, name):
            self.asked.append((self.graph, name))
            return {"loop": [["first", name]]} if name != "transpose1" else None

    tuned = {"conv": {"loop": [["tile", "conv"]]}, "relu": {"loop": [["vectorize", "relu"]]}}
    ks = {k.name: k for k in graphs[""]}
    workloads = {k.name: k.workload for k in graphs[""]}
    rows = [ProfileRow(kernel="conv", us=9.0, share=0.9), ProfileRow(kernel="relu", us=1.0, share=0.1)]
    for s in (20.0, 9.0):  # the best so far: 10x over tvm-default
        prop, whole, ep = Proposer(), leka.Whole(), Ep(s)
        out = leka._graph_retry(
            ep, prop, ks, dict(tuned), set(), workloads, whole, 10.0, rows, [("channels last", nhwc)]
        )
        ((spec, kw),) = ep.judged
        assert "first points" in kw["label"] and spec.decisions.graph["passes"] == nhwc
        assert spec.decisions.loop == {
            "transpose": [["first", "transpose"]],
            "conv_nhwc": [["first", "conv_nhwc"]],
            "relu_1": [["vectorize", "relu"]],  # relu's workload: its tuned decisions
        }
        # asked in the new graph, and only for the kernels no tuned kernel stands for
        assert prop.asked == [(graph_key(nhwc), n) for n in ("transpose", "conv_nhwc", "transpose1")]
        ks2, state2, _, workloads2, best2, _ = out
        if s > 10.0:
            assert list(ks2) == [k.name for k in graphs[graph_key(nhwc)]] and best2 == 20.0
            assert whole.passes == nhwc and prop.graph == graph_key(nhwc)
            assert state2 == {n: {"loop": t} for n, t in spec.decisions.loop.items()}
        else:
            assert (ks2, best2, whole.passes, prop.graph) == (ks, 10.0, [], "")

    class NoFirst:
        graph = ""

    ep = Ep(20.0)
    leka._graph_retry(
        ep, NoFirst(), ks, dict(tuned), set(), workloads, leka.Whole(), 10.0, rows, [("cl", nhwc)]
    )
    assert ep.judged == []


def test_a_dropped_graph_change_is_judged_again_with_the_dropped_target_decisions(monkeypatch):
    """_graph_retry, scripted judge, with a target decision the target layer dropped (fast math): a graph
    change not kept alone is judged once more with it, and both are kept when that improves (the target
    decision leaves the dropped list); a change kept alone has the target decision judged again on top
    (kept when it improves, left dropped when not); a change wrong alone is not judged with it; without
    dropped target decisions a change is judged once."""
    from edgekernelbench.agents import leka
    from edgekernelbench.search.kernels import KernelInfo

    nhwc, fast = [{"name": "ConvertLayout", "args": {}}], {"fast_math": True}
    graphs = {
        "": (KernelInfo("conv", "w_nchw", "conv2d", None),),
        leka.graph_key(nhwc): (
            KernelInfo("transpose", "w_t", "injective", None),
            KernelInfo("conv_nhwc", "w_nhwc", "conv2d", None),
        ),
    }
    monkeypatch.setattr(leka, "kernels", lambda pid, graph="": graphs[graph])
    monkeypatch.setattr(leka, "same_graph", lambda pid, a, b: False)

    def key(spec):  # (graph changed, fast math on)
        return bool(spec.decisions.graph), bool(spec.decisions.target_attrs)

    def Ep(speedups):
        ep = ScriptedEp(lambda spec: speedups[key(spec)])
        ep.calls = lambda: [(key(spec), kw["layer"], kw["label"]) for spec, kw in ep.judged]
        return ep

    class Proposer:
        graph = ""

        def first_point(self, name):
            return {"loop": [["first", name]]}

    ks = {k.name: k for k in graphs[""]}
    tuned, workloads = {"conv": {"loop": [["tile", "conv"]]}}, {"conv": "w_nchw"}
    label = "target: fast math"

    def retry(speedups):
        ep, whole, targets = Ep(speedups), leka.Whole(), [(label, fast)]
        out = leka._graph_retry(
            ep, Proposer(), ks, dict(tuned), set(), workloads, whole, 10.0, [], [("nhwc", nhwc)], targets
        )
        return ep, whole, targets, out[4]

    # channels last alone within the noise (10.1x against 10.0x), with fast math 26x: both kept
    ep, whole, targets, best = retry({(True, False): 10.1, (True, True): 26.0})
    assert [j[0] for j in ep.calls()] == [(True, False), (True, True)] and label in ep.calls()[1][2]
    assert whole.passes == nhwc and whole.target_attrs == fast and targets == [] and best == 26.0
    assert [(s["kind"], s["layer"]) for s in ep.steps] == [("accept", "graph"), ("accept", "target")]
    # neither: nothing kept, fast math still dropped
    ep, whole, targets, best = retry({(True, False): 10.1, (True, True): 10.1})
    assert len(ep.judged) == 2 and whole == leka.Whole() and targets == [(label, fast)] and best == 10.0
    # channels last kept alone (20x): fast math judged again on top of it, kept at 40x
    ep, whole, targets, best = retry({(True, False): 20.0, (True, True): 40.0})
    assert [(j[0], j[1]) for j in ep.calls()] == [((True, False), "graph"), ((True, True), "target")]
    assert whole.passes == nhwc and whole.target_attrs == fast and targets == [] and best == 40.0
    # ... and left dropped when it does not pay there either
    ep, whole, targets, best = retry({(True, False): 20.0, (True, True): 20.0})
    assert whole.passes == nhwc and whole.target_attrs == {} and targets == [(label, fast)] and best == 20.0
    # wrong alone: not judged with fast math
    ep, whole, targets, best = retry({(True, False): None, (True, True): 26.0})
    assert len(ep.judged) == 1 and whole == leka.Whole() and targets == [(label, fast)]
    # no dropped target decision: judged once
    ep = Ep({(True, False): 10.1})
    leka._graph_retry(
        ep, Proposer(), ks, dict(tuned), set(), workloads, leka.Whole(), 10.0, [], [("n", nhwc)]
    )
    assert len(ep.judged) == 1


def test_the_builtin_proposers_first_point_is_the_models_cheapest_and_counts_as_tried():
    """BuiltinProposer.first_point: the cost model's cheapest point of a kernel's space that builds, every
    layer filled; counted as tried, so the loop layer's first proposal afterwards is another point."""
    from edgekernelbench.agents.proposers import BuiltinProposer, LayerRequest
    from edgekernelbench.search.kernels import kernels

    ep = type("Ep", (), {"problem": get_problem(MATMUL)})()
    ep.cfg = type("Cfg", (), {"backend": get_profile("host-cpu", 1), "threads": 1})()
    prop = BuiltinProposer(ep)
    (k,) = [k for k in kernels(MATMUL) if k.op_class != "injective"]
    cheapest = next(prop.space(k.name).alternatives("loop", {}, set()))
    first = prop.first_point(k.name)
    assert first == cheapest.layers and {"loop", "target"} <= set(first)
    nxt = prop.propose(LayerRequest(k, "loop", {}))
    assert nxt is not None and nxt.layers["loop"] != first["loop"]


@pytest.mark.parametrize("bits", [256, 512])
def test_the_builtin_proposers_points_fit_the_machines_vectors(bits):
    """The first point and every loop-layer point the builtin proposer offers for a kernel use at most the
    machine's float32 lanes (an AVX2 machine: 8), and the widest point it offers uses all of them."""
    import dataclasses
    import re

    from edgekernelbench.agents.proposers import BuiltinProposer
    from edgekernelbench.search.kernels import kernels

    ep = type("Ep", (), {"problem": get_problem(MATMUL)})()
    profile = dataclasses.replace(get_profile("host-avx2", 1), vector_bits=bits)
    ep.cfg = type("Cfg", (), {"backend": profile, "threads": 1})()
    prop = BuiltinProposer(ep)
    (k,) = [k for k in kernels(MATMUL) if k.op_class != "injective"]
    labels = [cfg.label for _cost, cfg in prop.space(k.name)._rank()]  # every point, ranked; none built
    lanes = [int(m.group(1)) for lb in labels if (m := re.search(r"/(\d+) lanes", lb))]
    assert lanes and max(lanes) == bits // 32
    first = prop.first_point(k.name)
    assert first and {"loop", "target"} <= set(first)


def test_the_builtin_proposers_start_counts_as_tried():
    """BuiltinProposer.start: the rules' schedule, judged with the start, counts as tried, so the loop layer's
    proposals never offer it again (before, once another loop layer was kept, the start's came back at its
    place in the cost model's order)."""
    import json

    from edgekernelbench.agents.proposers import BuiltinProposer, LayerRequest
    from edgekernelbench.search.kernels import kernels

    ep = type("Ep", (), {"problem": get_problem(MATMUL)})()
    ep.cfg = type("Cfg", (), {"backend": get_profile("host-cpu", 1), "threads": 1})()
    prop = BuiltinProposer(ep)
    (k,) = [k for k in kernels(MATMUL) if k.op_class != "injective"]
    start = prop.start(k.name)
    key = json.dumps(start["loop"], sort_keys=True)
    assert key in prop.tried[(prop.graph, k.name, "loop")]
    space = prop.space(k.name)
    assert space.point_of(start) is not None  # a point of the space: without the mark it would be offered
    offered = []
    for _ in range(3):
        p = prop.propose(LayerRequest(k, "loop", {"loop": offered[-1] if offered else None}))
        assert p is not None
        offered.append(p.layers["loop"])
    assert start["loop"] not in offered


def _run_leka_scripted(monkeypatch, graph_retry, rejected: list, layers: list | None = None):
    """run_leka on a one-kernel problem, its layers scripted: the graph layer drops `rejected`; every kernel
    decision is judged and not kept (its kernel and the proposer's graph go into `layers`), until the
    patience (3) stops the search; `graph_retry` stands for leka._graph_retry. Returns the episode."""
    from edgekernelbench.agents import leka
    from edgekernelbench.agents.budget import Budget, Usage
    from edgekernelbench.records import Result
    from edgekernelbench.search.kernels import KernelInfo

    monkeypatch.setattr(leka, "kernels", lambda pid, graph="": (KernelInfo("conv", "w", "conv2d", None),))
    monkeypatch.setattr(leka, "KernelDB", lambda path: type("DB", (), {"close": lambda self: None})())
    monkeypatch.setattr(leka, "_remember", lambda *a: None)
    monkeypatch.setattr(leka, "backend_target_key", lambda backend: "t")
    monkeypatch.setattr(leka, "_kernels_that_matter", lambda rows, ks, peak: list(ks))
    monkeypatch.setattr(
        leka, "_graph_layer", lambda ep, db, p, t, best, rows, base, out: out.extend(rejected)
    )

    def layer(ep, proposer, kernel, layer, state, best, rows, *a):
        ep.usage.charge_eval()
        ep.usage.judged(False)
        if layers is not None:
            layers.append((kernel.name, proposer.graph))
        return best, rows

    monkeypatch.setattr(leka, "_layer", layer)
    monkeypatch.setattr(leka, "_graph_retry", graph_retry)

    class Ep:
        problem, method = get_problem(TINY), "leka"
        cfg = type(
            "Cfg", (), {"reuse": False, "patience": 3, "backend": "host-cpu", "kernel_db": None, "peak": None}
        )

        def __init__(self):
            self.usage, self.steps = Usage(Budget(evals=32)), []

        def judge(self, spec, **kw):
            self.usage.charge_eval()
            return Result(
                problem=TINY, sample=4, backend="host-cpu", correct=True, speedups={"tvm-default": 2.0}
            )

        def record(self, **kw):
            self.steps.append(kw)

    class Proposer:
        graph = ""

        def graphs(self):
            return []

        def start(self, name):
            return None

    ep = Ep()
    leka.run_leka(ep, Proposer())
    return ep


def test_when_the_patience_ends_the_first_pass_the_dropped_graph_changes_are_judged_first(monkeypatch):
    """run_leka, its layers scripted: the patience stops the search in the first pass, before the graph
    changes the graph layer dropped were judged again (here as the first pass ends: the retry's own charge
    raises); they are judged then (the patience's count reset for them, the evaluation budget as it is),
    and, none kept, the search stops on the patience."""
    rint = [{"name": "QuantizeRint", "args": {}}]
    retried = []

    def graph_retry(ep, proposer, ks, state, reused, workloads, whole, best, rows, rejected, targets=None):
        retried.append((ep.usage.since_improved, list(rejected)))
        ep.usage.charge_eval()  # the judgment of the change: within the evaluation budget
        rejected.clear()
        return ks, state, reused, workloads, best, rows

    ep = _run_leka_scripted(monkeypatch, graph_retry, [("rint", rint)])
    # at the end of the first pass, the patience used up (3 judgments not kept): its charge stops the search;
    # then the change is judged, the patience's count reset for it
    assert retried == [(3, [("rint", rint)]), (0, [("rint", rint)])]
    assert ep.usage.stopped == "patience" and ep.usage.evals == 1 + 3 + 1  # start, 3 decisions, the change
    assert ep.steps[-1]["kind"] == "stop" and "patience" in ep.steps[-1]["why"]


def test_a_graph_change_kept_after_the_patience_resumes_the_search(monkeypatch):
    """As above, but the dropped change judged when the patience ends the first pass is kept: the search goes
    on over the new graph's kernels (a "resume" step) until the patience ends it again."""
    from edgekernelbench.search.kernels import KernelInfo

    nhwc = [{"name": "ConvertLayout", "args": {}}]

    def graph_retry(ep, proposer, ks, state, reused, workloads, whole, best, rows, rejected, targets=None):
        ep.usage.charge_eval()
        ep.usage.judged(True)
        rejected.clear()
        whole.passes, proposer.graph = nhwc, "cl"
        new = {"conv_nhwc": KernelInfo("conv_nhwc", "w2", "conv2d", None)}
        return new, {"conv_nhwc": {}}, set(), {"conv_nhwc": "w2"}, best * 2, rows

    layers = []
    ep = _run_leka_scripted(monkeypatch, graph_retry, [("cl", nhwc)], layers)
    kinds = [s["kind"] for s in ep.steps]
    assert "resume" in kinds and kinds[-1] == "stop" and "patience" in ep.steps[-1]["why"]
    # 3 decisions on the first graph's kernel, the change, then the new graph's kernel until the patience
    assert layers == [("conv", "")] * 3 + [("conv_nhwc", "cl")] * 3
    assert ep.usage.stopped == "patience" and ep.usage.evals == 1 + 3 + 1 + 3


def test_the_target_layer_keeps_fast_math_only_when_correct_and_faster():
    """_target_layer with a scripted judge: the whole-module target decision (LLVM's fast-math flags) is
    judged on top of the kept graph and decisions; kept (into the module-wide decisions every later
    candidate carries) only when correct and faster (`improves_whole`: by MIN_GAIN as a whole, or by its
    kernels' total in the profile with the model within WHOLE_SLACK; the best is never lowered); a correct
    one not kept goes into the dropped list. The builtin proposer offers it on an LLVM target only."""
    from edgekernelbench.agents import leka
    from edgekernelbench.backends.registry import as_profile
    from edgekernelbench.records import Result, kernel_times
    from edgekernelbench.search.graph import FAST_MATH_FLAGS, NHWC, target_alternatives

    class Proposer:
        def target_options(self):
            return target_alternatives("host-cpu")

    class Ep:
        problem, method = get_problem(TINY), "leka"

        def __init__(self, verdict):
            self.verdict, self.judged, self.steps = verdict, [], []

        def judge(self, spec, **kw):
            self.judged.append(spec)
            correct, s, us = self.verdict
            r = Result(
                problem=TINY, sample=4, backend="host-cpu", correct=correct, speedups={"tvm-default": s}
            )
            r.kernels = kernel_times([{"kernel": "k", "median": us * 1e-6, "share": 1.0}])
            return r

        def record(self, **kw):
            self.steps.append(kw)

    trace = [[["GetSBlock", [], [], []]], []]
    best_rows = [ProfileRow(kernel="k", us=10.0, share=1.0)]
    cases = (
        ((False, 0.0, 5.0), None),  # wrong
        ((True, 1.01, 10.0), None),  # within noise, kernels no faster
        ((True, 1.5, 10.0), 1.5),  # faster as a whole
        ((True, 1.01, 8.0), 1.01),  # the kernels' total 20% lower, the model within noise: kept
        ((True, 0.8, 8.0), None),  # ... but not with the model 25% slower
    )
    for verdict, kept in cases:
        ep, whole, dropped = Ep(verdict), leka.Whole(list(NHWC)), []
        options = Proposer().target_options()
        best, rows = leka._target_layer(
            ep, {"k": {"loop": trace}}, {"k": "w"}, whole, 1.0, best_rows, options, dropped
        )
        # a correct decision not kept is handed over to be judged again with the dropped graph changes
        assert dropped == ([] if kept or not verdict[0] else options)
        (spec,) = ep.judged
        assert spec.decisions.target_attrs == FAST_MATH_FLAGS and spec.decisions.graph["passes"] == NHWC
        assert spec.decisions.loop == {"k": trace}
        assert whole.target_attrs == (FAST_MATH_FLAGS if kept else {}) and best == (kept or 1.0)
        assert rows[0].us == (verdict[2] if kept else 10.0)
        assert [s["kind"] for s in ep.steps] == (["accept"] if kept else [])
        later = leka.build_spec(ep.problem, {"k": {"loop": trace}}, "leka", whole=whole)
        assert later.decisions.target_attrs == whole.target_attrs
    assert target_alternatives("host-cpu") and not target_alternatives(as_profile("jetson-orin-nano"))
    # a quantized model rounds to a grid: fast math's reciprocals move ties one int8 step (never offered)
    assert target_alternatives("host-cpu", get_problem("L3/dscnn_kws"))
    assert not target_alternatives("host-cpu", get_problem("L3/dscnn_kws_int8"))


def test_starting_points_slower_than_tvm_default_are_dropped(monkeypatch):
    """_drop_slower_starts with a scripted judge: the start's profile shows kernel "b" 1.5x slower than
    tvm-default's version of it and "a" faster; the start without "b" is judged (b's decisions gone, a's
    kept) and kept when it improves; not kept when it does not; nothing is judged when no starting point is
    slower, or when the slower kernel's decisions came from the kernel database (not a starting point)."""
    from edgekernelbench.agents import leka
    from edgekernelbench.records import KernelTime, Result

    trace = [[["GetSBlock", [], [], []]], []]
    start = Result(problem=TINY, sample=4, backend="host-cpu", correct=True, speedups={"tvm-default": 1.2})
    start.kernels = [KernelTime("a", 1e-6), KernelTime("b", 3e-6)]
    start.baseline_kernels["tvm-default"] = [KernelTime("a", 2e-6), KernelTime("b", 2e-6)]

    class Ep:
        problem, method = get_problem(TINY), "leka"

        def __init__(self, s):
            self.s, self.judged, self.steps = s, [], []

        def judge(self, spec, **kw):
            self.judged.append(spec)
            return Result(
                problem=TINY, sample=4, backend="host-cpu", correct=True, speedups={"tvm-default": self.s}
            )

        def record(self, **kw):
            self.steps.append(kw)

    state = {"a": {"loop": trace}, "b": {"loop": trace}}
    ep = Ep(1.5)
    out = leka._drop_slower_starts(ep, state, ["a", "b"], start, 1.2, [], {})
    assert out[0] == {"a": {"loop": trace}} and out[1] == 1.5
    (spec,) = ep.judged
    assert spec.decisions.scheduled_funcs() == ["a"] and ep.steps[-1]["layer"] == "start"
    ep = Ep(1.1)  # not better: the start stays
    assert leka._drop_slower_starts(ep, state, ["a", "b"], start, 1.2, [], {})[:2] == (state, 1.2)
    assert len(ep.judged) == 1 and not ep.steps
    for started in (["a"], []):  # b not a starting point (reused), or nothing started
        ep = Ep(1.5)
        assert leka._drop_slower_starts(ep, state, started, start, 1.2, [], {})[:2] == (state, 1.2)
        assert not ep.judged


def test_a_kernel_decision_is_kept_by_that_kernels_own_time(monkeypatch):
    """_layer with a scripted judge: each candidate is profiled for its kernel only, and kept when correct,
    that kernel's time below the best's by KERNEL_GAIN and the whole model's speedup within WHOLE_SLACK of
    the best's -- even when the model's time, noisier from judge to judge, came out a little lower than the
    best's (then the best's speedup is the fresh one and the kernel's row takes its new time); not kept
    when the kernel is not faster however fast the whole model looked, when the model is slower by more
    than the slack, or when wrong. With no profile row of the kernel, the whole-model rule decides. The
    whole model is timed without the rounds that narrow its interval (`guard_timing`); a keep never lowers
    the whole model's reference, and counts as progress for the patience only when the kernels' new times
    since the last progress make the model MIN_GAIN faster (`model_gain`, `Progress`)."""
    from dataclasses import replace

    from edgekernelbench.agents import leka
    from edgekernelbench.agents.proposers import Proposal
    from edgekernelbench.harness.api import TimingConfig
    from edgekernelbench.records import Result, kernel_times

    trace = [[["GetSBlock", [], [], []]], []]
    rows = [
        ProfileRow(kernel="k", share=0.5, us=4.0, gflops=None),
        ProfileRow(kernel="j", share=0.5, us=4.0),
    ]

    class Proposer:
        feedback: list = []

        def propose(self, req):
            Proposer.feedback = list(req.feedback)
            return Proposal("p", layers={"loop": trace})

    class Ep:
        problem, method = get_problem(TINY), "leka"
        cfg = type("Cfg", (), {"timing": TimingConfig.search()})

        def __init__(self, verdict):
            self.verdict, self.profiled, self.steps, self.accepted, self.progress = verdict, [], [], [], []

        def judge(self, spec, **kw):
            # the whole model timed only as a guard: the search's rounds, none added to narrow its interval
            assert kw["timing"] == replace(TimingConfig.search(), max_rounds=0)
            correct, s, us = self.verdict
            res = Result(problem=TINY, sample=4, backend="host-cpu", correct=correct)
            if correct:
                res.speedups, res.speedup_ci = {"tvm-default": s}, {"tvm-default": [s * 0.99, s * 1.01]}
                res.kernels = kernel_times([{"kernel": "k", "median": us * 1e-6, "share": 1.0}])
            self.profiled.append(kw["profile"])
            self.accepted.append(kw["accept"](res))
            self.progress.append(kw["progress"](res))
            return res

        def record(self, **kw):
            self.steps.append(kw)

    kernel = type("K", (), {"name": "k"})
    for verdict, kept in (
        ((True, 9.6, 3.0), True),  # the kernel 25% faster, the model measured 4% below the best
        ((True, 20.0, 3.95), False),  # the model "2x faster", the kernel not faster by KERNEL_GAIN
        ((True, 8.0, 2.0), False),  # the kernel 2x faster, the model 20% slower
        ((False, 0.0, 0.0), False),
    ):
        ep = Ep(verdict)
        best, out = leka._layer(ep, Proposer(), kernel, "loop", {}, 10.0, rows, {}, leka.Whole(), {})
        assert ep.profiled[0] == ["k"] and ep.accepted[0] == kept
        assert len(ep.profiled) == (1 if kept else leka.ATTEMPTS)
        if kept:  # the whole model's reference stays the best's 10.0 (a keep never lowers it)
            assert best == 10.0 and ep.steps[-1]["kind"] == "accept" and ep.progress == [True]
            assert {r.kernel: r.us for r in out} == {"k": 3.0, "j": 4.0}
            assert out[0].kernel == "j" and abs(out[0].share - 4 / 7) < 1e-9
        else:
            assert (best, out) == (10.0, rows) and not ep.steps
        if verdict[1] == 20.0:  # the feedback names the kernel's times
            assert "k took 3.95 us per run against 4.00 us in the best so far" in Proposer.feedback[-1]
    # kept, but not progress for the patience: 10% off a kernel that takes 1 of 21 us moves the model 0.5%
    small = [ProfileRow(kernel="j", share=20 / 21, us=20.0), ProfileRow(kernel="k", share=1 / 21, us=1.0)]
    ep = Ep((True, 10.0, 0.9))
    assert leka._layer(ep, Proposer(), kernel, "loop", {}, 10.0, small, {}, leka.Whole(), {})[0] == 10.0
    assert ep.accepted == [True] and ep.progress == [False]
    # ... while such keeps add up: five of them (0.48% each) move the model by MIN_GAIN, the fifth is
    # progress, and the count starts again
    tally, ep = leka.Progress(), Ep((True, 10.0, 0.9))
    for _ in range(6):
        leka._layer(ep, Proposer(), kernel, "loop", {}, 10.0, small, {}, leka.Whole(), {}, tally)
    assert ep.progress == [False] * 4 + [True, False]
    ep = Ep((True, 10.1, 1.0))  # no row for the kernel: held to the whole model's MIN_GAIN
    assert leka._layer(ep, Proposer(), kernel, "loop", {}, 10.0, rows[1:], {}, leka.Whole(), {})[0] == 10.0
    ep = Ep((True, 11.0, 1.0))
    assert leka._layer(ep, Proposer(), kernel, "loop", {}, 10.0, rows[1:], {}, leka.Whole(), {})[0] == 11.0
    assert ep.progress == [True]  # kept by the whole-model rule: progress


def test_direct_and_flat_with_a_scripted_model(tmp_path):
    run = tmp_path / "run"
    with FakeLLM({TINY: [NO_CODE, TINY_OK]}) as fake:
        cfg = config(tmp_path, model=f"openai-compatible:{fake.openai_url}:local-model", budget=2)
        run_agents(run, [get_problem(TINY)], ["direct", "flat"], cfg)
        bodies = [c["body"] for c in fake.calls]
    _, runs, results = steps(run, "flat")
    assert results[(TINY, 0)].reason == "parse_error"  # direct: the first sample
    assert results[(TINY, 1)].correct  # direct@B: the best of the two
    assert results[(TINY, 2)].correct  # flat: the second turn
    # the flat conversation's second call carries the first turn and the judge's feedback on it
    flat_second = bodies[3]["messages"]
    assert [m["role"] for m in flat_second] == ["system", "user", "assistant", "user"]
    assert "The judge's verdict on your last schedule" in flat_second[-1]["content"]
    for m in ("direct", "flat"):
        u = runs[(TINY, m)]["usage"]
        assert u["calls"] <= 2 and u["evals"] <= 2


AGENT_SCRIPT = """
import os, subprocess, sys, pathlib
ws = pathlib.Path.cwd()
assert (ws / "TASK.md").read_text().startswith("# Task") and (ws / "reference.py").exists()
(ws / "candidate.py").write_text("def schedule(name, sch)\\n    pass\\n")  # a syntax error
print(subprocess.run([sys.executable, "check"], capture_output=True, text=True).stdout)
(ws / "candidate.py").write_text("def schedule(name, sch):\\n    pass\\n")
print(subprocess.run([sys.executable, "check"], capture_output=True, text=True).stdout)
print(subprocess.run([sys.executable, "check"], capture_output=True, text=True).stdout)  # past the budget
try:
    open(sys.argv[1], "w").write("escaped")
except OSError as e:
    print("write outside refused:", e)
sys.exit(int(sys.argv[2]))
"""


def test_external_agent_in_its_workspace(tmp_path):
    script = tmp_path / "agent.py"
    script.write_text(AGENT_SCRIPT)
    escape = tmp_path / "escaped.txt"
    run = tmp_path / "run"
    cfg = config(tmp_path, budget=2, agent_cmd=f"{sys.executable} {script} {escape} 0")
    run_agents(run, [get_problem(TINY)], ["cli"], cfg)
    trajectory, runs, results = steps(run, "cli")
    judged = [s for s in trajectory if s.get("kind") == "judge"]
    assert [s["verdict"]["reason"] for s in judged] == ["parse_error", None]
    assert any(s.get("kind") == "check-refused" for s in trajectory)
    agent = next(s for s in trajectory if s.get("kind") == "agent")
    assert (
        agent["status"] == "exited"
        and "refused" in agent["log_tail"]
        and "write outside refused" in agent["log_tail"]
    )
    assert not escape.exists()
    assert results[(TINY, 3)].correct and runs[(TINY, "cli")]["usage"]["calls"] is None
    assert runs[(TINY, "cli")]["usage"]["evals"] == 2


def test_a_crashing_or_hanging_agent_is_recorded_and_the_run_goes_on(tmp_path):
    crash = tmp_path / "crash.py"
    crash.write_text(
        "import pathlib, sys\npathlib.Path('candidate.py').write_text('def schedule(name, sch):\\n    pass\\n')\n"
        "sys.exit(3)\n"
    )
    run = tmp_path / "run"
    run_agents(run, [get_problem(TINY)], ["cli"], config(tmp_path, agent_cmd=f"{sys.executable} {crash}"))
    trajectory, _, results = steps(run, "cli")
    agent = next(s for s in trajectory if s.get("kind") == "agent")
    assert agent["status"] == "crashed" and agent["exit_code"] == 3
    assert results[(TINY, 3)].correct  # its candidate was judged all the same
    hang_run = tmp_path / "hang"
    problems = [get_problem(TINY), get_problem(MATMUL)]
    run_agents(hang_run, problems, ["cli"], config(tmp_path, agent_cmd="sleep 600", wall_s=3))
    with RunStore(hang_run) as s:
        runs = s.agent_runs()
        statuses = [st.get("status") for st in s.agent_steps() if st.get("kind") == "agent"]
    assert statuses == ["timeout", "timeout"] and set(runs) == {(TINY, "cli"), (MATMUL, "cli")}


def test_offline_agents_through_the_cli_and_eval_reproduces_them(tmp_path):
    run = tmp_path / "run"
    env_db = tmp_path / "kernels.db"
    cmd = [
        sys.executable,
        "-m",
        "edgekernelbench.cli",
        "agent",
        "--problem",
        TINY,
        "--methods",
        "direct,flat,leka",
        "--budget",
        "2",
        "--quick",
        "--check-trials",
        "2",
        "--out",
        str(run),
        "--kernel-db",
        str(env_db),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "candidates made by: agent:leka" in p.stdout and "proposer builtin (offline)" in p.stdout
    assert "agents: one budget per problem and method" in p.stdout
    curve, summary = tmp_path / "anytime.csv", tmp_path / "summary.json"
    rep = [sys.executable, "-m", "edgekernelbench.cli", "report", str(run), "--json", str(summary)]
    p = subprocess.run([*rep, "--anytime", str(curve)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    methods = {row["method"]: row for row in json.loads(summary.read_text())["agents"]}
    assert set(methods) == {"direct", "direct@B", "flat", "leka"}
    assert all(row["evals"] <= 2 and row["calls"] == 0 for row in methods.values())
    # where LEKA's judgments went, with the machine's lanes recorded by the search
    (search,) = json.loads(summary.read_text())["search"]
    assert search["problem"] == TINY and 1 <= search["judgments"] <= 2 and search["too_wide"] == 0
    assert search["machine_lanes"] >= 4 and "the search's judgments" in p.stdout
    rows = list(csv.DictReader(curve.open()))
    assert {r["method"] for r in rows} == {"direct", "flat", "leka"}
    assert {r["problem"] for r in rows} == {"all", TINY} and max(int(r["evals"]) for r in rows) <= 2
    # the search's judgments time the objective only; each final judgment times every baseline
    trajectory, _, _ = steps(run, "leka")
    judged = [s for s in trajectory if s.get("kind") == "judge" and s["verdict"]["correct"]]
    assert judged and all(set(s["verdict"]["speedups"]) == {"tvm-default"} for s in judged)
    final = next(s for s in trajectory if s.get("kind") == "final")
    assert set(final["verdict"]["speedups"]) == {"tvm-default", "onnxruntime"}
    again = subprocess.run(cmd, capture_output=True, text=True)
    assert "done 0, already done 3" in again.stdout, again.stdout + again.stderr
    with RunStore(run) as s:
        first = {(r.problem, r.sample): r.correct for r in s.results()}
        for rec in s.agent_runs().values():
            assert rec["usage"]["evals"] <= 2 and rec["usage"]["calls"] == 0
        assert s.get_meta("agent_config")["timing"]["rounds"] == 9  # --quick: the search's short protocol
    # `ekb eval` of the same candidate files, in a fresh run directory, gives the same verdicts
    fresh = tmp_path / "fresh"
    shutil.copytree(run / "candidates", fresh / "candidates")
    p = subprocess.run(
        [sys.executable, "-m", "edgekernelbench.cli", "eval", str(fresh), "--no-measure", "--trials", "2"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    with RunStore(fresh) as s:
        assert {(r.problem, r.sample): r.correct for r in s.results()} == first


def test_kernel_db_commands(tmp_path):
    db_path = tmp_path / "k.db"
    with KernelDB(db_path) as db:
        db.put(Entry("abc123", '{"kind":"llvm"}', "f", {"loop": [[], []]}, "L1/x", "leka", speedup=2.0))
        db.put(
            Entry("abc123", '{"kind":"llvm"}', "f", {"loop": [[], []]}, "L1/y", "leka", speedup=3.0)
        )  # same
    ekb = [sys.executable, "-m", "edgekernelbench.cli", "db"]
    out = subprocess.run(
        [*ekb, "list", "--db", str(db_path), "--json"], capture_output=True, text=True, check=True
    )
    (row,) = json.loads(out.stdout)
    assert row["speedup"] == 3.0 and row["problem"] == "L1/y" and row["layers"] == ["loop"]
    shown = json.loads(
        subprocess.run(
            [*ekb, "show", "--db", str(db_path), str(row["id"])], capture_output=True, text=True, check=True
        ).stdout
    )
    assert shown["layers"] == {"loop": [[], []]}
    export = tmp_path / "e.jsonl"
    subprocess.run([*ekb, "export", "--db", str(db_path), str(export)], check=True)
    other = tmp_path / "other.db"
    p = subprocess.run([*ekb, "import", "--db", str(other), str(export)], capture_output=True, text=True)
    assert p.returncode == 0 and "imported 1" in p.stdout
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    p = subprocess.run([*ekb, "import", "--db", str(other), str(bad)], capture_output=True, text=True)
    assert p.returncode != 0 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_method_rows_and_anytime_curves_from_a_store():
    from edgekernelbench.records import Result
    from edgekernelbench.report.agents import anytime_curves, method_rows

    def res(problem, label, correct, speedup):
        speedups = {"tvm-default": speedup} if correct else {}
        return Result(
            problem=problem,
            sample=0,
            backend="host-cpu",
            method=f"agent:{label}",
            compiled=True,
            correct=correct,
            speedups=speedups,
        )

    results = [res("L1/a", "leka", True, 2.0), res("L1/b", "leka", True, 0.5), res("L1/a", "flat", False, 0)]
    runs = {
        ("L1/a", "leka"): {
            "usage": {
                "calls": 0,
                "evals": 3,
                "input_tokens": 0,
                "output_tokens": 0,
                "cost": 0.0,
                "wall_s": 4.0,
                "stopped": "evals",
            }
        },
        ("L1/b", "leka"): {"usage": {"calls": 0, "evals": 1, "cost": 0.0, "wall_s": 1.0, "stopped": ""}},
        ("L1/a", "flat"): {
            "usage": {
                "calls": 2,
                "evals": 2,
                "input_tokens": 10,
                "output_tokens": 5,
                "cost": None,
                "wall_s": 2.0,
                "stopped": "calls",
            }
        },
    }
    steps = [
        {"problem": "L1/a", "method": "leka", "kind": "reuse", "kernels": ["k1", "k2"]},
        {"problem": "L1/a", "method": "leka", "kind": "judge", "evals": 1, "best_speedup": None},
        {"problem": "L1/a", "method": "leka", "kind": "judge", "evals": 3, "best_speedup": 2.0},
        {"problem": "L1/b", "method": "leka", "kind": "judge", "evals": 1, "best_speedup": 0.5},
    ]
    rows = {r.method: r for r in method_rows(results, runs, steps)}
    leka, flat = rows["leka"], rows["flat"]
    assert leka.problems == 2 and leka.correct_at_1 == 1.0 and leka.fast["tvm-default"] == 0.5
    assert leka.fast["onnxruntime"] is None and abs(leka.geomean["tvm-default"] - 1.0) < 1e-9
    assert (leka.evals, leka.wall_s, leka.reused_kernels, leka.stopped) == (4, 5.0, 2, {"evals": 1})
    assert flat.correct_at_1 == 0.0 and flat.cost is None and flat.tokens == 15 and flat.calls == 2
    curve = anytime_curves(steps)["leka"]["curve"]
    assert [pt["with_correct"] for pt in curve] == [1, 1, 2]
    assert [pt["fast_1"] for pt in curve] == [0.0, 0.0, 0.5]
    assert abs(curve[-1]["geomean_best"] - 1.0) < 1e-9


def test_the_agent_subset():
    from edgekernelbench.problems import select

    probs = select(subset="agent")
    assert len(probs) == 23 and {p.id for p in probs} == {p.id for p in select(tag="agent")}
    assert {p.level for p in probs} == {1, 2, 3}
    assert len({p.domain for p in probs}) >= 7
    assert sum(1 for p in probs if p.integer) >= 3 and sum(1 for p in probs if not p.integer) >= 15


def test_kernels_near_the_compute_roof_are_tuned_last():
    """The kernels that matter (MIN_SHARE of the time, a kernel's calls summed) in order of their time above
    the compute roof: a kernel at the peak FLOP/s goes after a smaller one at 40%; a kernel without a FLOP
    count keeps its whole time; without a peak record the order is by time."""
    from edgekernelbench.agents.leka import _kernels_that_matter

    rows = [
        ProfileRow(kernel="conv_at_peak", share=0.30, us=30.0, gflops=118.0),
        ProfileRow(kernel="conv_at_40", share=0.17, us=17.0, gflops=47.0),
        ProfileRow(kernel="dot", share=0.08, us=8.0, gflops=None),
        ProfileRow(kernel="pool", share=0.05, us=5.0, gflops=2.0),
        ProfileRow(kernel="pool", share=0.05, us=5.0, gflops=2.0),
        ProfileRow(kernel="tiny", share=0.01, us=1.0, gflops=1.0),
    ]
    ks = {r.kernel: None for r in rows}
    order = _kernels_that_matter(rows, ks, {"flops": 118e9})
    assert order == ["conv_at_40", "pool", "dot", "conv_at_peak"]  # 10.2, 9.8, 8 and 0 us above the roof
    assert _kernels_that_matter(rows, ks, None) == ["conv_at_peak", "conv_at_40", "pool", "dot"]
