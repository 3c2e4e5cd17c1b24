"""ONNX Runtime held to a pinned host profile's ISA (baselines/ort_isa.py): the CPUID bits hidden, the
mechanism (CPUID faulting and its signal handler) in a process of its own, and the judge's ORT baseline
running the kernels it runs on an AVX2-only CPU where host-avx2 is judged on a CPU with more."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from ekb_test_problems import saturating_weights
from test_oracle import SATURATING, exact_matmul, pmaddubsw_matmul

from edgekernelbench.backends.registry import get_profile
from edgekernelbench.baselines import ort_isa
from edgekernelbench.baselines.ort_isa import features_to_hide, masks, plan_pin


def test_the_extensions_hidden_are_those_the_host_has_and_the_target_lacks():
    host = {"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vnni", "avxvnni", "amx-tile", "aes"}
    haswell = {"avx", "avx2", "fma", "aes"}
    assert features_to_hide(host, haswell) == ("amx-tile", "avx512bw", "avx512f", "avx512vnni", "avxvnni")
    assert features_to_hide(host, host) == ()
    assert features_to_hide({"avx2", "fma"}, haswell) == ()  # an AVX2-only CPU: nothing to hide
    leaf7_0, leaf7_1 = masks(["avx512f", "avx512bw", "avx512vnni", "avxvnni", "amx-tile"])
    assert leaf7_0 == (0, (1 << 16) | (1 << 30), 1 << 11, 1 << 24)  # EBX: F, BW; ECX: VNNI; EDX: AMX-TILE
    assert leaf7_1 == (1 << 4, 0, 0, 0)  # subleaf 1 EAX: AVX-VNNI


def test_only_a_pinned_host_profile_hides_anything():
    assert plan_pin(get_profile("host-cpu", 1)) == (None, "")  # this CPU as it is
    assert plan_pin(get_profile("rpi4", 1)) == (None, "")  # not this host
    pin, why = plan_pin(get_profile("host-avx2", 1))
    assert why == "" or "not held to host-avx2's ISA" in why
    if pin is not None:
        assert "avx2" not in pin.features and pin.features
        assert ort_isa.ISAPin.from_dict(pin.to_dict()) == pin


needs_faulting = pytest.mark.skipif(
    bool(ort_isa.cpuid_faulting()), reason=ort_isa.cpuid_faulting() or "CPUID faulting available"
)


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True)


@needs_faulting
def test_cpuid_answers_with_the_hidden_bits_cleared_and_other_faults_still_crash():
    """In a process of its own (the mask lasts as long as the process): leaf 7's AVX2 bit (any AVX2 host
    has it) hidden, every other bit and leaf as the CPU says; a real segmentation fault still kills the
    process instead of looping in the handler."""
    lib = str(ort_isa.build_library())
    out = _run(
        f"""
        import ctypes
        lib = ctypes.CDLL({lib!r})
        four = ctypes.c_uint32 * 4
        def cpuid(leaf, sub):
            o = four(); lib.ekb_cpuid(leaf, sub, o); return list(o)
        before7, before1 = cpuid(7, 0), cpuid(1, 0)
        assert before7[1] & (1 << 5), "no AVX2 bit to hide"
        assert lib.ekb_hide_cpuid(four(0, 1 << 5, 0, 0), four(0, 0, 0, 0)) == 0
        after7, after1 = cpuid(7, 0), cpuid(1, 0)
        assert after7 == [before7[0], before7[1] & ~(1 << 5), before7[2], before7[3]], (before7, after7)
        assert after1[0] == before1[0] and after1[2:] == before1[2:]  # EBX holds the running core's id
        lib.ekb_cpuid_answered.restype = ctypes.c_long
        print("answered", lib.ekb_cpuid_answered(), flush=True)
        ctypes.string_at(0)
        """
    )
    assert "answered 2" in out.stdout, out.stderr[-2000:]
    assert out.returncode == -11, (out.returncode, out.stderr[-2000:])  # SIGSEGV, not a hang


def _pinned_vnni() -> str:
    pin, why = plan_pin(get_profile("host-avx2", 1))
    if pin is None:
        return why or "this CPU has nothing beyond AVX2 to hide"
    if not {"avx512vnni", "avxvnni"} & set(pin.features):
        return "this CPU has no VNNI: ONNX Runtime's u8 x s8 GEMM saturates here anyway"
    return ""


@pytest.mark.skipif(bool(_pinned_vnni()), reason=_pinned_vnni() or "VNNI to hide")
def test_the_judge_holds_onnx_runtime_to_host_avx2_where_this_cpu_has_vnni(quick_timing):
    """On a CPU with VNNI, ONNX Runtime's u8 x s8 GEMM is exact (host-cpu); judged for host-avx2 its
    baseline runs the AVX2 kernel, whose pmaddubsw saturates: its output is then exactly the NumPy model
    of that kernel on the judgment's timing inputs, as on an AVX2-only CPU."""
    from edgekernelbench.generators.reference_candidates import reference_spec
    from edgekernelbench.harness.api import evaluate
    from edgekernelbench.harness.inputs import InputPlan
    from edgekernelbench.problems import get_problem

    p = get_problem(SATURATING)
    found = {}
    for backend in ("host-cpu", "host-avx2"):
        res = evaluate(
            p, reference_spec(p), backend, trials=2, timing=quick_timing, baselines=("onnxruntime",)
        )
        assert res.correct, res.detail
        x = InputPlan(p, res.seed, trials=2).timing_sets()[0]["a"]
        found[backend] = (res.extra["onnxruntime_isa"], res.extra["onnxruntime_output"], x)
    isa, check, _ = found["host-cpu"]
    assert isa == {"hidden": []} and check["matches_oracle"] is True
    isa, check, x = found["host-avx2"]
    assert "avx512f" in isa["hidden"] and "host-avx2" in isa["by"]
    w = saturating_weights()
    diff = np.abs(pmaddubsw_matmul(x, w) - exact_matmul(x, w))
    assert check["matches_oracle"] is False and check["max_abs_err"] == float(diff.max()) > 0


def test_ekb_backends_says_whether_onnx_runtime_is_held_to_a_pinned_profile():
    import json

    from click.testing import CliRunner

    from edgekernelbench.cli import cli

    out = CliRunner().invoke(cli, ["backends", "--json"])
    assert out.exit_code == 0, out.output
    rows = {r["name"]: r for r in json.loads(out.output[out.output.index("[") :])}
    assert rows["host-cpu"]["onnxruntime_isa"] == ""
    pin, why = plan_pin(get_profile("host-avx2", 1))
    held = rows["host-avx2"]["onnxruntime_isa"]
    assert held == (
        f"ONNX Runtime held to its ISA ({len(pin.features)} CPUID features hidden)" if pin else why
    )
