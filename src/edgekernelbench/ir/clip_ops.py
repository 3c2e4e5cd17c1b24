"""A graph pass (name "ClipAsOps"): the clamps that TVM's ONNX importer emits as kernels become Relax
operators again, so the graph passes after it see them.

TVM 0.27's ONNX frontend imports Clip (ReLU6 in a MobileNet) as `call_tir` of two kernels of its own,
maximum(x, lo) and minimum(., hi), with 0-d bounds. Relax's ConvertLayout does not look into a call_tir:
channels last then transposes the activations back to NCHW before every clamp and to NHWC after it (two
transposes around each of mobilenetv2_035_96's 35 clamps), and FuseOps cannot fuse the clamp into the
convolution before it (the transposes sit between). As `R.maximum` / `R.minimum` with a 0-d bound, the clamp
is an elementwise operator whose layout ConvertLayout carries and that fuses into the convolution's epilogue;
LegalizeOps lowers it to the same TOPI kernel as before, so the values are the same.

A call is rewritten only when its kernel is, by its TVMScript, a single block that stores max (or min) of
the call's first argument and its 0-d second argument."""

from __future__ import annotations

import re


def _clamp_kind(func) -> str | None:
    """ "max" or "min" when PrimFunc `func` is out = max(A, b) (or min) elementwise, b 0-d; else None."""
    params = [str(p) for p in func.params]
    if len(params) != 3:
        return None
    text = "\n".join(ln for ln in func.script().splitlines() if not ln.lstrip().startswith("#"))
    if text.count("T.sblock(") != 1:
        return None
    m = re.findall(r"\] = T\.(max|min)\((\w+)\[[^\]]*\], (\w+)\[\(\)\]\)", text)
    if len(m) != 1 or m[0][1:] != (params[0], params[1]):
        return None
    return m[0][0]


def clip_ops_pass():
    """The pass: in every Relax function, each call_tir of a clamp kernel (`_clamp_kind`) becomes the
    Relax operator; kernels no longer called are dropped."""
    import tvm
    from tvm import relax

    call_tir = tvm.ir.Op.get("relax.call_tir")

    @relax.expr_functor.mutator
    class Rewriter(relax.PyExprMutator):
        kinds: dict = {}

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not call.op.same_as(call_tir) or not isinstance(call.args[0], tvm.ir.GlobalVar):
                return call
            kind = self.kinds.get(call.args[0].name_hint)
            args = call.args[1]
            if kind is None or not isinstance(args, relax.Tuple) or len(args.fields) != 2:
                return call
            op = relax.op.maximum if kind == "max" else relax.op.minimum
            return op(args.fields[0], args.fields[1])

    @tvm.ir.transform.module_pass(opt_level=0, name="ClipAsOps")
    def transform(mod, _ctx):
        kinds = {}
        for gv, func in mod.functions.items():
            if isinstance(func, tvm.tirx.PrimFunc):
                kind = _clamp_kind(func)
                if kind is not None:
                    kinds[gv.name_hint] = kind
        if not kinds:
            return mod
        rw = Rewriter(mod)
        rw.kinds = kinds
        for gv, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                rw.builder_.update_func(gv, rw.visit_expr(func))
        return relax.transform.DeadCodeElimination()(rw.builder_.get())

    return transform
