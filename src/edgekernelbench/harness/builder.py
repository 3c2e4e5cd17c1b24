"""The builder: the only process that runs what a candidate controls as Python.

A TVMScript module is Python (the parser evaluates its expressions), `schedule_code` is Python, and a
trace is replayed by TVM's Python-facing schedule. The builder runs all of it, in its own sandboxed
process (harness/sandbox.py), and hands back data only, in its job directory:

    module.json   the candidate IRModule in TVM's JSON serialization (tvm.ir.save_json)
    built.json    {"ok": true, "schedule_traces": {...}} or {"ok": false, "reason": ..., "detail": ...}

It never sees the judge's job (no seed, no trial inputs, no oracle outputs, no baselines), the judge's
files or the run directory. Everything it writes is untrusted: the parent reads built.json as JSON with
a size limit (a lie there only changes the reason the candidate fails), and the judge loads module.json
as data and verifies the IR before building anything (harness/verify.py).
"""

from __future__ import annotations

import json
from pathlib import Path

MODULE_FILE, STATUS_FILE = "module.json", "built.json"


def build_candidate(problem_id: str, spec_dict: dict, source: str, out_dir: Path) -> None:
    """Materializes the candidate (parse, replay decisions, run schedule_code) into out_dir."""
    import tvm

    from ..errors import DecisionError, MalformedCandidate, SignatureMismatch, last_line
    from ..ir.replay import materialize
    from ..ir.spec import KernelSpec
    from ..problems import get_problem
    from ..reference import build_reference

    problem = get_problem(problem_id)
    reference = build_reference(problem)
    status: dict = {"ok": False}
    try:
        spec = KernelSpec.from_dict(spec_dict, source or "candidate")
        traces: dict = {}
        mod = materialize(spec, problem, reference, traces)
        text = tvm.ir.save_json(mod)
        (out_dir / MODULE_FILE).write_text(text)
        status = {"ok": True, "schedule_traces": traces}
    except MalformedCandidate as e:
        status.update(reason="parse_error", detail=str(e))
    except DecisionError as e:
        status.update(reason="decision_error", detail=str(e))
    except SignatureMismatch as e:
        status.update(reason="signature", detail=str(e))
    except Exception as e:  # anything else a candidate's Python raised while it was materialized
        status.update(reason="parse_error", detail=f"building the candidate failed: {last_line(e)}")
    (out_dir / STATUS_FILE).write_text(json.dumps(status))
