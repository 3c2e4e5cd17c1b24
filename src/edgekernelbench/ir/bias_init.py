"""A depthwise convolution that starts from its bias: the graph pass "BiasInit" (`Decisions.graph["passes"]`).

A convolution with a bias is conv2d then add in Relax; fused, the kernel's reduction starts its
accumulators at 0 and the epilogue adds the bias to each output vector. In a depthwise 3x3 convolution
that add is one vector operation per 9 multiply-adds, on the same ports (with AVX-512, Intel issues both
on its two FMA ports): dscnn_kws_int8's depthwise convolution after QuantizeRint's folded scale had per
output vector 9 FMAs and add, max, a conversion and a saturating pack. This pass writes

    acc[n, y, x, c] = b[c]                          (the reduction's init, T.init())
    acc[n, y, x, c] += pad(x)[...] * w[...]         (TVM's own conv2d, unchanged)

for each add(conv2d(x, W), b) where the convolution is grouped (depthwise), b a weight or constant
broadcast along the output channel only, the convolution's output used by that add alone. The kernel is
the one Relax's legalization writes (topi.nn.conv, its blocks and names: pad_temp, group_conv2d_nhwc)
with the bias as one more buffer and the init reading it. The sum is the same terms in another order
(the bias first instead of last): float32 rounds differently in the last bits, within every float
problem's tolerance; the int8 QDQ models' sums are exact integers in any order (problems/level3.py's
tolerance note), so their outputs are the same bytes.

TVM 0.27's `te.create_prim_func` drops a te.Reduce's `init`, and its Python API has no TIR mutator: the
kernel is patched as TVMScript text (three lines) and parsed back."""

from __future__ import annotations

import re

from .int8_dot import _op, call_rewriter, uses_in_function, weight_only, weights_pass

BIAS = "bias_init"


def conv_bias_func(func, bias_shape: tuple[int, ...]):
    """`func` (the PrimFunc Relax legalizes a conv2d to: one reduction block, its output the last parameter)
    with a parameter `bias_init` of `bias_shape` (the output's rank, 1 on every axis but the channel's) before
    the output, which the reduction's init reads; op_pattern 4 (out-elementwise fusable, as a conv2d's).
    None where the printed kernel is not of that form (the caller then leaves the convolution alone)."""
    import tvm
    from tvm.script import tirx as T

    text = func.script()
    out_name = func.params[-1].name  # a buffer-typed parameter (TVM 0.27 PrimFuncs have no buffer_map)
    inits = list(re.finditer(r"with T\.init\(\):\n(\s+)(\w+)\[([^\]]+)\] = T\.float32\(0(?:\.0)?\)", text))
    sig = f", {out_name}: T.Buffer("
    if len(inits) != 1 or text.count(sig) != 1:
        return None
    m = inits[0]
    idx = [s.strip() for s in m.group(3).split(",")]
    if len(idx) != len(bias_shape):
        return None
    bidx = ", ".join("T.int64(0)" if d == 1 else i for d, i in zip(bias_shape, idx, strict=True))
    load = f"{BIAS}[{bidx}]"
    shape = ", ".join(f"T.int64({d})" for d in bias_shape)
    text = text.replace(sig, f', {BIAS}: T.Buffer(({shape},), "float32"){sig}')
    start = text.index(m.group(0))  # offsets moved with the signature: find the init again
    reads = text.rfind("T.reads(", 0, start)
    close = text.index(")\n", reads)
    text = text[:close] + f", {load}" + text[close:]
    text = text.replace(m.group(0), f"with T.init():\n{m.group(1)}{m.group(2)}[{m.group(3)}] = {load}")
    attrs = 'T.func_attr({"tirx.noalias": True'
    text = text.replace(attrs + "})", attrs + ', "op_pattern": 4})')
    text = text.replace("@T.prim_func(s_tir=True)", "@T.prim_func(private=True, s_tir=True)")
    try:
        return tvm.script.from_source(text, extra_vars={"T": T})
    except Exception:  # a kernel printed in a form this patch does not know: the convolution stays as it was
        return None


def _channel_bias(bias, out_shape: list[int], channel: int) -> bool:
    """Whether `bias` has the output's rank and is 1 on every axis but `channel`, where it is the output's."""
    shape = [int(d) for d in getattr(bias.ty, "shape", ())]
    return len(shape) == len(out_shape) and all(
        d == (out_shape[i] if i == channel else 1) for i, d in enumerate(shape)
    )


def _bias_init(rw, call):
    """`call` (an add) as the kernel of `conv_bias_func` where it adds a per-channel weight bias to a grouped
    conv2d whose output it alone uses; None otherwise."""
    from tvm import relax, topi
    from tvm.ir.expr import Constant
    from tvm.relax import op as R  # noqa: F401 -- relax.op registers the operators call_te lowers through
    from tvm.relax.utils import gen_call_tir_inputs

    if str(getattr(call.ty, "dtype", "")) != "float32":
        return None
    for conv_var, bias in (call.args, call.args[::-1]):
        conv = rw.var2val.get(conv_var)
        weight = isinstance(bias, Constant) or weight_only(rw.var2val, rw.weights, bias)
        if _op(conv) == "relax.nn.conv2d" and weight and isinstance(conv_var, relax.DataflowVar):
            break
    else:
        return None
    a = conv.attrs
    out_shape = [int(d) for d in conv.ty.shape]
    layout = str(a.data_layout)
    if (
        int(a.groups) == 1
        or str(conv.ty.dtype) != "float32"
        or str(a.out_layout) != layout
        or len(layout) != 4
        or len(str(a.kernel_layout)) != 4
        or str(getattr(bias.ty, "dtype", "")) != "float32"
        or not _channel_bias(bias, out_shape, layout.index("C"))
        or uses_in_function(rw).get(conv_var) != 1
    ):
        return None
    x, w = (rw.visit_expr(v) for v in conv.args)
    func, args, out_ty = gen_call_tir_inputs(
        topi.nn.conv,
        inp=x,
        filt=w,
        stride=a.strides,
        padding=a.padding,
        dilation=a.dilation,
        groups=a.groups,
        data_layout=a.data_layout,
        kernel_layout=a.kernel_layout,
        out_dtype=a.out_dtype if a.out_dtype != "" else None,
    )
    patched = conv_bias_func(func, tuple(int(d) for d in bias.ty.shape))
    if patched is None or len(args) != 2:
        return None
    gv = rw.builder_.add_func(patched, "conv2d_bias")
    return rw.builder_.emit(relax.call_tir(gv, [*args, rw.visit_expr(bias)], out_ty))


def bias_init_pass():
    """The graph pass (name "BiasInit"): in every Relax function, each grouped convolution followed by its
    per-channel bias add rewritten to start its sums at the bias (`_bias_init`); the add's binding is left
    as an alias of the new call (lv1 = lv), which FuseOps does not fuse across: bindings canonicalized."""
    from tvm import relax

    return weights_pass(
        "BiasInit", call_rewriter(("relax.add",), _bias_init), relax.transform.CanonicalizeBindings()
    )
