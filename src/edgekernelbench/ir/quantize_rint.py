"""Quantization by one rounding conversion: the graph pass "QuantizeRint" (`Decisions.graph["passes"]`).

Relax lowers `quantize(x, scale, zp)` to 8 bits as ONNX's QuantizeLinear defines it,

    q = cast(max(min(round(x / scale) + zp, qmax), qmin))       all in float32

which LLVM emits per vector as a rounding (vrndscaleps), an add, two clamps and a truncating conversion
(vcvttps2dq) before the narrowing store: in dscnn_kws_int8's depthwise convolution (9 multiply-adds per
output) that epilogue took about a fifth of the kernel. This pass replaces every such `quantize` with an
elementwise kernel computing

    q = cast(lrint(max(min(x / scale, qmax - zp), qmin - zp)) + zp)

where lrint (LLVM's llvm.lrint) rounds to the nearest integer under the current rounding mode -- the mode
`round` (nearbyint) rounds in -- and converts in one instruction (vcvtps2dq). It is the same function bit
for bit: rounding is monotone and leaves integers as they are, so clamping to the integer bounds
qmin - zp, qmax - zp before rounding equals clamping after it; the clamped value is an integer of at most
8 bits, so adding zp in int32 is exact, and the result is already in [qmin, qmax] (the clamp before the
conversion also keeps infinities and huge values from overflowing int32: +inf still gives qmax). When the
input is known not to be negative (a ReLU's output, or a clamp's with a lower bound of at least 0), the
scale a positive constant and zp >= qmin, the lower clamp is the identity and is left out. A scale or zero
point that is a weight of main whose value the module carries (the ONNX importer's "params") is written
into the kernel as a constant like one the graph holds: the kernel divides by an immediate, a zero zp
folds away, and the ReLU's lower clamp can go (uint8_ds_block_s2_vww's depthwise convolution: 48% -> 51%
of the peak side by side, 25 rounds). The division stays a division: x * (1 / scale) rounds differently
next to ties unless 1 / scale is exact, and ONNX Runtime divides. The dequantize
and the kernel it is fused into are unchanged; FuseOps fuses the new kernel as it fused the quantize.

dscnn_kws_int8's depthwise convolution with its ReLU and quantize epilogue, side by side with the peak
FLOP/s micro-kernel: 55% of the peak as lowered by Relax, 61-62% with the epilogue this pass writes, 64%
with no quantize at all (benchmarks/peak_fraction.py's protocol, 41 rounds). The builtin proposer offers
the pass for quantized models on x86 CPU targets (search/graph.py): llvm.lrint is an LLVM intrinsic, and
x86 converts vectors of it in one instruction (AVX2 and AVX-512).
"""

from __future__ import annotations

NONNEG_OPS = ("relax.nn.relu",)


def quantize_rint_te(data, scale, zp, axis: int, out_dtype: str, nonneg: bool = False):
    """The te.compute of the module docstring's quantize. `scale` and `zp` are scalar constants (FloatImm,
    IntImm) or tensors: of one element, or per channel along `axis`. `nonneg`: the lower clamp is left
    out (the caller knows it is the identity)."""
    from tvm import te, tirx

    qmin, qmax = _bounds(out_dtype)
    i32, f32 = "int32", "float32"

    def param(p, idx):
        if not isinstance(p, te.Tensor):
            return p
        if all(int(d) == 1 for d in p.shape):
            return p[(0,) * len(p.shape)]
        return p[idx[axis]]

    def compute(*idx):
        z = tirx.Cast(i32, param(zp, idx))
        v = tirx.min(data(*idx) / param(scale, idx), tirx.Cast(f32, tirx.const(qmax, i32) - z))
        if not nonneg:
            v = tirx.max(v, tirx.Cast(f32, tirx.const(qmin, i32) - z))
        return tirx.Cast(out_dtype, tirx.call_llvm_pure_intrin(i32, "llvm.lrint", v) + z)

    return te.compute(data.shape, compute, name="quantized")


