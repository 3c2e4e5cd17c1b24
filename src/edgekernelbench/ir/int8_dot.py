"""Integer GEMMs as u8 x s8 dot products on packed weights: a graph pass and the x86 VNNI intrinsic.

ONNX's MatMulInteger imports into Relax as a matmul of two int32 tensors, each an 8-bit tensor cast to
int32 minus its zero point. Its kernel then multiplies int32 lanes (16 products per AVX-512 instruction);
VNNI's vpdpbusd multiplies 64 unsigned-by-signed byte pairs and adds them four by four into 16 int32
lanes. The graph pass (`Int8DotProduct`) rewrites such a matmul, when the right operand is a weight, into

    out[m, n] = sum_k a'[m, k] * b'[k, n] + bias[n] - zb' * rowsum(a')[m]

with a' = a as uint8 (int8 activations shifted by 128; when they are a quantize's output, quantized to
uint8 with the zero point shifted instead: one clamp and cast fewer in that kernel's epilogue,
dscnn_kws_int8's depthwise 1.78 -> 1.59 us), b' = b as int8 (uint8 weights shifted by -128), the zero
points za', zb' shifted the same way, and bias[n] = K za' zb' - za' sum_k b'[k, n]. Every step is
int32 ring arithmetic, so the result equals the original graph's bit for bit (overflow included). b' is
packed as [N/16, K/4, 16, 4] (16 output columns by 4 consecutive k: one 64-byte vector per vpdpbusd),
and it and the bias depend on weights only: LiftTransformParams moves them into main_transform_params,
computed once at load. Where zb' is known to be all 0 (symmetric int8 weights, or uint8 ones centred on 128:
a constant, or a weight whose value the module carries) the term and the row sums are dropped: per row, K
byte adds as many as the GEMM's vpdpbusd instructions at N = 64, which LLVM leaves scalar at small K. The
kernel (`dot_func`: blocks `dot_u8s8`, `dot_u8s8_rowsum`) is plain TIR that
any target builds; the rule that tensorizes it with `VNNI_INTRIN` (search/rules/dot.py) is offered only on
targets with VNNI, and so is the graph pass (search/graph.graph_alternatives).
"""

from __future__ import annotations

import functools

DOT_BLOCK = "dot_u8s8"  # the block of the dot products: [m, n/16, 16] x reduction [k/4, 4]
ROWSUM_BLOCK = "dot_u8s8_rowsum"  # the row sums of a (for the weights' zero points)
LANES, GROUP = 16, 4  # int32 lanes of one vpdpbusd, bytes summed into each lane
VNNI_INTRIN = "ekb_vnni_u8s8_global"
VNNI_INTRIN_LOCAL = "ekb_vnni_u8s8_local"  # accumulators in a "local" buffer: decisions stored before
VNNI_INTRINS = {"global": VNNI_INTRIN, "local": VNNI_INTRIN_LOCAL}  # accumulators' scope -> intrinsic
VNNI_FEATURE = "avx512vnni"
VPDPBUSD = "llvm.x86.avx512.vpdpbusd.512"  # the LLVM intrinsic (this LLVM: <16 x i32>, <64 x i8>, <64 x i8>)


@functools.cache
def register_intrinsics() -> None:
    """Registers the VNNI tensor intrinsics with TVM (once per process): 16 int32 accumulators (the register
    tile) += 4 uint8 (broadcast) x [16, 4] int8, as one llvm.x86.avx512.vpdpbusd.512 (the signature of TVM
    0.27's LLVM: the byte operands are <64 x i8>). TVM's own dot_16x4_vnni passes <16 x i32>, which this
    LLVM rejects. `VNNI_INTRIN` takes the accumulators in a "global" buffer (what the rules write: on a CPU a
    small global allocation is a stack array LLVM keeps in registers, a "local" one costs a workspace
    allocation per call); `VNNI_INTRIN_LOCAL` in a "local" one, for decisions stored before."""
    from tvm import s_tir

    for scope, name in VNNI_INTRINS.items():
        desc, impl = _vnni_funcs(scope)
        s_tir.TensorIntrin.register(name, desc, impl, override=True)


