"""A destination-passing interpreter for the Relax functions of a fused module.

The harness runs every kernel call itself, with output buffers it allocates and fills with a
sentinel before the call, and checks the call left its inputs unchanged. This is what makes
"wrote nothing", "wrote part of the output" and "mutated an input" visible: the Relax VM
would hand kernels pooled memory that may still hold an earlier, correct result.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .errors import EKBError


class GraphError(EKBError):
    """The Relax function uses a construct the harness cannot run kernel by kernel."""


class KernelFault(EKBError):
    """A kernel misbehaved in a way the harness detects directly (e.g. it wrote into an input)."""

    def __init__(self, reason: str, message: str):
        self.reason = reason
        super().__init__(message)


@dataclass
class Step:
    var: object  # the relax.Var bound
    kind: str  # call_tir | tuple_get | tuple | alias | const
    func: str | None = None
    args: list = field(default_factory=list)  # relax exprs
    index: int = 0
    outs: list[tuple[tuple[int, ...], str]] = field(default_factory=list)
    value: np.ndarray | None = None


def _static_shape(sinfo) -> tuple[tuple[int, ...], str]:
    try:
        return tuple(int(d) for d in sinfo.shape.values), str(sinfo.dtype)
    except Exception as e:  # symbolic or unknown shape
        raise GraphError(f"kernel output without a static shape: {sinfo}") from e


def graph_steps(func) -> list[Step]:
    """Flattens a Relax function into kernel calls and plumbing steps."""
    from tvm import relax
    from tvm.ir.expr import Constant

    steps: list[Step] = []
    for block in func.body.blocks:
        for b in block.bindings:
            if not isinstance(b, relax.VarBinding):
                raise GraphError(f"unsupported binding {type(b).__name__} for {b.var.name}")
            v = b.value
            if isinstance(v, relax.Call) and getattr(v.op, "name", "") == "relax.call_tir":
                if len(v.args) > 2:
                    raise GraphError(f"call_tir with symbolic tir_vars is not supported ({b.var.name})")
                sinfo = v.ty_args[0]
                fields = list(sinfo.fields) if isinstance(sinfo, relax.TupleType) else [sinfo]
                steps.append(
                    Step(
                        b.var,
                        "call_tir",
                        v.args[0].name_hint,
                        list(v.args[1].fields),
                        outs=[_static_shape(s) for s in fields],
                    )
                )
            elif isinstance(v, relax.TupleGetItem):
                steps.append(Step(b.var, "tuple_get", args=[v.tuple_value], index=int(v.index)))
            elif isinstance(v, relax.Tuple):
                steps.append(Step(b.var, "tuple", args=list(v.fields)))
            elif isinstance(v, relax.Var):
                steps.append(Step(b.var, "alias", args=[v]))
            elif isinstance(v, Constant):
                steps.append(Step(b.var, "const", value=const_array(v)))
            else:
                op = getattr(getattr(v, "op", None), "name", type(v).__name__)
                raise GraphError(
                    f"'{b.var.name}' = {op}: only call_tir, tuples and constants can run "
                    f"kernel by kernel (legalize high-level Relax ops first)"
                )
    return steps


def const_array(const) -> np.ndarray:
    value = const.data if hasattr(const, "data") else const.value
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value, dtype=str(const.ty.dtype))


def sentinel_for(dtype: str, variant: int = 0):
    if np.issubdtype(np.dtype(dtype), np.floating):
        return np.nan
    info = np.iinfo(np.dtype(dtype))
    return info.min + 3 if variant == 0 else info.max - 3


class KernelRunner:
    """Runs a Relax function kernel by kernel on `device`, looking kernels up in `lib`."""

    def __init__(self, module, lib, device, to_device, check_inputs: bool = True):
        self.module = module
        self.lib = lib
        self.device = device
        self.to_device = to_device  # np.ndarray -> device tensor
        self.check_inputs = check_inputs
        self._steps: dict[str, list[Step]] = {}

    def steps(self, fname: str) -> list[Step]:
        if fname not in self._steps:
            self._steps[fname] = graph_steps(self.module[fname])
        return self._steps[fname]

    def _value(self, env, expr):
        from tvm import relax
        from tvm.ir.expr import Constant

        if isinstance(expr, Constant):
            return self.to_device(const_array(expr))
        if isinstance(expr, relax.Tuple):
            return tuple(self._value(env, f) for f in expr.fields)
        try:
            return env[expr]
        except KeyError as e:
            raise GraphError(f"unbound variable {expr}") from e

    def run(self, fname: str, args: list, variant: int = 0, calls: list | None = None) -> list:
        """Runs function `fname`; returns its result as a flat list of device tensors.
        With `calls`, appends (kernel name, arguments, number of outputs: the last arguments) of every
        kernel call, for profiling."""
        import tvm

        func = self.module[fname]
        if len(func.params) != len(args):
            raise GraphError(f"{fname} takes {len(func.params)} arguments, got {len(args)}")
        env = dict(zip(func.params, args, strict=True))
        for st in self.steps(fname):
            if st.kind == "call_tir":
                ins = [self._value(env, a) for a in st.args]
                outs = []
                for shape, dtype in st.outs:
                    host = np.full(shape, sentinel_for(dtype, variant), dtype=dtype)
                    outs.append(self.to_device(host))
                before = [t.numpy().copy() for t in ins] if self.check_inputs else None
                try:
                    kernel = self.lib[st.func]
                except Exception as e:
                    raise GraphError(f"kernel {st.func} is missing from the build") from e
                kernel(*ins, *outs)
                if calls is not None:
                    calls.append((st.func, [*ins, *outs], len(outs)))
                if before is not None:
                    for i, (t, b) in enumerate(zip(ins, before, strict=True)):
                        if not np.array_equal(t.numpy(), b, equal_nan=True):
                            raise KernelFault(
                                "input_mutated", f"kernel {st.func} changed its input #{i} ({st.args[i]})"
                            )
                env[st.var] = outs[0] if len(outs) == 1 else tuple(outs)
            elif st.kind == "tuple_get":
                env[st.var] = self._value(env, st.args[0])[st.index]
            elif st.kind == "tuple":
                env[st.var] = tuple(self._value(env, a) for a in st.args)
            elif st.kind == "alias":
                env[st.var] = self._value(env, st.args[0])
            else:
                env[st.var] = self.to_device(st.value)
        result = self._value(env, func.body.body)
        flat = list(result) if isinstance(result, tuple) else [result]
        if any(not isinstance(t, tvm.runtime.Tensor) for t in flat):
            raise GraphError(f"{fname} returns a nested tuple")
        return flat


def constant_tensors(func) -> list:
    """The tensor of every distinct Relax constant in `func`: the storage its built executable uses itself
    (tvm.compile keeps the IR's tensors), so a kernel that writes into a constant changes what every later
    call reads."""
    import tvm
    import tvm_ffi
    from tvm.ir.expr import Constant

    found: list = []

    def visit(node):
        if isinstance(node, Constant):  # a tensor constant (its IntImm and FloatImm kin hold numbers)
            value = node.data if hasattr(node, "data") else getattr(node, "value", None)
            if isinstance(value, tvm.runtime.Tensor) and not any(value.same_as(f) for f in found):
                found.append(value)
        return tvm_ffi.WalkResult.ADVANCE

    tvm_ffi.structural_walk(func, visit, order="pre")
    return found