def target_is_x86(target) -> bool:
    """Whether an LLVM target (a tvm Target or its dict) is an x86 CPU (its vectors of llvm.lrint convert in
    one instruction from SSE2 on)."""
    from .int8_dot import llvm_target_has

    return llvm_target_has(target, "sse2")


def _bounds(out_dtype: str) -> tuple[int, int]:
    """(qmin, qmax): the range of the 8-bit integer type."""
    import numpy as np

    info = np.iinfo(out_dtype)
    return int(info.min), int(info.max)


def _nonneg(var2val, expr, depth: int = 4) -> bool:
    """Whether the Relax value `expr` cannot be negative: a ReLU's output, a clip's or maximum's with a
    constant lower bound >= 0, a minimum of such values, or a reshape-like op of one."""
    from .int8_dot import _op, _value

    for _ in range(depth):
        value = _value(var2val, expr)
        op = _op(value)
        if op in NONNEG_OPS:
            return True
        if op == "relax.clip":
            low = _prim_value(value.args[1])
            return low is not None and low >= 0
        if op == "relax.maximum":
            return any(_const_nonneg(var2val, a) for a in value.args)
        if op == "relax.minimum":
            return all(_nonneg(var2val, a, depth - 1) or _const_nonneg(var2val, a) for a in value.args)
        if op in ("relax.reshape", "relax.permute_dims", "relax.squeeze", "relax.expand_dims"):
            expr = value.args[0]
            continue
        return False
    return False


def _const_nonneg(var2val, expr) -> bool:
    from .int8_dot import _value, known_value

    c = known_value({}, _value(var2val, expr))
    return c is not None and c.size > 0 and bool(c.min() >= 0)


def _prim_value(expr):
    """The number a Relax PrimValue holds (clip's bounds), or None."""
    from tvm import relax, tirx

    if isinstance(expr, relax.PrimValue) and isinstance(expr.value, (tirx.IntImm, tirx.FloatImm)):
        return expr.value.value
    return None


def quantize_rint_pass():
    """The graph pass (name "QuantizeRint"): every Relax `quantize` to int8 or uint8 of float32 data becomes
    a call of the elementwise kernel `quantize_rint_te` builds (in every Relax function)."""
    import tvm
    from tvm import relax
    from tvm.relax.transform.legalize_ops.common import _try_convert_to_scalar_const

    from .int8_dot import _each_function, known_value

    def make(mod):
        @relax.expr_functor.mutator
        class Rewriter(relax.PyExprMutator):
            var2val: dict = {}
            weights: set = set()
            values: dict = {}  # weight parameter -> its tensor, where the module carries them

            def visit_call_(self, call):
                call = super().visit_call_(call)
                if getattr(call.op, "name", "") != "relax.quantize":
                    return call
                data, scale, zp = call.args
                out_dtype = str(call.attrs.out_dtype)
                if out_dtype not in ("int8", "uint8") or str(getattr(data.ty, "dtype", "")) != "float32":
                    return call
                # a scale or zero point whose value the module carries is written into the kernel as a
                # constant (one element: an immediate), so the bounds fold and the lower clamp can go
                s, z = known_value(self.values, scale), known_value(self.values, zp)
                if s is not None:
                    scale, s = relax.const(s, str(scale.ty.dtype)), s.reshape(-1)
                if z is not None:
                    zp, z = relax.const(z, str(zp.ty.dtype)), z.reshape(-1)
                qmin = _bounds(out_dtype)[0]
                nonneg = (
                    s is not None
                    and bool((s > 0).all())
                    and z is not None
                    and bool((z >= qmin).all())
                    and _nonneg(self.var2val, data)
                )
                return self.builder_.call_te(
                    quantize_rint_te,
                    data,
                    _try_convert_to_scalar_const(scale),
                    _try_convert_to_scalar_const(zp),
                    int(call.attrs.axis),
                    out_dtype,
                    nonneg,
                    primfunc_name_hint="quantize_rint",
                )

        return Rewriter(mod)

    @tvm.ir.transform.module_pass(opt_level=0, name="QuantizeRint")
    def transform(mod, _ctx):
        return _each_function(mod, make, weights=True)

    return transform
