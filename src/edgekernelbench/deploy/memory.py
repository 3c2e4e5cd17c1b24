"""The memory a deployed model needs, planned before anything runs (the `--max-memory` check), as the Relax
VM will allocate it:

- activations: the Relax VM's static storage plan of `main` (relax.transform.StaticPlanBlockMemory, the pass
  tvm.compile runs): one `alloc_storage` per storage the plan shares between intermediate tensors whose
  lives do not overlap, plus the tensors it leaves to the run (the outputs: `builtin.alloc_tensor`);
- workspace: each kernel's own buffers (padding, accumulators, packed tiles) once TVM's TIR pipeline has
  lowered it -- a "global" buffer above tvm_env.STACK_BUFFER_LIMIT is heap memory the kernel takes from the
  runtime's workspace allocator at its start and gives back at its end; one inside a parallel loop is
  taken once per task (the profile's threads). Kernels run one after another, so the model's workspace is
  the largest kernel's; the smaller buffers are stack arrays (`stack_bytes`, the largest kernel's);
- weights, apart: the weight tensors main takes (after main_transform_params), as the artifact stores them.

`planned_bytes` = activations + workspace: what `--max-memory` bounds (the arena of TFLite Micro, the
memory plan of ExecuTorch); a board also holds the weights (`total_bytes`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from .model import DeployError

_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": 1024**2, "mb": 1000**2, "mib": 1024**2}
_UNITS.update({"g": 1024**3, "gb": 1000**3, "gib": 1024**3})
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """Bytes from "300000", "64K", "64KiB" (1024), "64KB" (1000), "1.5M", "2GiB"; DeployError otherwise."""
    m = _SIZE.match(str(text))
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _UNITS:
        raise DeployError(f"--max-memory {text!r}: not a size (e.g. 262144, 256K, 256KiB, 1.5MB)")
    return int(float(m.group(1)) * _UNITS[unit])


def human(n: int | float) -> str:
    """Bytes for a person: 62.8 KiB, 1.50 MiB, 512 B."""
    n = float(n)
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= scale:
            return f"{n / scale:.{2 if n / scale < 10 else 1}f} {unit}"
    return f"{int(n)} B"


@dataclass
class KernelMemory:
    """One kernel's own buffers after lowering, in bytes (per call; heap ones times the tasks that take
    them)."""

    name: str
    workspace_bytes: int  # heap: taken from the runtime's workspace allocator
    stack_bytes: int  # stack arrays (at most STACK_BUFFER_LIMIT each)
    buffers: list[list] = field(default_factory=list)  # [name, bytes, "heap"|"stack", tasks]


@dataclass
class MemoryPlan:
    activations_bytes: int  # the Relax VM's static plan of main: its storages + the outputs
    storages: list[int]  # each planned storage's bytes, in main's order
    outputs_bytes: int  # tensors left to the run (main's results)
    unplanned: int  # allocations whose size is not a constant (0 for a static model)
    workspace_bytes: int  # the largest kernel's heap buffers
    workspace_kernel: str  # which kernel
    stack_bytes: int  # the largest kernel's stack arrays
    weights_bytes: int
    threads: int
    kernels: list[KernelMemory] = field(default_factory=list)
    unplanned_tensors_bytes: int = 0  # the same activations without the plan (one allocation each)

    @property
    def planned_bytes(self) -> int:
        return self.activations_bytes + self.workspace_bytes

    @property
    def total_bytes(self) -> int:
        return self.planned_bytes + self.weights_bytes

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(planned_bytes=self.planned_bytes, total_bytes=self.total_bytes)
        return d

    def summary(self) -> str:
        return (
            f"planned memory {human(self.planned_bytes)} (activations {human(self.activations_bytes)} in "
            f"{len(self.storages)} storage(s) + outputs, workspace {human(self.workspace_bytes)}); "
            f"weights {human(self.weights_bytes)} apart"
        )


def check_budget(plan: MemoryPlan, max_bytes: int | None, text: str | None = None) -> None:
    """DeployError (one line naming the planned figure) when the plan does not fit `max_bytes`."""
    if max_bytes is not None and plan.planned_bytes > max_bytes:
        raise DeployError(
            f"--max-memory {text or max_bytes}: the model does not fit: {plan.summary()}, "
            f"{human(plan.planned_bytes - max_bytes)} over"
        )


def _nbytes(shape, dtype) -> int:
    import tvm_ffi

    d = tvm_ffi.dtype(str(dtype))
    n = (int(d.bits) * int(d.lanes) + 7) // 8
    for s in shape:
        n *= int(s)
    return n


def activation_plan(graph_mod, target) -> tuple[list[int], int, int, int]:
    """(planned storages' bytes, outputs' bytes, allocations of no constant size, bytes without the plan) of
    `main` in a graph module (artifact.graph_module), from the passes tvm.compile runs up to the plan."""
    import tvm
    from tvm import relax

    seq = tvm.transform.Sequential(
        [
            relax.transform.LegalizeOps(),
            relax.transform.RewriteDataflowReshape(),
            relax.transform.ToNonDataflow(),
            relax.transform.RemovePurityChecking(),
            relax.transform.CallTIRRewrite(),
        ]
    )
    with target:
        before = seq(graph_mod)
        after = relax.transform.StaticPlanBlockMemory()(before)
    storages, outputs, unknown, _ = _allocations(after["main"])
    _, _, _, unplanned = _allocations(before["main"])
    return storages, outputs, unknown, unplanned


def _allocations(func) -> tuple[list[int], int, int, int]:
    """(alloc_storage sizes, builtin.alloc_tensor bytes, allocations of no constant size, every tensor's
    bytes)."""
    from tvm import relax

    storages: list[int] = []
    outputs = unknown = tensors = 0
    for block in func.body.blocks:
        for b in block.bindings:
            v = b.value
            if not isinstance(v, relax.Call) or not hasattr(v.op, "name"):
                continue
            op = v.op.name
            try:
                if op == "relax.memory.alloc_storage":
                    storages.append(int(v.args[0].values[0]))
                elif op in ("relax.builtin.alloc_tensor", "relax.memory.alloc_tensor"):
                    size = _nbytes(
                        v.args[0 if op == "relax.builtin.alloc_tensor" else 2].values, b.var.ty.dtype
                    )
                    tensors += size
                    outputs += size if op == "relax.builtin.alloc_tensor" else 0
            except (TypeError, ValueError, AttributeError):
                unknown += 1
    return storages, outputs, unknown, tensors


def kernel_memory(funcs: dict, target, threads: int) -> list[KernelMemory]:
    """Each PrimFunc's buffers after TVM's main TIR lowering for `target` (name -> PrimFunc in `funcs`)."""
    import tvm
    from tvm import tirx
    from tvm.tirx import compilation_pipeline as pipelines

    from ..backends.host import primfunc_library

    lower, _, _ = pipelines.PIPELINE_MAP["s_tir"]()
    mod = primfunc_library(tvm.IRModule(dict(funcs)))
    lowered = lower(tirx.transform.BindTarget(target.with_host(target))(mod))
    out = []
    for gv, f in lowered.functions.items():
        rows: list[list] = []
        _buffers(f.body, 1, threads, rows)
        name = gv.name_hint
        heap = sum(r[1] * r[3] for r in rows if r[2] == "heap")
        stack = sum(r[1] for r in rows if r[2] == "stack")
        out.append(KernelMemory(name, heap, stack, rows))
    return out


def _buffers(node, tasks: int, threads: int, rows: list[list]) -> None:
    """Appends [name, bytes, "heap"|"stack", tasks] for every "global" buffer allocated under `node`; one
    under a parallel loop is allocated by each of `threads` tasks."""
    import tvm_ffi
    from tvm import tirx

    from ..tvm_env import STACK_BUFFER_LIMIT

    def visit(n):
        if isinstance(n, tirx.For) and n.kind == tirx.ForKind.PARALLEL and tasks == 1:
            _buffers(n.body, threads, threads, rows)
            return tvm_ffi.WalkResult.SKIP
        if isinstance(n, tirx.AllocBuffer) and n.buffer.scope() == "global":
            buf = n.buffer
            if all(isinstance(d, tirx.IntImm) for d in buf.shape):
                size = _nbytes([int(d.value) for d in buf.shape], buf.dtype)
                where = "stack" if size <= STACK_BUFFER_LIMIT else "heap"
                rows.append([buf.name, size, where, tasks if where == "heap" else 1])
            else:
                rows.append([buf.name, 0, "heap (size not constant)", tasks])
        return tvm_ffi.WalkResult.ADVANCE

    tvm_ffi.structural_walk(node, visit, order="pre")


def plan_memory(graph_mod, funcs: dict, target, threads: int, weights_bytes: int) -> MemoryPlan:
    """The plan of a deployed graph module (artifact.graph_module: main and the kernels it calls) built for
    `target`; `funcs`: its PrimFuncs by name."""
    storages, outputs, unknown, unplanned = activation_plan(graph_mod, target)
    kernels = kernel_memory(funcs, target, threads)
    widest = max(kernels, key=lambda k: k.workspace_bytes, default=None)
    return MemoryPlan(
        activations_bytes=sum(storages) + outputs,
        storages=storages,
        outputs_bytes=outputs,
        unplanned=unknown,
        workspace_bytes=widest.workspace_bytes if widest else 0,
        workspace_kernel=widest.name if widest and widest.workspace_bytes else "",
        stack_bytes=max((k.stack_bytes for k in kernels), default=0),
        weights_bytes=weights_bytes,
        threads=threads,
        kernels=kernels,
        unplanned_tensors_bytes=unplanned,
    )
