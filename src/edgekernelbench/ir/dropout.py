"""A graph pass (name "DropoutAsIdentity"): ONNX Dropout as what it is at inference, the identity.

Exporters leave Dropout in (Caffe2's SqueezeNet and Inception v1, opset 9: with its mask as a second
output). TVM 0.27's ONNX frontend imports it as `R.nn.dropout`, which returns a tuple (output, mask); Relax's
ConvertLayout then fails on the whole graph ("Expected nested to match tuple"), so channels last, which the
search offers for every convolution model, cannot apply. Here each use of the output is the input itself
and each use of the mask a tensor of ones (ONNX's mask at inference: every element kept); the dropout call,
then unused, is removed, and so are the bindings of a name to another. The values are the same: ONNX's
Dropout outside training returns its input.
"""

from __future__ import annotations


def dropout_pass():
    """The pass: in every Relax function, `dropout(x)[0]` becomes x and `dropout(x)[1]` ones_like(x)."""
    import tvm
    from tvm import relax

    dropout = tvm.ir.Op.get("relax.nn.dropout")

    @relax.expr_functor.mutator
    class Rewriter(relax.PyExprMutator):
        def visit_tuple_getitem_(self, op):
            op = super().visit_tuple_getitem_(op)
            value = op.tuple_value
            bound = self.lookup_binding(value) if isinstance(value, relax.Var) else value
            if not (isinstance(bound, relax.Call) and bound.op.same_as(dropout)):
                return op
            x = bound.args[0]
            return x if op.index == 0 else relax.op.ones_like(x)

    @tvm.ir.transform.module_pass(opt_level=0, name="DropoutAsIdentity")
    def transform(mod, _ctx):
        rw = Rewriter(mod)
        changed = False
        for gv, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                new = rw.visit_expr(func)
                changed = changed or not new.same_as(func)
                rw.builder_.update_func(gv, new)
        if not changed:
            return mod
        # the output's uses bound to the input itself (`y = x`): folded away, else ConvertLayout transposes
        # the activations out of channels last and back around that binding
        mod = relax.transform.CanonicalizeBindings()(rw.builder_.get())
        return relax.transform.DeadCodeElimination()(mod)

    return transform
