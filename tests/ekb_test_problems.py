"""Tiny problems for the harness tests (imported through EKB_PROBLEM_MODULES, in workers too)."""

from edgekernelbench.problems import Problem, register


def _scale_add(g):
    x = g.input("x", (4, 8))
    y = g.node("Mul", [x, g.weight((8,), scale=1.0)])
    g.output(g.node("Add", [y, g.bias(8, scale=0.5)]))


register(
    Problem(
        id="L1/tiny_scale_add",
        level=1,
        domain="sensors",
        category="elementwise",
        source="test fixture: y = x * w + b on 4x8",
        graph=_scale_add,
        tags=("test",),
    )
)
