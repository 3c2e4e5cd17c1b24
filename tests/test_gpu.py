"""GPU backends build device code without a GPU (compile-only); unbound loops are a compile error;
`ekb backends`, `ekb peak`, and a report with a host and a GPU column group."""

import json
import tomllib

import pytest
from test_cli import assert_one_line_error, ekb

from edgekernelbench.backends.profiles import load_profiles
from edgekernelbench.harness.api import evaluate
from edgekernelbench.harness.isolation import Limits
from edgekernelbench.harness.result import Result
from edgekernelbench.problems import get_problem

TINY = "L1/tiny_scale_add"
DENSE = "L1/dense_kws_classifier"  # matmul + bias: dlight's GPU GEMV/matmul rules, plus a transpose
GPU_PROFILES = ["jetson-orin-nano", "jetson-xavier-nx", "mali", "adreno", "webgpu", "apple-m"]
MARKER = {"cuda": "__global__", "opencl": "__kernel", "wgsl": "@compute", "metal": "kernel void"}
LIMITS = Limits(timeout_s=120, memory_mb=4096)


def test_gpu_profiles_are_gpu_kind():
    profiles = load_profiles()
    assert {n for n, p in profiles.items() if p.kind == "gpu"} >= set(GPU_PROFILES)
    assert {profiles[n].target["kind"] for n in GPU_PROFILES} == {"cuda", "opencl", "webgpu", "metal"}


@pytest.mark.parametrize("backend", GPU_PROFILES)
def test_dlight_scheduled_candidate_compiles_for_every_gpu(backend):
    from edgekernelbench.backends.gpu import gpu_default_spec
    from edgekernelbench.backends.registry import get_profile

    spec = gpu_default_spec(get_problem(DENSE), get_profile(backend))
    r = evaluate(DENSE, spec, backend, trials=1, measure=True, limits=LIMITS)
    assert r.compiled, r.detail
    assert not r.correct and r.reason == "not_checked" and r.timing_status == "compile-only"
    assert r.correctness is None and r.runtime is None and not r.speedups
    lang = r.extra["device_language"]
    assert (
        lang
        == {"cuda": "cuda", "opencl": "opencl", "webgpu": "wgsl", "metal": "metal"}[
            get_profile(backend).target["kind"]
        ]
    )
    src = r.extra["device_source"]
    assert MARKER[lang] in src and 0 < len(src) <= 32_000
    assert any(k.startswith("fused_matmul_add") for k in r.extra["device_kernels"]), r.extra["device_kernels"]


def test_unscheduled_reference_fails_on_cuda_with_the_unbound_loop_reason():
    from edgekernelbench.generators.reference_candidates import reference_spec

    r = evaluate(DENSE, reference_spec(get_problem(DENSE)), "jetson-orin-nano", trials=1, limits=LIMITS)
    assert not r.compiled and r.reason == "compile_error"
    assert "not bound to GPU threads" in r.detail and "fused_matmul_add" in r.detail, r.detail


def test_partly_bound_primfunc_is_named_with_its_unbound_block():
    import tvm
    from tvm import s_tir

    from edgekernelbench.backends.gpu import GPUBackend, UnboundLoops, unbound_primfuncs
    from edgekernelbench.backends.registry import get_profile
    from edgekernelbench.reference import build_reference_uncached

    ref = build_reference_uncached(get_problem(TINY))
    sch = s_tir.Schedule(tvm.IRModule({"main": ref.module["fused_multiply_add"]}))
    fused = sch.fuse(*sch.get_loops(sch.get_sblock("T_add")))
    bx, tx = sch.split(fused, [None, 32])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    mod = tvm.IRModule(dict(ref.module.functions), attrs=ref.module.attrs)
    mod[mod.get_global_var("fused_multiply_add")] = sch.mod["main"]
    assert unbound_primfuncs(mod) == {"fused_multiply_add": ["T_multiply"]}
    with pytest.raises(UnboundLoops, match="fused_multiply_add.*T_multiply"):
        GPUBackend(get_profile("jetson-xavier-nx")).build(mod)


def test_compile_only_results_are_not_counted_as_incorrect():
    from edgekernelbench.report.summary import summarize

    gpu = [
        Result(TINY, 0, "mali", compiled=True, reason="not_checked", timing_status="compile-only"),
        Result(TINY, 1, "mali", compiled=False, reason="compile_error"),
    ]
    host = [Result(TINY, 0, "host-cpu", compiled=True, correct=False, reason="wrong_output")]
    s = summarize(gpu + host)
    mali = s.backend("mali").all
    assert mali.compile_at_1 == 0.5 and mali.correct_at_1 is None and mali.not_checked == 1
    assert all(v is None for ps in mali.fast.values() for v in ps.values())
    assert s.backend("host-cpu").all.correct_at_1 == 0.0


