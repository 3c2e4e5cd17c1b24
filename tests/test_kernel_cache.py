"""The kernel cache (backends/kernel_cache.py): a candidate's kernels compiled one by one, each once per
cache, linked into a graph that computes what the whole build computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

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
    built, built_linked = backend.build(mod), backend.build_linked(mod, library)
    # a candidate's graph runs compiled (tvm_env.build_graph), whole or linked; tvm-default's bytecode
    assert "vm_tir_func" in built.graph.as_text() and "vm_tir_func" in built_linked.graph.as_text()
    assert "vm_tir_func" not in backend.build(mod, stock=True).graph.as_text()
    whole = Runner(mod, built, session, reference).run_vm(inputs)
    linked = Runner(mod, built_linked, session, reference).run_vm(inputs)
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


def test_a_judge_whose_cache_cannot_be_written_leaves_the_build_to_the_runner(tmp_path, monkeypatch):
    """A cache the judge cannot write (here: a file where the folder should be) is this machine's fault,
    not the candidate's: the judge hands no library to the runner (which then builds the module whole)
    and the result says why; with a usable cache it hands over the linked kernels."""
    import tempfile

    from edgekernelbench.backends.kernel_cache import CacheUnavailable
    from edgekernelbench.harness import evaluate
    from edgekernelbench.harness.job import Job
    from edgekernelbench.records import Result

    problem = get_problem("L1/tiny_scale_add")
    backend = backend_for(get_profile("host-cpu", threads=1))
    mod = tvm_default_module(build_reference(problem).module, backend.target())
    not_a_dir = tmp_path / "cache"
    not_a_dir.write_text("")
    with pytest.raises(CacheUnavailable):
        compile_kernels(mod, backend.target(), not_a_dir, tmp_path)

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the judge's job directory
    job = Job(problem=problem.id, sample=0, backend="host-cpu", spec={}, kernel_cache=str(not_a_dir))
    res = Result(problem.id, 0, "host-cpu")
    assert evaluate._compile_kernels(job, mod, backend, {}, res) == (None, 0.0)
    assert res.extra["kernel_cache"]["unused"].startswith("writing "), res.extra["kernel_cache"]
    (tmp_path / "good").mkdir()
    job.kernel_cache, res = str(tmp_path / "good"), Result(problem.id, 0, "host-cpu")
    library, seconds = evaluate._compile_kernels(job, mod, backend, {}, res)
    assert Path(library) == tmp_path / "kernels" / "kernels.so" and Path(library).is_file() and seconds > 0
    assert res.extra["kernel_cache"]["compiled"] >= 1
