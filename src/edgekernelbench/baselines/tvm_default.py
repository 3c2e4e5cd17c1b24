"""The TVM baselines: what a TVM user gets without tuning.

- "tvm-default": the reference built exactly as `tvm.compile(module, target)` builds it -- TVM's default
  Relax pipeline for the target and TVM's own TIR lowering (Backend.build(..., stock=True)). On a CPU
  (TVM's relax/backend/cpu_generic pipeline) that schedules nothing: the kernels are the reference's own.
  On a GPU, TVM's default pipelines (cuda, rocm, metal, gpu_generic) apply dlight's GPU rules, and so does
  `tvm_default_module`.
- "tvm-dlight" (optional, `--baselines`): the reference with dlight's default rules for the target (on a
  CPU: GEMV and Reduction), built the same stock way. On convolutions, dlight's CPU Reduction rule makes a
  parallel loop over every output that recomputes the padding, which is much slower than the unscheduled
  reference; on dense layers its GEMV rule is faster. A contender of its own, not "what TVM gives".
"""

from __future__ import annotations

TVM_BASELINES = ("tvm-default", "tvm-dlight")  # the baselines the judge builds with TVM (harness/evaluate.py)
GPU_KINDS = ("cuda", "opencl", "webgpu", "metal", "vulkan", "rocm")


def dlight_rules(target):
    import tvm.s_tir.dlight as dl

    if target.kind.name in GPU_KINDS:
        return [
            dl.gpu.Matmul(),
            dl.gpu.GEMV(),
            dl.gpu.Reduction(),
            dl.gpu.GeneralReduction(),
            dl.gpu.Fallback(),
        ]
    return [dl.cpu.GEMV(), dl.cpu.Reduction()]


def _dlight(reference_module, target):
    import tvm
    import tvm.s_tir.dlight as dl

    copy = tvm.IRModule(dict(reference_module.functions), attrs=reference_module.attrs)  # dlight mutates
    with target:
        return dl.ApplyDefaultSchedule(*dlight_rules(target))(copy)


def tvm_default_module(reference_module, target):
    """The kernels tvm.compile's default pipeline for `target` runs: the reference's own on a CPU, dlight's
    GPU schedules on a GPU (an unscheduled kernel has no thread bindings there)."""
    if target.kind.name in GPU_KINDS:
        return _dlight(reference_module, target)
    return reference_module


def tvm_dlight_module(reference_module, target):
    """The reference scheduled with dlight's default rules for `target` (the "tvm-dlight" contender)."""
    return _dlight(reference_module, target)


def baseline_module(name: str, reference_module, target):
    """The module of TVM baseline `name` (one of TVM_BASELINES)."""
    if name == "tvm-default":
        return tvm_default_module(reference_module, target)
    if name == "tvm-dlight":
        return tvm_dlight_module(reference_module, target)
    raise ValueError(f"unknown TVM baseline {name!r} (known: {', '.join(TVM_BASELINES)})")


_BUILT: dict = {}


def baseline_built(name: str, reference, backend) -> tuple:
    """(module, Built) of TVM baseline `name` for the reference on `backend`, built once per process, as
    tvm.compile builds it (Backend.build(..., stock=True)): a warm judge (harness/zygote.py) builds
    tvm-default before it forks, and every judge and runner forked from it takes that."""
    key = (name, reference.problem_id, backend.profile.name, str(backend.target()))
    if key not in _BUILT:
        mod = baseline_module(name, reference.module, backend.target())
        _BUILT[key] = (mod, backend.build(mod, stock=True))
    return _BUILT[key]
