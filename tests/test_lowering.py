"""The project's TIR lowering (tvm_env.compile): TVM's pipeline, except that a constant-size buffer of up to
4 KiB is a stack array instead of a TVMBackendAllocWorkspace call (TVM's own limit is below 1 KiB)."""

from __future__ import annotations

import numpy as np
import pytest

from edgekernelbench import tvm_env


def _tiled_matmul(tile: int, n: int = 64):
    """n x n x n matmul whose (tile x tile) float32 accumulator is a "global" cache_write buffer computed
    at the (i, j) tile loop: tile = 16 is a 1 KiB tile, 32 a 4 KiB one, 64 a 16 KiB one."""
    import tvm
    from tvm import te

    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, b, c]))
    blk = sch.get_sblock("C")
    i, j, kk = sch.get_loops(blk)
    io, ii = sch.split(i, [None, tile])
    jo, ji = sch.split(j, [None, tile])
    sch.reorder(io, jo, kk, ii, ji)
    acc = sch.cache_write(blk, 0, "global")
    sch.reverse_compute_at(acc, jo)
    sch.vectorize(ji)
    return sch.mod


def _workspace_calls(executable) -> int:
    """Mentions of TVM's workspace allocator in the LLVM IR (a call loads its pointer; none: no declaration)."""
    return executable.mod.inspect_source("ll").count("TVMBackendAllocWorkspace")


def _run(executable, n: int = 64):
    import tvm

    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    out = tvm.runtime.tensor(np.zeros((n, n), np.float32))
    executable["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), out)
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-5)


@pytest.mark.parametrize("tile", [16, 32])
def test_a_register_tile_of_1_to_4_kib_is_a_stack_array_and_computes_the_same(tile):
    import tvm

    target = tvm.target.Target({"kind": "llvm", "num-cores": 1})
    mod = _tiled_matmul(tile)
    stock = tvm.compile(mod, target)
    ours = tvm_env.compile(mod, target)
    # TVM keeps only buffers below 1 KiB on the stack: its build of this tile calls the workspace allocator
    assert _workspace_calls(stock) > 0
    assert _workspace_calls(ours) == 0
    _run(stock)
    _run(ours)


def test_a_buffer_above_the_limit_stays_a_workspace_and_tir_build_lowers_alike():
    import tvm

    target = tvm.target.Target({"kind": "llvm", "num-cores": 1})
    big = _tiled_matmul(64)  # 16 KiB: on the stack it would be a large frame per call
    assert _workspace_calls(tvm_env.compile(big, target)) > 0
    small = _tiled_matmul(16)
    assert tvm_env.build_tir(small, target).inspect_source("ll").count("TVMBackendAllocWorkspace") == 0


def test_the_kernel_cache_keys_on_the_lowering(monkeypatch):
    import tvm

    from edgekernelbench.backends import kernel_cache

    target = tvm.target.Target({"kind": "llvm"})
    key = kernel_cache._digest("{}", target)
    monkeypatch.setattr(kernel_cache, "TIR_PIPELINE", "another-lowering")
    assert kernel_cache._digest("{}", target) != key
