"""GPU backends build device code without a GPU (compile-only); unbound loops are a compile error;
`ekb backends`, `ekb peak`, and a report with a host and a GPU column group."""

import json
import tomllib

import pytest
from test_cli import assert_one_line_error, ekb

from edgekernelbench.backends.profiles import load_profiles
from edgekernelbench.harness.api import evaluate
from edgekernelbench.harness.isolation import Limits
from edgekernelbench.problems import get_problem
from edgekernelbench.records import Result

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
    from edgekernelbench.backends.registry import get_profile
    from edgekernelbench.generators.reference_candidates import gpu_default_spec

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
    assert [r["name"] for r in rows if not r["build"]["ok"]] == []  # TVM builds for every profile here
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
    assert hc["peak_levels"][-1]["level"] == "DRAM" and all(lv["bandwidth"] > 0 for lv in hc["peak_levels"])
    assert (
        hc["peak_source"].startswith("measured: TVM micro-kernels, ") and "1 thread(s)" in hc["peak_source"]
    )
    assert data["mine"] == {"target": {"kind": "llvm"}}

    monkeypatch.setenv("EKB_PROFILES", str(path))
    from edgekernelbench.backends.peak import profile_peak
    from edgekernelbench.backends.registry import get_profile

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


# ------------------------------------------------------------------------------------------ local GPU
def _cuda_here() -> bool:
    import tvm

    try:
        return bool(tvm.runtime.enabled("cuda")) and tvm.cuda(0).exist
    except Exception:
        return False


HAS_CUDA = _cuda_here()
needs_cuda = pytest.mark.skipif(
    not HAS_CUDA, reason="needs a CUDA GPU and its driver (this machine has none)"
)
without_cuda = pytest.mark.skipif(HAS_CUDA, reason="checks what happens on a machine without a CUDA GPU")


def test_host_gpu_profile_runs_locally_on_cuda():
    profile = load_profiles()["host-gpu"]
    assert profile.kind == "gpu" and profile.run == "local" and profile.target["kind"] == "cuda"
    assert "arch" not in profile.target  # TVM detects the local device's


@without_cuda
def test_local_gpu_without_a_device_is_an_infra_failure_not_a_wrong_kernel():
    from edgekernelbench.backends.registry import get_profile
    from edgekernelbench.generators.reference_candidates import gpu_default_spec

    spec = gpu_default_spec(get_problem(TINY), get_profile("host-gpu"))
    r = evaluate(TINY, spec, "host-gpu", trials=1, limits=LIMITS)
    assert not r.correct and r.reason == "infra", (r.reason, r.detail)
    assert "host-gpu" in r.detail and "cuda" in r.detail


@without_cuda
def test_eval_peak_and_backends_say_in_one_line_that_there_is_no_gpu(tmp_path):
    from test_cli import write_candidates

    from edgekernelbench.store import RunStore

    write_candidates(tmp_path, {0: "not a module"})
    ekb("eval", tmp_path, "--backend", "host-cpu", "--no-measure", check=True)
    before = RunStore(tmp_path).results()
    assert len(before) == 1
    assert_one_line_error(ekb("eval", tmp_path, "--backend", "host-gpu"), "no NVIDIA driver")
    # checked before any backend runs: rpi4 first would otherwise be judged, then the run stop
    assert_one_line_error(ekb("eval", tmp_path, "--backend", "rpi4,host-gpu"), "no NVIDIA driver")
    assert len(RunStore(tmp_path).results()) == 1  # nothing stored is lost, nothing half-run
    assert_one_line_error(ekb("peak", "--backend", "host-gpu"), "host-gpu")
    cand = next((tmp_path / "candidates").rglob("sample0.*"))
    assert_one_line_error(ekb("check", TINY, cand, "--backend", "host-gpu"), "no NVIDIA driver")
    assert_one_line_error(
        ekb("baseline", "--backend", "host-gpu", "--out", tmp_path / "b"), "no NVIDIA driver"
    )
    row = next(r for r in json.loads(ekb("backends", "--json", check=True).stdout) if r["name"] == "host-gpu")
    assert row["build"]["ok"] and not row["check"]["ok"] and "no cuda runtime" in row["check"]["detail"]


@needs_cuda
def test_local_gpu_judges_candidates_on_the_device():
    """On a machine with a CUDA GPU: the dlight candidate is correct and timed against tvm-default on
    the device; a wrong and a half-writing thread-bound kernel fail with the host harness's reasons."""
    from test_harness import SIG, prim

    from edgekernelbench.backends.registry import get_profile
    from edgekernelbench.generators.reference_candidates import gpu_default_spec
    from edgekernelbench.harness.timing import TimingConfig
    from edgekernelbench.ir.spec import KernelSpec

    spec = gpu_default_spec(get_problem(DENSE), get_profile("host-gpu"))
    r = evaluate(DENSE, spec, "host-gpu", trials=3, timing=TimingConfig.quick(), limits=LIMITS)
    assert r.compiled and r.correct, (r.reason, r.detail)
    assert r.timing_status == "measured" and r.runtime.median > 0 and "tvm-default" in r.speedups
    assert (
        r.extra["device"]["local"]["device"].startswith("cuda") and "__global__" in r.extra["device_source"]
    )

    def bound(body: str) -> str:
        return prim(
            "for i in T.thread_binding(4, thread='blockIdx.x'):\n"
            "    for j in T.thread_binding(8, thread='threadIdx.x'):\n        " + body,
            SIG,
        )

    cases = {
        "wrong_output": bound("out[i, j] = x[i, j] * w1[j]"),
        "nan_output": bound("if i < 2:\n            out[i, j] = x[i, j] * w1[j] + b3[j]"),
    }
    for reason, text in cases.items():
        r = evaluate(
            TINY, KernelSpec(problem=TINY, module=text), "host-gpu", trials=2, measure=False, limits=LIMITS
        )
        assert r.compiled and r.reason == reason, (reason, r.reason, r.detail)


@needs_cuda
def test_peak_measures_a_local_gpu(tmp_path):
    path = tmp_path / "profiles.toml"
    ekb("peak", "--backend", "host-gpu", "--profiles-file", path, check=True)
    gpu = tomllib.loads(path.read_text())["host-gpu"]
    assert gpu["peak_flops"] > 1e11 and gpu["peak_bandwidth"] > 1e10


def test_gpu_peak_micro_kernels_build_device_code():
    import tvm

    from edgekernelbench.backends import peak

    for target in ({"kind": "cuda", "arch": "sm_87"}, {"kind": "opencl"}):
        k = peak._build(tvm.target.Target(target, host={"kind": "llvm"}), 16, 8, 1)
        assert [m.kind for m in k.fma.mod.imports] == [target["kind"]]
        assert [m.kind for m in k.scale.mod.imports] == [target["kind"]]
        assert k.fma_flops == 2.0 * k.fma_elems * peak.GPU_ITERS and k.n >= 256 * 2**20 // 4


@pytest.mark.parametrize("backend, run", [("mali", "compile-only"), ("rpi4", "emulated")])
def test_baselines_on_a_backend_that_cannot_time_here_is_one_line(tmp_path, backend, run):
    p = ekb("baseline", "--backend", backend, "--problem", TINY, "--out", tmp_path)
    assert_one_line_error(p, f"{backend} cannot time anything here (run = {run})")
