"""Candidates that need no model: the unscheduled reference and the rule-based schedule, and for a GPU
the reference with dlight's default GPU schedule (`gpu_default_spec`).

For every problem, `write_reference_candidates` writes into a run directory

    candidates/<problem id>/sample0.py    the reference IRModule as TVMScript (unscheduled)
    candidates/<problem id>/sample1.json  the rule-based spec (decisions only, see search/rules/)

The problem id contains a "/" (e.g. "L1/dwconv3x3_kws"), so each level is a directory.
"""

from __future__ import annotations

from pathlib import Path

from ..ir.spec import KernelSpec
from ..rundir import write_candidate
from ..search.rules import rule_spec


def reference_spec(problem) -> KernelSpec:
    """The reference IRModule as a candidate: TVM's lowering of the ONNX graph, no schedule."""
    from ..reference import build_reference

    module = build_reference(problem).script()
    return KernelSpec(
        problem=problem.id,
        module=module,
        method="reference",
        notes="unscheduled reference (ONNX -> Relax -> legalized, fused PrimFuncs)",
    )


def gpu_default_spec(problem, profile):
    """A working GPU candidate: the reference with dlight's default GPU schedule (threads bound),
    as module text. The unscheduled reference has no thread bindings and fails to build for a GPU."""
    from ..backends.gpu import GPUBackend
    from ..baselines.tvm_default import tvm_default_module
    from ..reference import build_reference, module_script

    backend = GPUBackend(profile)
    ref = build_reference(problem)
    mod = tvm_default_module(ref.module, backend.target())
    return KernelSpec(
        problem=problem.id,
        module=module_script(mod),
        method=f"dlight-gpu:{profile.name}",
        notes=f"reference scheduled with dlight's default GPU rules for {profile.name} "
        f"({profile.target.get('kind')})",
    )


def write_reference_candidates(
    problems, run_dir, vector_lanes: int | None = None, threads: int = 1
) -> list[Path]:
    """Writes sample0.py (reference TVMScript) and sample1.json (rule-based spec) per problem;
    returns the paths written."""
    written: list[Path] = []
    for problem in problems:
        ref_path = write_candidate(run_dir, problem.id, 0, ".py", reference_spec(problem).module + "\n")
        rule = rule_spec(problem, vector_lanes, threads)
        written += [ref_path, write_candidate(run_dir, problem.id, 1, ".json", rule.to_json() + "\n")]
    return written