def _vnni_funcs(scope: str):
    """The (description, implementation) PrimFuncs of the VNNI intrinsic with accumulators in `scope`."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def desc(
        A: T.Buffer((4,), "uint8", offset_factor=1),
        B: T.Buffer((16, 4), "int8", offset_factor=1),
        C: T.Buffer((16,), "int32", offset_factor=1, scope=scope),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:4], B[0:16, 0:4])
            T.writes(C[0:16])
            for i in T.serial(0, 16):
                for k in T.serial(0, 4):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        C[vi] = C[vi] + T.cast(A[vk], "int32") * T.cast(B[vi, vk], "int32")

    @T.prim_func(s_tir=True)
    def impl(
        A: T.Buffer((4,), "uint8", offset_factor=1),
        B: T.Buffer((16, 4), "int8", offset_factor=1),
        C: T.Buffer((16,), "int32", offset_factor=1, scope=scope),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:4], B[0:16, 0:4])
            T.writes(C[0:16])
            a4 = T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")
            C[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id(VPDPBUSD),
                C.vload([0], dtype="int32x16"),
                T.reinterpret(T.broadcast(a4, 16), dtype="int8x64"),
                B.vload([0, 0], dtype="int8x64"),
                dtype="int32x16",
            )

    return desc, impl


def target_has_vnni(target) -> bool:
    """Whether an LLVM target (a tvm Target or its dict) has AVX-512 VNNI."""
    return llvm_target_has(target, VNNI_FEATURE)


def llvm_target_has(target, feature: str) -> bool:
    """Whether a target (a tvm Target or its dict) is an LLVM one whose CPU has the LLVM `feature`."""
    import tvm
    from tvm.target import codegen

    t = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    if t.kind.name != "llvm":
        return False
    try:
        return bool(codegen.target_has_features([feature], t))
    except Exception:  # noqa: BLE001 -- an LLVM that does not know the CPU (or the feature): no
        return False


def dot_func(rows: tuple[int, ...], k_: int, n_: int, zero_point: bool = True):
    """The kernel: a [*rows, K] uint8, bp [N/16, K/4, 16, 4] int8, bias [N] int32, zb [N] int32 (the weights'
    zero point per column) -> [*rows, N] int32 (`rows`: a matmul's rows, a convolution's N, H, W -- kept
    as they are, so the graph around the kernel needs no reshape and its consumers index it directly).
    Block `dot_u8s8_rowsum` sums each row of a; block `dot_u8s8` starts each output at its bias and
    zero-point correction (its init) and adds the dot products, 16 columns x 4 k per inner step. Opaque
    to FuseOps: the requantization that follows stays a kernel of its own. Without `zero_point` (the
    weights' zero points all 0 after the shift: symmetric int8 weights, or uint8 ones centred on 128) the
    kernel has no zb and no row sums: each output starts at its bias."""
    from tvm.script import from_source
    from tvm.script import tirx as T

    r = [f"r{i}" for i in range(len(rows))]
    v = [f"v{i}" for i in range(len(rows))]
    shape = ", ".join(str(x) for x in rows)
    lv, vv = ", ".join(r), ", ".join(v)
    no_, ko_ = n_ // LANES, k_ // GROUP
    n_idx = f"vno * {LANES} + vni"
    zb_param, init = "", f"bias[{n_idx}]"
    rowsums = ""
    if zero_point:
        zb_param = f'zb: T.Buffer(({n_},), "int32"),'
        init = f"bias[{n_idx}] - zb[{n_idx}] * rowsum[{vv}]"
        rowsums = f"""
    rowsum = T.sblock_alloc_buffer(({shape},), "int32")
    for {lv}, k in T.grid({shape}, {k_}):
        with T.sblock("{ROWSUM_BLOCK}"):
            {vv}, vk = T.axis.remap("{"S" * len(rows)}R", [{lv}, k])
            with T.init():
                rowsum[{vv}] = 0
            rowsum[{vv}] = rowsum[{vv}] + T.Cast("int32", A[{vv}, vk])"""
    src = f"""
@T.prim_func(private=True, s_tir=True)
def {DOT_BLOCK}(
    A: T.Buffer(({shape}, {k_}), "uint8"),
    Bp: T.Buffer(({no_}, {ko_}, {LANES}, {GROUP}), "int8"),
    bias: T.Buffer(({n_},), "int32"),
    {zb_param}
    D: T.Buffer(({shape}, {n_}), "int32"),
):
    T.func_attr({{"tirx.noalias": True, "op_pattern": 8}}){rowsums}
    for {lv}, no, ni, ko, ki in T.grid({shape}, {no_}, {LANES}, {ko_}, {GROUP}):
        with T.sblock("{DOT_BLOCK}"):
            {vv}, vno, vni, vko, vki = T.axis.remap("{"S" * len(rows)}SSRR", [{lv}, no, ni, ko, ki])
            # the update's reads (tensorize matches them); the init reads the bias and row sums too
            T.reads(A[{vv}, vko * {GROUP} + vki], Bp[vno, vko, vni, vki])
            T.writes(D[{vv}, {n_idx}])
            with T.init():
                D[{vv}, {n_idx}] = {init}
            D[{vv}, {n_idx}] = D[{vv}, {n_idx}] + T.Cast("int32", A[{vv}, vko * {GROUP} + vki]) * T.Cast(
                "int32", Bp[vno, vko, vni, vki]
            )
"""
    return from_source(src, extra_vars={"T": T})


def _value(var2val, expr):
    from tvm import relax

    return var2val.get(expr, expr) if isinstance(expr, relax.Var) else expr


def _op(expr) -> str:
    return getattr(getattr(expr, "op", None), "name", "")


_ARITH = {"relax.add": "add", "relax.subtract": "subtract", "relax.multiply": "multiply"}


def fold_constants(var2val, expr, consts: dict | None = None):
    """`expr` (unnormalized, as `relax.op` builds it) with each subexpression whose operands are all
    constants (Relax constants, or variables bound to one: `var2val`, `consts`) computed now, in NumPy: the
    zero points' and scales' arithmetic this pass writes (a shift by 128, za' zb' K, sx sw). Relax's
    FoldConstant would compile and run a kernel for each after legalization (dscnn_kws_int8: 1.1 s in every
    build of a candidate with this pass, most of the builder's time). The values are the ones those kernels
    compute: integer add / subtract / multiply wrap in the operands' dtype as TVM's do, float32 ones are
    one IEEE operation each, a cast from an integer converts as LLVM's does (truncation between integers,
    round to nearest into a float), and broadcast_to copies; anything else is left to FoldConstant."""
    import numpy as np
    from tvm import relax
    from tvm.ir.expr import Constant

    def value(e):
        if isinstance(e, relax.Var):
            e = consts[e] if consts and e in consts else _value(var2val, e)
        return e.value.numpy() if isinstance(e, Constant) else None

    def fold(e):
        op = _op(e)
        if op not in _ARITH and op not in ("relax.astype", "relax.broadcast_to"):
            return e
        args = [fold(a) if isinstance(a, relax.Call) else a for a in e.args]
        vals = [value(a) for a in args[: 1 if op == "relax.broadcast_to" else len(args)]]
        if any(v is None for v in vals):
            same = all(a is b for a, b in zip(args, e.args, strict=True))
            return e if same else relax.Call(e.op, args, e.attrs, e.ty_args)
        with np.errstate(over="ignore"):
            if op in _ARITH:
                if vals[0].dtype != vals[1].dtype or vals[0].dtype.kind not in "iuf":
                    return e
                out = getattr(np, _ARITH[op])(vals[0], vals[1]).astype(vals[0].dtype)
            elif op == "relax.astype":
                if vals[0].dtype.kind not in "iu":
                    return e
                out = vals[0].astype(str(e.attrs.dtype))
            else:
                out = np.broadcast_to(vals[0], [int(d) for d in args[1].values]).copy()
        return relax.const(np.array(out, copy=True))

    return fold(expr)


def _match_zp_cast(var2val, expr):
    """(x, zp) when `expr` is astype(x, int32) - astype(zp, int32) with x 8-bit and zp a scalar."""
    sub = _value(var2val, expr)
    if _op(sub) != "relax.subtract":
        return None
    parts = []
    for arg in sub.args:
        cast = _value(var2val, arg)
        if _op(cast) != "relax.astype":
            return None
        src = cast.args[0]
        if str(src.ty.dtype) not in ("uint8", "int8") or str(cast.ty.dtype) != "int32":
            return None
        parts.append(src)
    x, zp = parts
    if len(zp.ty.shape) != 0:  # per-channel zero points: not this rewrite
        return None
    return x, zp


def _match_dequantize(var2val, expr, per_channel: int | None):
    """(x, scale, zero point) when `expr` is dequantize(x) of an 8-bit x to float32, its scale and zero point
    scalars or (when `per_channel` is the axis) vectors along that axis."""
    deq = _value(var2val, expr)
    if _op(deq) != "relax.dequantize" or str(deq.ty.dtype) != "float32":
        return None
    x, scale, zp = deq.args
    if str(x.ty.dtype) not in ("uint8", "int8"):
        return None
    for t in (scale, zp):
        if len(t.ty.shape) != 0 and (per_channel is None or int(deq.attrs.axis) != per_channel):
            return None
    return x, scale, zp


NCHW, NHWC = ("NCHW", "OIHW", "NCHW"), ("NHWC", "HWIO", "NHWC")


def _pointwise(call) -> bool:
    """conv2d 1x1, stride 1, no padding, no groups, NCHW / OIHW or NHWC / HWIO: a GEMM over the pixels."""
    a = call.attrs
    w = [int(d) for d in call.args[1].ty.shape]
    layout = (a.data_layout, a.kernel_layout, a.out_layout)
    return (
        len(w) == 4
        and (w[2:] if layout == NCHW else w[:2]) == [1, 1]
        and [int(x) for x in a.strides] == [1, 1]
        and [int(x) for x in a.padding] == [0, 0, 0, 0]
        and [int(x) for x in a.dilation] == [1, 1]
        and int(a.groups) == 1
        and layout in (NCHW, NHWC)
    )


def _through_permute(var2val, expr, axes: list[int]):
    """The tensor `expr` permutes with `axes` (ConvertLayout's transposes into NHWC / HWIO), else None."""
    p = _value(var2val, expr)
    if _op(p) != "relax.permute_dims" or [int(x) for x in p.attrs.axes] != axes:
        return None
    return p.args[0]


def _rewriter(mod):
    """A Relax mutator over `mod` that rewrites, in the function it visits, each MatMulInteger-shaped matmul
    and each dense layer and pointwise convolution of dequantized 8-bit tensors (a QDQ model's) whose right
    operand is a weight (`weights`, set before each function)."""
    from tvm import relax
    from tvm.relax import op as R

    i32 = lambda v: R.astype(v, "int32")  # noqa: E731
    c = lambda v: relax.const(v, "int32")  # noqa: E731
    from tvm.ir.expr import Constant

    @relax.expr_functor.mutator
    class Rewriter(relax.PyExprMutator):
        weights: set = set()
        values: dict = {}  # weight parameter -> its tensor (main's "params"), where the module carries them
        var2val: dict = {}
        consts: dict = {}  # the variables `emit` bound to a constant (one dict per rewriter)

        def weight_only(self, expr) -> bool:
            return weight_only(self.var2val, self.weights, expr)

        def emit(self, expr):
            """`expr` bound in the function, its constant parts computed now (`fold_constants`). A constant
            is bound to a variable too: legalization then passes it to the kernel that reads it as a
            parameter, as it passed FoldConstant's result, so the kernels stay the workloads they were."""
            folded = fold_constants(self.var2val, expr, self.consts)
            var = self.builder_.emit(folded)
            if isinstance(folded, Constant):
                self.consts[var] = folded
            return var

        def known(self, expr):
            return known_value(self.values, expr)

        def visit_call_(self, call):
            op = _op(call)
            out = None
            if op == "relax.matmul" and str(call.ty.dtype) == "int32":
                out = self._matmul(call)
            elif op == "relax.matmul" and str(call.ty.dtype) == "float32":
                out = self._qdq_matmul(call)
            elif op == "relax.nn.conv2d" and str(call.ty.dtype) == "float32" and _pointwise(call):
                out = self._conv(call)
            return super().visit_call_(call) if out is None else out

        def _matmul(self, call):
            lhs, rhs = (_match_zp_cast(self.var2val, a) for a in call.args)
            if lhs is None or rhs is None:
                return None
            (a, za), (b, zb) = lhs, rhs
            if not self.weight_only(b) or len(b.ty.shape) != 2:
                return None
            if [int(x) for x in a.ty.shape][:-1] != [int(x) for x in call.ty.shape][:-1]:
                return None  # a batch broadcast against the weight's: not a plain GEMM
            return self._dot(a, za, b, zb)

        def _qdq_matmul(self, call):
            """A QDQ model's dense layer: dequantize(x) @ dequantize(w) (w [K, N], per-column scales) or
            @ permute(dequantize(w [N, K], per-row scales)), its output rescaled in float."""
            x = _match_dequantize(self.var2val, call.args[0], None)
            w_arg, axis = _through_permute(self.var2val, call.args[1], [1, 0]), 0
            if w_arg is None:
                w_arg, axis = call.args[1], 1
            w = _match_dequantize(self.var2val, w_arg, axis)
            if x is None or w is None or not self.weight_only(w[0]) or len(w[0].ty.shape) != 2:
                return None
            (x, sx, zx), (q, sw, zw) = x, w
            b = self.emit(R.permute_dims(q, [1, 0])) if axis == 0 else q  # [K, N]
            return self._rescaled(self._dot(x, zx, b, zw), sx, sw)

        def _rescaled(self, d, sx, sw):
            """The float output of a dequantized GEMM from its exact int32 sums: d * (sx * sw)."""
            if d is None:
                return None
            scale = self.emit(R.multiply(sx, sw))  # per output channel (or one)
            return self.emit(R.multiply(R.astype(d, "float32"), scale))

        def _conv(self, call):
            x_arg, w_arg = call.args
            nhwc = call.attrs.data_layout == "NHWC"
            if nhwc:  # channels last after ConvertLayout: the dequantized NCHW / OIHW tensors, transposed
                x_arg = _through_permute(self.var2val, x_arg, [0, 2, 3, 1])
                w_arg = _through_permute(self.var2val, w_arg, [2, 3, 1, 0])
                if x_arg is None or w_arg is None:
                    return None
            x = _match_dequantize(self.var2val, x_arg, None)
            w = _match_dequantize(self.var2val, w_arg, 0)
            if x is None or w is None or not self.weight_only(w[0]):
                return None
            (x, sx, zx), (q, sw, zw) = x, w
            cin, cout = int(x.ty.shape[1]), int(q.ty.shape[0])
            if str(x.ty.dtype) == "int8":  # shifted before the transpose, where a quantize may be seen
                x, zx = self.emit(self._as_uint8(x)), R.add(i32(zx), c(128))
            # [N, H, W, Cin]: each pixel's channels contiguous (channels last: cancels with the graph's own)
            pixels = self.emit(R.permute_dims(x, [0, 2, 3, 1]))
            b = self.emit(R.permute_dims(R.reshape(q, (cout, cin)), [1, 0]))  # [Cin, Cout]
            y = self._rescaled(self._dot(pixels, zx, b, zw), sx, sw)  # [N, H, W, Cout]
            if y is None:
                return None
            return y if nhwc else R.permute_dims(y, [0, 3, 1, 2])

        def _as_uint8(self, a):
            """int8 activations shifted by 128 into uint8. When they are a quantize's output, quantized to
            uint8 straight away with the zero point shifted too: clamp(round(x / s) + zp, -128, 127) + 128 is
            clamp(round(x / s) + zp + 128, 0, 255), integers all along, one clamp and one cast fewer in the
            epilogue of the kernel that quantizes (the int8 values, if used elsewhere, are still made)."""
            q = _value(self.var2val, a)
            if _op(q) == "relax.quantize" and str(q.attrs.out_dtype) == "int8":
                known = self.known(q.args[2])
                zp = (
                    relax.const((known.astype("int32") + 128).astype("uint8"))
                    if known is not None
                    else R.astype(R.add(i32(q.args[2]), c(128)), "uint8")
                )
                return R.quantize(q.args[0], q.args[1], zp, axis=int(q.attrs.axis), out_dtype="uint8")
            return R.astype(R.add(i32(a), c(128)), "uint8")

        def _dot(self, a, za, b, zb):
            """[*rows, N] int32 = (a - za) @ (b - zb) as the dot_u8s8 kernel (None when K or N do not fit):
            a [*rows, K] 8-bit, b [K, N] 8-bit weight, za scalar, zb scalar or [N]."""
            shape = [int(x) for x in a.ty.shape]
            k_, n_ = (int(x) for x in b.ty.shape)
            if shape[-1] != k_ or k_ % GROUP or n_ % LANES:
                return None
            za2 = i32(za)
            if str(a.ty.dtype) == "int8":
                a = self.emit(self._as_uint8(a))
                za2 = R.add(za2, c(128))
            za2 = self.emit(za2)
            zb2, shift = i32(zb), 0
            if str(b.ty.dtype) == "uint8":
                b = self.emit(R.astype(R.subtract(i32(b), c(128)), "int8"))
                zb2, shift = R.subtract(zb2, c(128)), 128
            zb_value = self.known(zb)
            # the weights' zero points all 0 after the shift: no correction by the row sums of a
            zero_point = zb_value is None or bool((zb_value.astype("int64") - shift).any())
            zb2 = self.emit(R.broadcast_to(zb2, (n_,)))
            packed = self.emit(
                R.permute_dims(R.reshape(b, (k_ // GROUP, GROUP, n_ // LANES, LANES)), [2, 0, 3, 1])
            )
            colsum = self.emit(R.sum(i32(b), axis=[0]))
            bias = self.emit(R.subtract(R.multiply(R.multiply(za2, zb2), c(k_)), R.multiply(za2, colsum)))
            gv = self.builder_.add_func(dot_func(tuple(shape[:-1]), k_, n_, zero_point), DOT_BLOCK)
            out_ty = relax.TensorType((*shape[:-1], n_), "int32")
            return self.emit(relax.call_tir(gv, [a, packed, bias] + ([zb2] if zero_point else []), out_ty))

    rw = Rewriter(mod)
    rw.consts = {}
    return rw


# per-tensor elementwise ops a layout transpose commutes with (their other operands scalars)
ELEMWISE = ("relax.quantize", "relax.dequantize", "relax.astype", "relax.nn.relu", "relax.clip")


def _per_tensor(call) -> bool:
    from tvm import relax

    return all(
        not isinstance(a.ty, relax.TensorType) or len(a.ty.shape) == 0
        for a in call.args[1:]
        if hasattr(a, "ty")
    )


def _canceller(mod):
    """A Relax mutator that drops transpose pairs around per-tensor elementwise chains:
    permute(E(permute(x, p)), q) with q undoing p becomes E(x). ConvertLayout leaves such pairs around a
    QDQ model's quantize -> dequantize between two channels-last convolutions (it does not carry layouts
    through them): two copies of the activations per layer, a kernel call each."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Canceller(relax.PyExprMutator):
        var2val: dict = {}

        def visit_call_(self, call):
            if _op(call) == "relax.permute_dims" and call.attrs.axes is not None:
                q = [int(a) for a in call.attrs.axes]
                chain, e = [], _value(self.var2val, call.args[0])
                while _op(e) in ELEMWISE and _per_tensor(e):
                    chain.append(e)
                    e = _value(self.var2val, e.args[0])
                p = (
                    [int(a) for a in e.attrs.axes]
                    if _op(e) == "relax.permute_dims" and e.attrs.axes
                    else None
                )
                if p is not None and len(p) == len(q) and all(p[q[i]] == i for i in range(len(q))):
                    x = self.visit_expr(e.args[0])
                    for op in reversed(chain):
                        args = [x, *(self.visit_expr(a) for a in op.args[1:])]
                        x = self.builder_.emit(relax.Call(op.op, args, op.attrs, op.ty_args))
                    return x
            return super().visit_call_(call)

    return Canceller(mod)


def weight_only(var2val: dict, weights: set, expr) -> bool:
    """Whether `expr` depends on weights (`weights`: the function's parameters after num_input) and constants
    only, through operators (a weight reshaped or transposed in the graph, as an im2col MatMulInteger writes
    it, or dequantized): LiftTransformParams computes it at load."""
    from tvm import relax
    from tvm.ir.expr import Constant

    if isinstance(expr, Constant) or expr in weights:
        return True
    if isinstance(expr, relax.Tuple):  # call_tir's arguments
        return all(weight_only(var2val, weights, f) for f in expr.fields)
    value = var2val.get(expr) if isinstance(expr, relax.Var) else None
    if not isinstance(value, relax.Call) or isinstance(value.op, relax.GlobalVar):
        return False
    args = (relax.Var, Constant, relax.Tuple)
    return all(weight_only(var2val, weights, a) for a in value.args if isinstance(a, args))


def use_counts(var2val: dict) -> dict:
    """Variable -> how many bindings of a function read it (`var2val`: its bindings), an alias (a variable
    bound to another) and a tuple's fields included: a rewrite that moves a value's computation elsewhere
    needs the value read once."""
    from tvm import relax

    counts: dict = {}
    for value in var2val.values():
        args = [value] if isinstance(value, relax.Var) else getattr(value, "args", None)
        for arg in args or getattr(value, "fields", ()):
            counts[arg] = counts.get(arg, 0) + 1
    return counts


def uses_in_function(rw) -> dict:
    """`use_counts` of the function the mutator `rw` visits now (its `var2val`), counted once per function."""
    cached = getattr(rw, "_uses", None)
    if cached is None or cached[0] is not rw.var2val:
        rw._uses = cached = (rw.var2val, use_counts(rw.var2val))
    return cached[1]


def known_value(values: dict, expr):
    """The value (numpy) of a Relax constant or of a weight parameter whose value the module carries
    (`values`: parameter -> tensor, as `_each_function` sets them); None otherwise."""
    from tvm.ir.expr import Constant

    if isinstance(expr, Constant):
        return expr.value.numpy()
    value = values.get(expr)
    return None if value is None else value.numpy()


def _each_function(mod, make, weights: bool = False):
    """`mod` with every Relax function visited by the mutator `make(mod)` (its `var2val`, and with `weights`
    its `weights`: the parameters after `num_input`, set per function), dead code dropped."""
    from tvm import relax

    rw = make(mod)
    for gv, func in list(mod.functions.items()):
        if not isinstance(func, relax.Function):
            continue
        rw.var2val = relax.analysis.get_var2val(func)
        if weights:
            attrs = func.attrs
            n_in = int(attrs["num_input"]) if attrs and "num_input" in attrs else len(func.params)
            rw.weights = set(func.params[n_in:])
            values = list(attrs["params"]) if attrs and "params" in attrs else []
            weights = func.params[n_in:] if len(values) == len(func.params) - n_in else []
            rw.values = dict(zip(weights, values if weights else [], strict=True))  # read when asked
        rw.builder_.update_func(gv, rw.visit_expr(func))
    return relax.transform.DeadCodeElimination()(rw.builder_.get())


def call_rewriter(ops: tuple[str, ...], rewrite):
    """`make(mod)` for `_each_function`: a Relax mutator that offers each call of an operator in `ops` to
    `rewrite(rw, call)`, whose result replaces the call (None: the call is left as it is, visited as usual).
    `rw` is the mutator: its `builder_`, and the `var2val`, `weights` and `values` `_each_function` sets per
    function."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Rewriter(relax.PyExprMutator):
        weights: set = set()
        values: dict = {}
        var2val: dict = {}

        def visit_call_(self, call):
            out = rewrite(self, call) if _op(call) in ops else None
            return super().visit_call_(call) if out is None else out

    return Rewriter


def weights_pass(name: str, make, then=None):
    """The module pass `name`: `_each_function(mod, make, weights=True)`, then `then(mod)` when given."""
    import tvm

    @tvm.ir.transform.module_pass(opt_level=0, name=name)
    def transform(mod, _ctx):
        out = _each_function(mod, make, weights=True)
        return then(out) if then is not None else out

    return transform


def int8_dot_pass():
    """The graph pass (`Decisions.graph["passes"]` name "Int8DotProduct"): in every Relax function, the
    integer GEMMs whose right operand is a weight (a parameter after `num_input`) rewritten (`_rewriter`),
    then the transpose pairs that channels last left around per-tensor quantize / dequantize dropped
    (`_canceller`)."""
    import tvm

    @tvm.ir.transform.module_pass(opt_level=0, name="Int8DotProduct")
    def transform(mod, _ctx):
        return _each_function(_each_function(mod, _rewriter, weights=True), _canceller)

    return transform
