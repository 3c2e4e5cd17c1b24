"""tvm-default: the reference compiled with TVM's default pipeline plus dlight's default schedules for
the target -- what a TVM user gets without tuning."""

from __future__ import annotations


def dlight_rules(target):
    import tvm.s_tir.dlight as dl

    if target.kind.name in ("cuda", "opencl", "webgpu", "metal", "vulkan", "rocm"):
        return [
            dl.gpu.Matmul(),
            dl.gpu.GEMV(),
            dl.gpu.Reduction(),
            dl.gpu.GeneralReduction(),
            dl.gpu.Fallback(),
        ]
    return [dl.cpu.GEMV(), dl.cpu.Reduction()]


def tvm_default_module(reference_module, target):
    import tvm
    import tvm.s_tir.dlight as dl

    copy = tvm.IRModule(
        dict(reference_module.functions), attrs=reference_module.attrs
    )  # dlight mutates in place
    with target:
        return dl.ApplyDefaultSchedule(*dlight_rules(target))(copy)