# ------------------------------------------------------------------------------------------ CLI
def test_backends_json_lists_every_profile_and_what_it_can_do_here():
    rows = json.loads(ekb("backends", "--json", check=True).stdout)
    by_name = {r["name"]: r for r in rows}
    assert set(by_name) == set(load_profiles())
    host = by_name["host-cpu"]
    assert host["build"]["ok"] and host["check"]["ok"] and host["time"]["ok"]
    orin = by_name["jetson-orin-nano"]
    assert orin["kind"] == "gpu" and orin["target_short"] == "cuda sm_87" and orin["run"] == "compile-only"
    assert orin["build"]["ok"] and not orin["check"]["ok"] and not orin["time"]["ok"]
    assert orin["peak_flops"] > 0 and orin["peak_source"].startswith("datasheet")
    table = ekb("backends", check=True).stdout
    assert "jetson-orin-nano" in table and "cuda sm_87" in table


def test_peak_stores_measured_figures_in_the_profiles_file(tmp_path, monkeypatch):
    path = tmp_path / "profiles.toml"
    path.write_text(
        '# mine\n[host-cpu]\nthreads = 1  # keep\npeak_flops = 1.0\n\n[mine]\ntarget = { kind = "llvm" }\n'
    )
    p = ekb("peak", "--backend", "host-cpu", "--profiles-file", path, "--mib", "8", check=True)
    assert "stored in" in p.stdout
    text = path.read_text()
    assert text.startswith("# mine") and "threads = 1  # keep" in text
    data = tomllib.loads(text)
    hc = data["host-cpu"]
    assert hc["peak_flops"] > 1e8 and hc["peak_bandwidth"] > 1e8
    assert (
        hc["peak_source"].startswith("measured: TVM micro-kernels, ") and "1 thread(s)" in hc["peak_source"]
    )
    assert data["mine"] == {"target": {"kind": "llvm"}}

    monkeypatch.setenv("EKB_PROFILES", str(path))
    from edgekernelbench.backends.registry import get_profile
    from edgekernelbench.runs import profile_peak

    prof = get_profile("host-cpu")
    assert prof.peak_flops == hc["peak_flops"]
    assert profile_peak(prof, 1)["flops"] == hc["peak_flops"]  # the roofline prefers it
    assert profile_peak(prof, 2) is None  # measured with another thread count


def test_peak_on_a_backend_that_cannot_run_here_is_one_line():
    assert_one_line_error(ekb("peak", "--backend", "jetson-orin-nano"), "cannot run here")


def test_set_profile_keys_keeps_the_rest_of_the_file(tmp_path):
    from edgekernelbench.backends.profile_file import set_profile_keys

    path = tmp_path / "p.toml"
    path.write_text('[a]\nx = 1\n[a.caches]\nl1d_kib = 32\n\n[b]\npeak_source = "old"\n')
    set_profile_keys(path, "a", {"peak_source": 'say "hi"'})
    set_profile_keys(path, "b", {"peak_source": "new", "peak_flops": 2.5})
    set_profile_keys(path, "c-d", {"peak_flops": 3.0})
    data = tomllib.loads(path.read_text())
    assert data == {
        "a": {"x": 1, "caches": {"l1d_kib": 32}, "peak_source": 'say "hi"'},
        "b": {"peak_source": "new", "peak_flops": 2.5},
        "c-d": {"peak_flops": 3.0},
    }


def test_report_has_a_column_group_per_backend(tmp_path):
    ekb("generate", "--out", tmp_path, "--problem", TINY, "--backend", "jetson-orin-nano", check=True)
    spec = json.loads((tmp_path / "candidates" / TINY / "sample1.json").read_text())
    assert spec["method"] == "dlight-gpu:jetson-orin-nano" and "threadIdx.x" in spec["module"]
    ekb(
        "eval",
        tmp_path,
        "--backend",
        "host-cpu,jetson-orin-nano",
        "--no-measure",
        "--trials",
        "1",
        check=True,
    )
    from edgekernelbench.store import RunStore

    with RunStore(tmp_path) as store:
        got = {(r.backend, r.sample): r for r in store.results()}
    assert got[("host-cpu", 0)].correct  # the reference, on the CPU
    assert got[("jetson-orin-nano", 0)].reason == "compile_error"  # the reference: loops not bound
    assert got[("jetson-orin-nano", 1)].reason == "not_checked"  # dlight-scheduled: compiled
    out = ekb("report", tmp_path, "--json", tmp_path / "r.json", check=True).stdout
    matrix = out[out.index("EdgeKernelBench: host-cpu, jetson-orin-nano") :]
    matrix = matrix.split("candidates made by:")[0]  # the per-method tables follow the matrix
    head = matrix.splitlines()[2]
    assert head.index("host-cpu") < head.index("jetson-orin-nano")
    assert matrix.count("Compile@1") == 2 and matrix.count("Correct@1") == 2
    assert matrix.count("vs tvm-default") == 2 and matrix.count("vs onnxruntime") == 2
    all_row = next(ln for ln in matrix.splitlines() if ln.strip("│ ").startswith("all"))
    cells = [c.strip() for c in all_row.strip("│").split("│")]
    # level, problems | host: 50% compiled, 50% correct, Fast x2 | gpu: 50% compiled, Correct "-", Fast "-"
    assert cells[2:4] == ["50.0%", "50.0%"] and cells[6:] == ["50.0%", "-", "-", "-"], cells
    summary = json.loads((tmp_path / "r.json").read_text())
    gpu = next(b for b in summary["backends"] if b["backend"] == "jetson-orin-nano")
    assert gpu["levels"][-1]["correct_at_1"] is None and gpu["levels"][-1]["not_checked"] == 1
