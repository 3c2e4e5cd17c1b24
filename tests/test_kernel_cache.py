"""The kernel cache (backends/kernel_cache.py): a candidate's kernels compiled one by one, each once per
cache, linked into a graph that computes what the whole build computes."""

from __future__ import annotations

import numpy as np

from edgekernelbench.backends.kernel_cache import compile_kernels
from edgekernelbench.backends.registry import backend_for, get_profile
from edgekernelbench.baselines.tvm_default import tvm_default_module
from edgekernelbench.harness.runner import Runner
from edgekernelbench.problems import get_problem
from edgekernelbench.reference import build_reference


def test_kernels_are_compiled_once_per_cache_and_the_linked_graph_computes_what_the_whole_build_does(
    tmp_path,
):
    import tvm

    problem = get_problem("L2/mlp_ae_encoder")
    reference = build_reference(problem)
    backend = backend_for(get_profile("host-cpu", threads=1))
    target = backend.target()
    mod = tvm_default_module(reference.module, target)
    cache, out = tmp_path / "cache", tmp_path / "out"
    cache.mkdir()
    out.mkdir()

    library, _, first = compile_kernels(mod, target, cache, out)
    assert first["kernels"] > 1 and first["compiled"] == first["kernels"]
    assert len(list(cache.glob("*.o"))) == first["kernels"]
    _, _, again = compile_kernels(mod, target, cache, out)
    assert again == {"kernels": first["kernels"], "compiled": 0}

    session = backend.session()
    inputs = problem.sample_inputs(0)
    whole = Runner(mod, backend.build(mod), session, reference).run_vm(inputs)
    linked = Runner(mod, backend.build_linked(mod, library), session, reference).run_vm(inputs)
    assert len(whole) == len(linked)
    for a, b in zip(whole, linked, strict=True):
        np.testing.assert_array_equal(a, b)

    # one kernel changed: only that one is compiled again; another target compiles everything again
    gv = next(g for g, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc))
    changed = tvm.IRModule({**dict(mod.functions.items()), gv: mod[gv].with_attr("ekb.test", 1)})
    _, _, one = compile_kernels(changed, target, cache, out)
    assert one["compiled"] == 1, one
    other = tvm.target.Target({**target.export(), "opt-level": 2})
    _, _, retarget = compile_kernels(mod, other, cache, out)
    assert retarget["compiled"] == retarget["kernels"], retarget
