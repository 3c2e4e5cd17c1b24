"""`ekb add-model`: a user's ONNX model joins the user suite (problems/user.py) once it passed the checks
that need the layers above the suite: TVM's ONNX frontend imports it and the oracle runs it.

    ekb add-model path/to/model.onnx --id my_net --domain vision [--input x=1x3x96x96]

writes <suite>/<name>/model.onnx (with static input shapes) and problem.json. The built-in suite is never
modified.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx

from ..problems import Problem, all_problems
from ..problems.user import NAME_RE, ModelError, fix_shapes, load_model, user_problem, user_suite_dir


def _check_tvm(model: onnx.ModelProto, path: Path) -> None:
    from ..reference import relax_from_onnx

    try:
        relax_from_onnx(model)
    except Exception as e:
        msg = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        unsupported = [ln for ln in msg if "not supported" in ln]
        raise ModelError(
            f"{path}: TVM's ONNX frontend cannot import it: "
            f"{(unsupported or msg or [type(e).__name__])[-1][:300]}"
        ) from e


def add_model(
    path: Path,
    name: str,
    domain: str = "user",
    level: int = 3,
    shapes: dict | None = None,
    atol: float = 1e-4,
    rtol: float = 1e-4,
    suite_dir: Path | None = None,
) -> Problem:
    path = Path(path)
    if not NAME_RE.match(name):
        raise ModelError(f"--id '{name}': use lower-case letters, digits and '_'")
    problem_id = f"L{level}/{name}"
    if any(p.id == problem_id for p in all_problems()):
        raise ModelError(f"problem {problem_id} exists already; choose another --id")
    model = fix_shapes(load_model(path), shapes or {}, path)
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:
        raise ModelError(f"{path}: invalid ONNX model: {str(e).splitlines()[0][:300]}") from e
    _check_tvm(model, path)
    problem = user_problem(problem_id, level, domain, f"user model {path.name}", atol, rtol, model)
    try:
        from ..oracle import Oracle

        Oracle(problem).run(problem.sample_inputs(1))  # ONNX Runtime, or onnx.reference (integer ops)
    except Exception as e:
        raise ModelError(f"{path}: the oracle cannot run it: {str(e).splitlines()[0][:300]}") from e
    target = (suite_dir or user_suite_dir()) / name
    target.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(target / "model.onnx"))
    meta = {
        "id": problem_id,
        "level": level,
        "domain": domain,
        "source": problem.source,
        "atol": atol,
        "rtol": rtol,
        "original": str(path.resolve()),
    }
    (target / "problem.json").write_text(json.dumps(meta, indent=1))
    return problem
