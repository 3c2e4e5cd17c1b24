"""benchmarks/kernel_profile.py: the machine-code reading (FMA width, the hot loop's instruction mix, the
issue ceiling), the traffic micro-kernel, and the "why" it prints."""

from __future__ import annotations

import collections
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import kernel_profile as kp  # noqa: E402

# two nested loops: the outer holds one FMA, the inner (the register tile) four, an epilogue's max, a
# zeroing idiom, loads (one folded into an FMA), an address computed (no load) and a store; a forward jump
# that is no loop
ASM = """
fused_conv:
\tpushq\t%rbp
\tjmp\t.LBB0_3
.LBB0_1:
\tvfmadd231ps\t%zmm1, %zmm2, %zmm3
.LBB0_2:
\tvxorps\t%xmm9, %xmm9, %xmm9
\tvbroadcastss\t(%rax,%rcx,4), %zmm4
\tvmovups\t64(%rdx), %zmm5
\tvfmadd231ps\t%zmm4, %zmm5, %zmm0
\tvfmadd231ps\t(%rsi){1to16}, %zmm5, %zmm6
\tvfmadd231ps\t%zmm4, %zmm5, %zmm7
\tvfmadd231ps\t%zmm4, %zmm5, %zmm8
\tvmaxps\t%zmm10, %zmm0, %zmm0
\tleaq\t(%rax,%rcx,4), %rdx
\tvmovups\t%zmm0, (%rdi)
\taddq\t$4, %rcx
\tcmpq\t$64, %rcx
\tjne\t.LBB0_2
\tjb\t.LBB0_1
.LBB0_3:
\tvfmadd231ss\t%xmm1, %xmm2, %xmm3
\tretq
.Lfunc_end0:
"""


def _lines():
    src = "preamble\n" + ASM
    return kp.kernel_asm(src, "fused_conv")


def test_hot_loop_is_the_innermost_loop_with_the_most_fmas():
    loop = kp.hot_loop(_lines())
    assert loop.fmas == 4 and loop.fma_lanes == 64
    assert loop.other_vector == collections.Counter({"vmaxps": 1})  # the zeroing idiom is free
    assert (loop.loads, loop.stores) == (3, 1)  # broadcast, vector load, the FMA's folded load
    assert loop.wide and loop.cycles == 2.5  # (4 FMAs + 1 max) / 2 ports: 512-bit
    assert loop.issue_cap(16) == pytest.approx(64 / (32 * 2.5))
    narrow = kp.hot_loop([ln.replace("zmm", "ymm") for ln in _lines()])
    assert not narrow.wide and narrow.fma_lanes == 32
    assert narrow.cycles == 2.0  # 4 FMAs on two ports, the max on the third
    assert narrow.issue_cap(16) == pytest.approx(32 / (32 * 2.0))


def test_fma_width_is_the_widest_fma():
    lines = _lines()
    assert kp.fma_lanes(lines) == 16
    assert kp.fma_lanes([ln.replace("zmm", "ymm") for ln in lines]) == 8
    assert kp.fma_lanes(["vaddps\t%zmm1, %zmm2, %zmm3"]) is None
    assert kp.hot_loop(["vfmadd231ps\t%zmm1, %zmm2, %zmm3"]) is None  # no loop


def test_a_missing_kernel_reads_as_no_code():
    assert kp.kernel_asm(ASM, "other_kernel") == []


def _row(**kw):
    row = {"lanes": 16, "native": 16, "lane_cap": 1.0, "loop": kp.hot_loop(_lines())}
    row |= {"side_by_side": 0.5, "bytes_share": 0.1}
    return {**row, **kw}


def test_why_names_the_lowest_ceiling_under_the_bar():
    assert kp.why(_row(lanes=8, lane_cap=0.5)).startswith("FMAs 8 lanes wide (at most 50%)")
    assert kp.why(_row(side_by_side=0.3, bytes_share=0.6)).startswith("moving its bytes (at most 50%)")
    serial = kp.why(_row(side_by_side=0.45, bytes_share=0.4))
    assert serial.startswith("arithmetic and bytes one after the other: 45% + 40%")
    assert kp.why(_row(side_by_side=0.4, bytes_share=0.1)).startswith("none of these")


def test_the_peak_micro_kernel_reads_as_full_width_fmas():
    """The real thing: TVM's build of the peak FMA loop for this host, read back from its machine code --
    16 lanes with AVX-512, 8 with AVX2 (16-lane chains split in two), at the full issue rate either way."""
    import tvm

    from edgekernelbench.backends.peak import _fma_kernel
    from edgekernelbench.search.rules import build_target

    target = build_target(1)
    native = kp.native_lanes(target)
    assert native in (8, 16)
    lib = tvm.compile(
        tvm.IRModule({"main": _fma_kernel(8, 16, 1000).with_attr("global_symbol", "main")}), target
    )
    loop = kp.hot_loop(kp.kernel_asm(lib.mod.inspect_source("asm"), "main"))
    # eight 16-lane chains per iteration of the source loop, however LLVM splits and unrolls them
    assert loop is not None and loop.fma_lanes % (8 * 16) == 0 and not loop.other_vector
    assert loop.issue_cap(native) > 0.9


