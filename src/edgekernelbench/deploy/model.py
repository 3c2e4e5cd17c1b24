"""What `ekb deploy` deploys: a problem of the suite (an L3 model, or a user model from `ekb add-model`), or
an ONNX file given with its static input shapes; and, for verifying an artifact, the problem its manifest
names, rebuilt from the artifact's own copy of the ONNX model."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from pathlib import Path

import onnx

from ..errors import EKBError
from ..problems import Problem, get_problem
from ..problems.user import ModelError, fix_shapes, load_model, parse_shapes, user_problem

log = logging.getLogger(__name__)
ONNX_PREFIX = "onnx/"  # the id of a model deployed from a file: onnx/<file stem>


class DeployError(EKBError):
    """`ekb deploy` cannot go on; str(e) says why in one line."""


def model_hash(model: onnx.ModelProto) -> str:
    return hashlib.sha256(model.SerializeToString()).hexdigest()


def looks_like_file(model: str) -> bool:
    return model.endswith(".onnx") or Path(model).is_file()


def resolve_model(
    model: str | Path | Problem,
    inputs: list[str] | dict | None = None,
    atol: float | None = None,
    rtol: float | None = None,
) -> Problem:
    """The Problem to deploy. `model`: a Problem, a problem id (or its unambiguous bare name), or an ONNX
    file; `inputs` ("NAME=1x3x96x96" items, or name -> shape) fix an ONNX file's dynamic input dimensions.
    Raises UnknownProblem, ModelError or DeployError (one line each)."""
    if isinstance(model, Problem):
        problem = model
    elif isinstance(model, Path) or looks_like_file(str(model)):
        path = Path(model)
        shapes = parse_shapes(list(inputs)) if isinstance(inputs, (list, tuple)) else dict(inputs or {})
        onnx_model = fix_shapes(load_model(path), shapes, path)
        try:
            onnx.checker.check_model(onnx_model, full_check=True)
        except Exception as e:
            raise ModelError(f"{path}: invalid ONNX model: {str(e).splitlines()[0][:300]}") from e
        name = "".join(c if c.isalnum() else "_" for c in path.stem.lower()) or "model"
        problem = user_problem(
            ONNX_PREFIX + name, 3, "user", f"ONNX file {path.name}", atol or 1e-4, rtol or 1e-4, onnx_model
        )
    else:
        if inputs:
            raise DeployError(f"--input is for ONNX files; '{model}' is a problem of the suite")
        problem = get_problem(str(model))
    return with_tolerance(
        problem, problem.atol if atol is None else atol, problem.rtol if rtol is None else rtol
    )


def artifact_problem(folder: Path, manifest: dict) -> Problem:
    """The problem of an artifact, for verifying it: the suite's problem of that id when this installation
    has it with the same model (its input distributions: e.g. an int8 model's input range), else one built
    from the artifact's model.onnx (standard normal floats, integers over their range). Tolerances from the
    manifest. Raises DeployError when model.onnx is missing or not the model the manifest hashed."""
    path = folder / manifest["model"]["file"]
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DeployError(f"{folder}: cannot read the artifact's model ({e})") from e
    if hashlib.sha256(data).hexdigest() != manifest["model"]["sha256"]:
        raise DeployError(f"{path}: not the model the manifest was made from (its SHA-256 differs)")
    onnx_model = onnx.load_from_string(data)
    pid = manifest["model"]["id"]
    atol, rtol = float(manifest["model"]["atol"]), float(manifest["model"]["rtol"])
    suite = None
    if not pid.startswith(ONNX_PREFIX):
        try:
            suite = get_problem(pid)
        except EKBError:
            suite = None
    if suite is not None and model_hash(suite.model) == manifest["model"]["sha256"]:
        return with_tolerance(suite, atol, rtol)
    return user_problem(pid, 3, "user", f"artifact {folder.name}", atol, rtol, onnx_model)


def with_tolerance(problem: Problem, atol: float, rtol: float) -> Problem:
    """The problem with the verification's tolerances (the same problem when they are its own)."""
    if (problem.atol, problem.rtol) == (atol, rtol):
        return problem
    return dataclasses.replace(problem, atol=atol, rtol=rtol)
