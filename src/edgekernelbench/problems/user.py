"""A user suite: the user's own ONNX models registered as problems, outside the built-in suite.

Each is <suite>/<name>/model.onnx (with static input shapes) and problem.json, written by `ekb add-model`
(checks/add_model.py: TVM and the oracle check a model before it joins). The suite directory is
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


def load_model(path: Path) -> onnx.ModelProto:
    if not path.is_file():
        raise ModelError(f"{path}: no such file")
    try:
        model = onnx.load(str(path))
    except Exception as e:
        raise ModelError(f"{path}: not an ONNX model ({type(e).__name__})") from e
    if not model.graph.node:
        raise ModelError(f"{path}: not an ONNX model (no graph nodes)")
    return model


def fix_shapes(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]], path: Path) -> onnx.ModelProto:
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


def user_problem(pid, level, domain, source, atol, rtol, model_or_path) -> Problem:
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
        suite="user",
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
                user_problem(
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
