"""A user suite: the user's own ONNX models registered as problems, outside the built-in suite.

    ekb add-model path/to/model.onnx --id my_net --domain vision [--input x=1x3x96x96]

writes <suite>/<name>/model.onnx (with static input shapes) and problem.json. The suite directory is
$EKB_USER_SUITE, else ~/.local/share/edgekernelbench/suite. The built-in suite is never modified.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import numpy as np
import onnx

from ..errors import EKBError
from .base import Problem

log = logging.getLogger(__name__)
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_]*$")
SUPPORTED_DTYPES = {"float32", "int8", "uint8", "int32", "int64"}


class ModelError(EKBError):
    pass


def user_suite_dir() -> Path:
    env = os.environ.get("EKB_USER_SUITE")
    return Path(env) if env else Path.home() / ".local" / "share" / "edgekernelbench" / "suite"


def parse_shapes(items: list[str]) -> dict[str, tuple[int, ...]]:
    """["x=1x3x96x96", ...] -> {"x": (1, 3, 96, 96)}"""
    out = {}
    for item in items:
        name, sep, dims = item.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            shape = tuple(int(d) for d in dims.lower().split("x"))
            if any(d <= 0 for d in shape):
                raise ValueError
        except ValueError:
            raise ModelError(f"--input '{item}': expected NAME=D1xD2x... with positive sizes") from None
        out[name] = shape
    return out


def _load(path: Path) -> onnx.ModelProto:
    if not path.is_file():
        raise ModelError(f"{path}: no such file")
    try:
        model = onnx.load(str(path))
    except Exception as e:
        raise ModelError(f"{path}: not an ONNX model ({type(e).__name__})") from e
    if not model.graph.node:
        raise ModelError(f"{path}: not an ONNX model (no graph nodes)")
    return model


def _fix_shapes(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]], path: Path) -> onnx.ModelProto:
    inits = {i.name for i in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits]
    unknown = set(shapes) - {vi.name for vi in inputs}
    if unknown:
        raise ModelError(
            f"{path}: --input names {sorted(unknown)} are not model inputs "
            f"({', '.join(vi.name for vi in inputs)})"
        )
    for vi in inputs:
        t = vi.type.tensor_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)).name
        if dtype not in SUPPORTED_DTYPES:
            raise ModelError(
                f"{path}: input '{vi.name}' has dtype {dtype}; supported: {sorted(SUPPORTED_DTYPES)}"
            )
        dims = t.shape.dim
        if vi.name in shapes:
            want = shapes[vi.name]
            if len(want) != len(dims):
                raise ModelError(
                    f"{path}: --input {vi.name} has rank {len(want)}, the model's input has {len(dims)}"
                )
            for d, v in zip(dims, want, strict=True):
                if d.dim_value and d.dim_value != v:
                    raise ModelError(
                        f"{path}: --input {vi.name}={'x'.join(map(str, want))} contradicts the "
                        f"model's static size {d.dim_value}"
                    )
                d.Clear()
                d.dim_value = v
        for k, d in enumerate(dims):
            if d.dim_value <= 0:
                sym = d.dim_param or "?"
                raise ModelError(
                    f"{path}: input '{vi.name}' has dynamic dimension {k} ('{sym}'); give its shape "
                    f"with --input {vi.name}=" + "x".join("N" for _ in dims)
                )
    del model.graph.value_info[:]
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except Exception as e:
        raise ModelError(
            f"{path}: shape inference failed with the given shapes: {str(e).splitlines()[0]}"
        ) from e


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
    from .registry import all_problems

    path = Path(path)
    if not NAME_RE.match(name):
        raise ModelError(f"--id '{name}': use lower-case letters, digits and '_'")
    problem_id = f"L{level}/{name}"
    if any(p.id == problem_id for p in all_problems()):
        raise ModelError(f"problem {problem_id} exists already; choose another --id")
    model = _fix_shapes(_load(path), shapes or {}, path)
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:
        raise ModelError(f"{path}: invalid ONNX model: {str(e).splitlines()[0][:300]}") from e
    _check_tvm(model, path)
    problem = _problem(problem_id, level, domain, f"user model {path.name}", atol, rtol, model)
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


def _problem(pid, level, domain, source, atol, rtol, model_or_path) -> Problem:
    def graph(_g):
        if isinstance(model_or_path, onnx.ModelProto):
            return model_or_path
        return onnx.load(str(model_or_path))

    return Problem(
        id=pid,
        level=level,
        domain=domain,
        category="model",
        source=source,
        graph=graph,
        atol=atol,
        rtol=rtol,
        tags=("user",),
    )


def load_user_problems(suite_dir: Path | None = None) -> list[Problem]:
    """Problems of the user suite; a broken entry is skipped with a warning, never fatal."""
    root = suite_dir or user_suite_dir()
    out = []
    if not root.is_dir():
        return out
    for meta_path in sorted(root.glob("*/problem.json")):
        try:
            m = json.loads(meta_path.read_text())
            out.append(
                _problem(
                    m["id"],
                    int(m["level"]),
                    m["domain"],
                    m["source"],
                    float(m["atol"]),
                    float(m["rtol"]),
                    meta_path.parent / "model.onnx",
                )
            )
        except (OSError, ValueError, KeyError) as e:
            log.warning("skipping user problem %s: %s", meta_path.parent, e)
    return out
