"""MetaSchedule as a method of `ekb agent`: a few measured trials on a tiny matmul, its best record as
layered decisions that replay on the reference, judged once by the real judge; without its cost model's
packages the method stops with one line in the trajectory."""

from __future__ import annotations

import json
import subprocess
import sys

from edgekernelbench.agents.budget import Budget
from edgekernelbench.agents.episode import AgentConfig
from edgekernelbench.agents.run import run_agents
from edgekernelbench.backends.registry import get_profile
from edgekernelbench.ir.spec import SCHEDULE_LAYERS, KernelSpec
from edgekernelbench.problems import get_problem
from edgekernelbench.report.agents import method_rows
from edgekernelbench.search.kernels import kernels
from edgekernelbench.search.metaschedule import problem_dir, split_trials
from edgekernelbench.store import RunStore

MATMUL = "L1/tiny_matmul_128"


def test_split_trials():
    assert split_trials(10, [3e6, 1e6, None]) == [6, 3, 1]  # one each; 7 more: 5.25 / 1.75 / 0
    assert split_trials(2, [1.0, 5.0, 3.0]) == [0, 1, 1]  # fewer trials than kernels: heaviest first
    assert split_trials(7, [0, 0]) == [4, 3]  # no FLOPs anywhere: evenly
    assert split_trials(0, [1.0]) == [0] and split_trials(3, []) == []
    assert all(sum(split_trials(n, [5, 1, 1, 0])) == n for n in range(12))


def test_without_its_cost_model_the_method_stops_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "xgboost", None)  # `import xgboost` raises ImportError
    cfg = AgentConfig(backend=get_profile("host-cpu", 1), budget=Budget(calls=1, evals=2), tune_trials=4)
    run = tmp_path / "run"
    run_agents(run, [get_problem(MATMUL)], ["metaschedule"], cfg)
    with RunStore(run) as s:
        steps, runs, results = s.agent_steps(method="metaschedule"), s.agent_runs(), s.results()
    assert [st["kind"] for st in steps] == ["tune"]
    assert "xgboost" in steps[0]["error"] and "\n" not in steps[0]["error"]
    rec = runs[(MATMUL, "metaschedule")]
    assert rec["usage"]["evals"] == 0 and rec["samples"] == {} and not results
    assert rec["trials"] == 0 and "xgboost" in rec["error"]


def test_metaschedule_through_the_cli(tmp_path):
    run = tmp_path / "run"
    cmd = [
        *(sys.executable, "-m", "edgekernelbench.cli", "agent", "--problem", MATMUL),
        *("--methods", "metaschedule", "--trials", "4", "--check-trials", "2", "--quick"),
        *("--out", str(run), "--kernel-db", str(tmp_path / "kernels.db")),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "metaschedule" in p.stdout
    # MetaSchedule's own database, in the run directory
    db = problem_dir(run, MATMUL)
    assert db == run / "agents" / "metaschedule" / "L1_tiny_matmul_128"
    records = (db / "database_tuning_record.json").read_text().splitlines()
    assert 1 <= len(records) <= 4 and (db / "database_workload.json").is_file()

    with RunStore(run) as s:
        steps = s.agent_steps(method="metaschedule")
        runs = s.agent_runs()
        (res,) = s.results()
    rec = runs[(MATMUL, "metaschedule")]
    # the trajectory: one tuning step, one judgment, then the final candidate's fresh (uncharged) judgment;
    # the budget: one evaluation, no model call
    assert [st["kind"] for st in steps] == ["tune", "judge", "final"]
    tune = steps[0]
    (name,) = [k.name for k in kernels(MATMUL)]
    (row,) = tune["kernels"]
    assert tune["trials"] == 4 and row["kernel"] == name and row["status"] == "tuned", row
    assert 1 <= row["measured"] <= 4 and row["best_us"] > 0 and row["seconds"] > 0
    assert row["same_as_metaschedule"] is True  # the replayed trace is MetaSchedule's compile_tir schedule
    assert rec["usage"]["evals"] == 1 and rec["usage"]["calls"] == 0
    assert rec["trials"] == row["measured"] and rec["trials_given"] == 4
    assert rec["samples"]["metaschedule"]["sample"] == 5
    # the judge's verdict on the candidate
    assert res.correct and res.sample == 5 and res.method == "agent:metaschedule", res.detail
    assert steps[1]["verdict"]["correct"]
    (mrow,) = method_rows([res], runs, steps)  # the report's method comparison
    assert (mrow.method, mrow.problems, mrow.correct_at_1, mrow.evals, mrow.calls) == (
        "metaschedule",
        1,
        1.0,
        1,
        0,
    )

    # the candidate: the kernel's decisions, with its workload key, replay on the reference PrimFunc
    from edgekernelbench.ir.replay import apply_trace, combine_layers, workload_key
    from edgekernelbench.reference import build_reference

    spec = KernelSpec.from_json((run / "candidates" / MATMUL / "sample5.json").read_text())
    assert spec.module is None and spec.decisions.scheduled_funcs() == [name]
    func = build_reference(get_problem(MATMUL)).primfuncs()[name]
    assert spec.decisions.workloads == {name: workload_key(func)}
    layers = dict(spec.decisions.layer_traces(name))
    # the sampled schedule is the loop (and memory) layers; MetaSchedule's postprocessing (its parallel /
    # vectorize / unroll rewrites and the reduction's decomposition) is part of it, as the target layer
    assert "Split" in [inst[0] for inst in layers["loop"][0]]
    assert layers["target"][0][0][0] == "EnterPostproc"
    assert [layer for layer in SCHEDULE_LAYERS if layer in layers] == list(layers)
    trace, where = combine_layers(list(layers.items()))
    sch = apply_trace(func, trace, name, where)
    assert not sch.mod["main"].same_as(func)
    assert json.loads(json.dumps(spec.metadata["metaschedule"]))["trials"] == 4