def test_traffic_kernel_moves_the_bytes_it_is_given():
    from edgekernelbench.search.rules import build_target

    make = kp.traffic_contender(build_target(1))
    run = make(3 * 256 + 1, 10)  # 4 rows read (rounded up to even), 1 row written
    seconds = run(2)
    assert np.isfinite(seconds) and seconds > 0


def test_a_directory_without_a_run_is_one_line_and_exit_2(tmp_path, capsys):
    assert kp.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"{tmp_path}: no run store (results.db) there"]


# perf annotate --stdio of a kernel body: an outer loop (2000-2040) around an inner FMA loop (2010-2030), a
# copy loop (2050-2060), and code outside loops
ANNOTATED = """
 Percent |      Source code & Disassembly of kernel.so for cpu-clock (1000 samples, percent: local period)
    0.00 :   2000:   movq   %rdi,%rax
    1.00 :   2008:   vxorps %xmm0,%xmm0,%xmm0
   30.00 :   2010:   vfmadd231ps (%rsi){1to16},%zmm1,%zmm0
   20.00 :   2018:   vfmadd231ps %zmm2,%zmm1,%zmm3
   10.00 :   2020:   vpermt2ps (%rdx),%zmm4,%zmm1
    5.00 :   2028:   addq   $0x40,%rsi
    4.00 :   2030:   jne    2010 <fused_conv_compute_+0x10>
    5.00 :   2038:   vmovups %zmm0,(%rcx)
    0.00 :   2040:   jb     2000 <fused_conv_compute_+0x0>
   20.00 :   2050:   vmovups %ymm2,0x958(%rcx)
    3.00 :   2058:   addq   $0x20,%rcx
    1.00 :   2060:   jne    2050 <fused_conv_compute_+0x50>
    1.00 :   2068:   retq
"""


def test_samples_are_grouped_by_the_innermost_loop_that_holds_them():
    loops = kp.sampled_loops(ANNOTATED)
    by = {(lp.first, lp.last): lp for lp in loops}
    inner, outer, copy, outside = (
        by[(0x2010, 0x2030)],
        by[(0x2000, 0x2040)],
        by[(0x2050, 0x2060)],
        by[(-1, -1)],
    )
    assert loops[0] is inner and inner.share == pytest.approx(0.69) and inner.fmas == 2
    assert inner.instructions == 5 and inner.top[0] == ("vfmadd231ps", pytest.approx(0.5))
    assert outer.share == pytest.approx(0.06) and outer.instructions == 4 and outer.fmas == 0
    assert copy.share == pytest.approx(0.24) and copy.top[0] == ("vmovups", pytest.approx(0.2))
    assert outside.share == pytest.approx(0.01)
    text = kp.samples_text(
        {"loops": loops, "symbols": {"fused_conv_compute_": 0.8, "__memset_avx2": 0.1}}, True
    )
    assert text.startswith("loop 2010-2030 69% (5 instructions, 2 FMAs; vfmadd231ps 50%")
    assert "loop 2050-2060 24%" in text and "outside" not in text  # under 5% of the samples: left out
    assert text.endswith("samples by function: fused_conv_compute_ 80%, __memset_avx2 10%")
    assert kp.samples_text(None, False) == "no perf (linux-perf)"


@pytest.mark.skipif(
    shutil.which("perf") is None, reason="needs Linux perf (make test installs linux-perf as root)"
)
def test_a_kernel_sampled_under_perf_spends_its_time_in_its_loop():
    """perf_samples on a built kernel: a vectorized multiply-add over 1 M floats, called by TVM's time
    evaluator in a child process under perf's software clock; its samples sit in its one loop, whose
    instructions that drew the most are its multiply and add (or their FMA)."""
    import tvm
    from tvm.script import tirx as T

    from edgekernelbench.search.rules import build_target

    n = 1 << 20

    @T.prim_func
    def fmaloop(a: T.Buffer((n,), "float32"), b: T.Buffer((n,), "float32"), c: T.Buffer((n,), "float32")):
        T.func_attr({"tirx.noalias": True, "global_symbol": "fmaloop"})
        for i in range(n // 16):
            for j in T.vectorized(16):
                c[i * 16 + j] = a[i * 16 + j] * b[i * 16 + j] + c[i * 16 + j]

    lib = tvm.compile(tvm.IRModule({"fmaloop": fmaloop}), build_target(1))
    args = [tvm.runtime.tensor(np.ones(n, "float32")) for _ in range(3)]
    out = kp.perf_samples(lib.mod, "fmaloop", args, seconds=0.5)
    assert out is not None and out["body"] in out["symbols"] and out["symbols"][out["body"]] > 0.3
    top = out["loops"][0]
    assert top.first >= 0 and top.share > 0.9 and top.instructions < 100
    assert any(m.startswith(("vfmadd", "vmulps", "mulps")) for m, _ in top.top)
