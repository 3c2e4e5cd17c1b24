"""KernelSpec: JSON round trip, layered replay, workload keys, errors that name the step."""

import json

import pytest
import tvm_ffi

from edgekernelbench.errors import DecisionError, MalformedCandidate
from edgekernelbench.ir.replay import LayerRecorder, materialize, split_flat_trace, trace_json, workload_key
from edgekernelbench.ir.spec import Decisions, KernelSpec, load_candidate
from edgekernelbench.problems import Problem, get_problem, level1
from edgekernelbench.reference import build_reference

PID = "L1/dwconv3x3_kws"
FUNC = "fused_conv2d_add_relu"


@pytest.fixture(scope="module")
def ref():
    return build_reference(get_problem(PID))


def layered(func):
    rec = LayerRecorder(func)
    s = rec.sch
    with rec.layer("loop"):
        s.compute_inline(s.get_sblock("pad_temp"))
        b = s.get_sblock("group_conv2d_nchw")
        loops = s.get_loops(b)
        _, inner = s.split(loops[3], [None, 5])
        s.parallel(loops[1])
    with rec.layer("memory"):
        s.cache_write(b, 0, "global")
    with rec.layer("target"):
        s.annotate(loops[1], "pragma_auto_unroll_max_step", 16)
    return rec


def test_layers_replay_to_the_same_schedule(ref):
    func = ref.primfuncs()[FUNC]
    rec = layered(func)
    traces = rec.traces()
    assert list(traces) == ["loop", "memory", "target"]
    assert traces["memory"][0][0][0] == "CacheWrite" and traces["target"][0][0][0] == "Annotate"
    spec = KernelSpec(problem=PID, decisions=Decisions(**{k: {FUNC: v} for k, v in traces.items()}))
    again = KernelSpec.from_json(spec.to_json())
    assert again == spec and again.hash() == spec.hash()
    mod = materialize(again, get_problem(PID), ref)
    assert tvm_ffi.structural_equal(mod[FUNC], rec.func().without_attr("global_symbol"))
    assert not tvm_ffi.structural_equal(mod[FUNC], func)


def test_flat_trace_splits_into_monotone_phases(ref):
    rec = layered(ref.primfuncs()[FUNC])
    split = split_flat_trace(trace_json(rec.sch))
    assert [len(v[0]) for v in split.values()] == [len(v[0]) for v in rec.traces().values()]


def test_decision_that_does_not_apply_names_step_and_primfunc(ref):
    traces = layered(ref.primfuncs()[FUNC]).traces()
    loop = traces["loop"]
    bad = json.loads(json.dumps(loop).replace('"Split", ["l4", null, 5]', '"Split", ["l4", null, 7]'))
    bad = json.loads(json.dumps(bad).replace("group_conv2d_nchw", "no_such_block"))
    spec = KernelSpec(problem=PID, decisions=Decisions(loop={FUNC: bad}))
    with pytest.raises(DecisionError) as e:
        materialize(spec, get_problem(PID), ref)
    msg = str(e.value)
    assert FUNC in msg and "loop layer" in msg and "GetSBlock" in msg and "step" in msg


def test_decision_for_missing_primfunc(ref):
    traces = layered(ref.primfuncs()[FUNC]).traces()
    spec = KernelSpec(problem=PID, decisions=Decisions(loop={"not_a_func": traces["loop"]}))
    with pytest.raises(DecisionError, match="not_a_func"):
        materialize(spec, get_problem(PID), ref)


def test_workload_key_is_shared_by_equal_workloads():
    def dw(g):
        x = g.input("x", (1, 64, 25, 5))
        y = g.node(
            "Conv", [x, g.weight((64, 1, 3, 3)), g.bias(64)], group=64, kernel_shape=[3, 3], pads=[1, 1, 1, 1]
        )
        g.output(g.node("Relu", [y]))

    twin = Problem(
        id="L1/twin_dw", level=1, domain="kws", category="depthwise", source="test", graph=dw, seed=7
    )
    a = build_reference(get_problem(PID)).primfuncs()[FUNC]
    b = build_reference(twin).primfuncs()[FUNC]
    assert workload_key(a) == workload_key(b)
    other = build_reference(get_problem("L1/softmax_mobilebert_attn")).primfuncs()
    assert all(workload_key(f) != workload_key(a) for f in other.values())


def test_spec_validation_errors():
    with pytest.raises(MalformedCandidate, match="not valid JSON"):
        KernelSpec.from_json("{nope")
    with pytest.raises(MalformedCandidate, match="problem"):
        KernelSpec.from_dict({"module": "x"})
    with pytest.raises(MalformedCandidate, match="unknown decision layer"):
        KernelSpec.from_dict({"problem": PID, "decisions": {"schedule": {}}})
    with pytest.raises(MalformedCandidate, match="trace"):
        KernelSpec.from_dict({"problem": PID, "decisions": {"loop": {FUNC: ["Split"]}}})
    with pytest.raises(MalformedCandidate, match="needs a 'module' or at least one decision"):
        KernelSpec.from_dict({"problem": PID})


def test_load_candidate_files(tmp_path, ref):
    py = tmp_path / "sample0.py"
    py.write_text(ref.script())
    assert load_candidate(py, PID).module == ref.script()
    js = tmp_path / "sample1.json"
    js.write_text(KernelSpec(problem="L1/other", module="x").to_json())
    with pytest.raises(MalformedCandidate, match="is for problem"):
        load_candidate(js, PID)
    with pytest.raises(MalformedCandidate, match="unknown candidate type"):
        load_candidate(tmp_path / "x.txt", PID) if (tmp_path / "x.txt").write_text("a") else None
    empty = tmp_path / "sample2.py"
    empty.write_text("  \n")
    with pytest.raises(MalformedCandidate, match="empty"):
        load_candidate(empty, PID)


def test_harness_accepts_decisions_only_spec(ref):
    from edgekernelbench.harness.api import evaluate

    traces = layered(ref.primfuncs()[FUNC]).traces()
    spec = KernelSpec(
        problem=PID, decisions=Decisions(**{k: {FUNC: v} for k, v in traces.items()}), method="test"
    )
    r = evaluate(PID, spec, trials=5, measure=False)
    assert r.correct, r.detail
    assert r.method == "test" and r.spec_hash == spec.hash()


@pytest.mark.parametrize("problem", [p.id for p in level1.PROBLEMS])
def test_reference_script_round_trips(problem):
    """What a model is shown (and the unscheduled candidate) parses back to the reference module."""
    from edgekernelbench.ir.replay import parse_module

    ref = build_reference(get_problem(problem))
    assert tvm_ffi.structural_equal(parse_module(ref.script()), ref.module)


def test_scheduling_leaves_the_cached_reference_untouched(ref):
    before = ref.script()
    traces = layered(ref.primfuncs()[FUNC]).traces()
    spec = KernelSpec(problem=PID, decisions=Decisions(**{k: {FUNC: v} for k, v in traces.items()}))
    materialize(spec, get_problem(PID), ref)
    materialize(spec, get_problem(PID), ref)  # a second replay starts from the same reference
    assert ref.script() == before
