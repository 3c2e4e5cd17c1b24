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

Two more rewrites make the epilogue shorter where they are exact. A scale that is a power of two, after a
convolution, matmul or multiply by weights (and a bias add, a ReLU, transposes), moves into those weights
(`fold_scale`): the kernel no longer divides. After a ReLU, a uint8 with zero point 0 (int8 with -128) clamps
to 255 by the narrowing itself (`_saturated`: unsigned saturation, AVX-512's vpmovusdb) instead of a float
min before the conversion. dscnn_kws_int8's depthwise convolution: 9 FMAs per output vector and add, max,
multiply, min, conversion, narrowing (7 micro-ops on Intel's two vector ports with AVX-512) before; add,
max, conversion, saturating narrowing (5) after, 53-56% -> 58% of the peak side by side (25 rounds, this
session's Xeon; with BiasInit, ir/bias_init.py, 65%).

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
    out (the caller knows it is the identity). A scale of exactly 1 (`fold_scale` moved it into the
    producer) divides by nothing; with `nonneg`, a zero point of 0 and uint8, the upper clamp is the
    conversion's: see `_saturated`."""
    from tvm import te, tirx

    qmin, qmax = _bounds(out_dtype)
    i32, f32 = "int32", "float32"

    def param(p, idx):
        if not isinstance(p, te.Tensor):
            return p
        if all(int(d) == 1 for d in p.shape):
            return p[(0,) * len(p.shape)]
        return p[idx[axis]]

    unit = isinstance(scale, tirx.FloatImm) and float(scale.value) == 1.0
    saturated = nonneg and isinstance(zp, tirx.IntImm) and qmax - int(zp.value) == 255

    def compute(*idx):
        v = data(*idx) if unit else data(*idx) / param(scale, idx)
        if saturated:
            u = _saturated(tirx.call_llvm_pure_intrin(i32, "llvm.lrint", v))
            return u if qmin == 0 else tirx.Cast(out_dtype, tirx.Cast(i32, u) + zp)
        z = tirx.Cast(i32, param(zp, idx))
        v = tirx.min(v, tirx.Cast(f32, tirx.const(qmax, i32) - z))
        if not nonneg:
            v = tirx.max(v, tirx.Cast(f32, tirx.const(qmin, i32) - z))
        return tirx.Cast(out_dtype, tirx.call_llvm_pure_intrin(i32, "llvm.lrint", v) + z)

    return te.compute(data.shape, compute, name="quantized")


def _saturated(r):
    """uint8 of the rounded int32 `r` of a value v >= 0: min(r, 255) compared as unsigned, which LLVM
    narrows in one saturating instruction (AVX-512's vpmovusdb; packs with AVX2) instead of a float clamp
    before the conversion and a truncating narrowing after it. The same byte as min(v, 255) rounded: v in
    [0, 2^31) rounds to r >= 0 and min(r, 255) is the clamp after rounding (equal to before it, see the
    module docstring); for v >= 2^31 and +inf x86's conversion returns its "integer indefinite" 0x80000000,
    2^31 unsigned, which saturates to 255 as the clamp would (LLVM leaves an out-of-range llvm.lrint
    unspecified: the pass is offered on x86 only, and the test feeds +inf and 3e38)."""
    from tvm import tirx

    u32 = "uint32"
    return tirx.Cast("uint8", tirx.min(tirx.Cast(u32, r), tirx.const(255, u32)))


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


LINEAR_OPS = ("relax.nn.conv1d", "relax.nn.conv2d", "relax.matmul", "relax.multiply")
# between the add and the quantize: commute with a positive power-of-two scale (a ReLU) or move values only
UNARY_OPS = ("relax.nn.relu", "relax.permute_dims", "relax.reshape")


def fold_scale(rw, data, scale):
    """The requantization's division moved into its producer, where that is exact: `data` the output of
    u(add(lin(x, W), b)) or u(lin(x, W)), u any sequence of ReLUs, transposes and reshapes, lin a
    convolution, matmul or multiply whose W (and b) are weights or constants (`rw.weights`:
    LiftTransformParams computes W / scale once, at load), each intermediate used only here, and `scale`
    (numpy) one positive power of two: then x / scale through the chain is x * 2^-k through it, and scaling
    by a power of two commutes with every rounding of the sums and products and with the ReLU -- the same
    floats bit for bit, short of an underflow to subnormals the weights do not reach. Emits the rewritten
    chain through `rw.builder_` and returns its output (None where it does not apply). The kernel's epilogue
    loses its multiply (see the module docstring)."""
    import numpy as np
    from tvm import relax
    from tvm.ir.expr import Constant
    from tvm.relax import op as R

    from .int8_dot import _op, known_value, uses_in_function, weight_only

    s = np.asarray(scale, "float32").reshape(-1)
    if s.size == 0 or not (s == s[0]).all() or not s[0] > 0 or np.frexp(s[0])[0] != 0.5:
        return None
    inv = relax.const(np.float32(1.0) / s[0])  # exact: a power of two
    uses = uses_in_function(rw)

    def bound(var, ops):  # the value of `var` (through aliases) when it is one of `ops`, used only here
        value = rw.var2val.get(var)
        while isinstance(value, relax.Var) and isinstance(var, relax.DataflowVar) and uses.get(var) == 1:
            var, value = value, rw.var2val.get(value)
        ok = isinstance(var, relax.DataflowVar) and uses.get(var) == 1 and _op(value) in ops
        return value if ok and str(value.ty.dtype) == "float32" else None

    def weight(e) -> bool:  # a weight's or constant's value (a constant another pass bound to a variable)
        if str(getattr(e.ty, "dtype", "")) != "float32":
            return False
        return isinstance(rw.var2val.get(e), Constant) or weight_only(rw.var2val, rw.weights, e)

    chain, var = [], data
    while (value := bound(var, UNARY_OPS)) is not None:  # a ReLU, the layout's transposes and reshapes
        chain.append(value)
        var = value.args[0]
    value = bound(var, ("relax.add",))
    if value is not None:
        chain.append(value)
        var = next((a for a in value.args if not weight(a)), None)
    lin = bound(var, LINEAR_OPS)
    if lin is None or len(lin.args) != 2 or weight(lin.args[0]) or not weight(lin.args[1]):
        return None
    if chain and _op(chain[-1]) == "relax.add" and sum(weight(a) for a in chain[-1].args) != 1:
        return None
    emit = rw.builder_.emit

    def scaled(w):  # w / scale: computed now where w is a constant, else at load (a weight)
        c = w if isinstance(w, Constant) else rw.var2val.get(w)
        if isinstance(c, Constant):
            return emit(relax.const(known_value({}, c) * known_value({}, inv)))
        return emit(R.multiply(w, inv))

    out = emit(relax.Call(lin.op, [lin.args[0], scaled(lin.args[1])], lin.attrs))
    for value in reversed(chain):
        if _op(value) == "relax.add":
            out = emit(R.add(out, scaled(next(a for a in value.args if weight(a)))))
        else:
            out = emit(relax.Call(value.op, [out, *value.args[1:]], value.attrs))
    return out


def quantize_rint_pass():
    """The graph pass (name "QuantizeRint"): every Relax `quantize` to int8 or uint8 of float32 data becomes
    a call of the elementwise kernel `quantize_rint_te` builds (in every Relax function)."""
    import numpy as np
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
                nonneg_data = _nonneg(self.var2val, data)
                if s is not None and z is not None:
                    folded = fold_scale(self, data, s)
                    if folded is not None:  # the producer now computes x / scale: nothing left to divide
                        data, s = folded, np.ones_like(s)
                        scale = relax.const(np.float32(1.0))
                qmin = _bounds(out_dtype)[0]
                nonneg = (
                    s is not None
                    and bool((s > 0).all())
                    and z is not None
                    and bool((z >= qmin).all())
                    and nonneg_data
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
