"""Prompts for a problem on a backend, from versioned jinja2 templates under llm/templates/.

Each track has a template: `direct` (the model writes a full TVMScript IRModule) and `schedule` (the model
writes `schedule(name, sch)` with s_tir schedule primitives for the reference's PrimFuncs). A prompt
carries its template's name, version and hash (of the template files it uses), stored with every
generated candidate and generation record.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..backends.host import resolve_target

TEMPLATE_DIR = Path(__file__).parent / "templates"
TRACKS = ("direct", "schedule")
AGENT_TEMPLATES = ("leka_layer", "flat_feedback", "cli_task")  # agents/: one layer; feedback; a workspace
SHARED_TEMPLATES = ("tvm_facts.j2",)
SYSTEM = "You write correct, fast Apache TVM 0.27 code. Follow the output format exactly."
_VERSION_RE = re.compile(r"template:\s*(\w+),\s*version\s*(\d+)")


@dataclass(frozen=True)
class Prompt:
    track: str
    system: str
    user: str
    template: str  # e.g. "direct"
    template_version: int
    template_hash: str  # sha256 (16 hex) of the template files this prompt was rendered from

    @property
    def prompt_hash(self) -> str:
        return hashlib.sha256(json.dumps([self.system, self.user]).encode()).hexdigest()[:16]

    def meta(self) -> dict:
        return {
            "track": self.track,
            "template": self.template,
            "template_version": self.template_version,
            "template_hash": self.template_hash,
            "prompt_hash": self.prompt_hash,
        }


def template_info(track: str) -> tuple[int, str]:
    """(version, hash) of a track's template (hash over it and the shared templates it includes)."""
    if track not in TRACKS + AGENT_TEMPLATES:
        raise ValueError(f"unknown template {track!r}; tracks: {TRACKS}, agent templates: {AGENT_TEMPLATES}")
    text = (TEMPLATE_DIR / f"{track}.j2").read_text()
    m = _VERSION_RE.search(text.splitlines()[0])
    if not m or m.group(1) != track:
        raise ValueError(f"template {track}.j2: first line must say 'template: {track}, version N'")
    h = hashlib.sha256(text.encode())
    for name in SHARED_TEMPLATES:
        h.update((TEMPLATE_DIR / name).read_text().encode())
    return int(m.group(2)), h.hexdigest()[:16]


def _env():
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def _signature(func) -> str:
    from ..ir.replay import buffer_signature

    return ", ".join(
        f"{p.name}: {dt}{list(shape)}"
        for p, (shape, dt) in zip(func.params, buffer_signature(func), strict=True)
    )


def prompt_context(problem, profile) -> dict:
    """What the templates see: the problem, its shapes, the reference TVMScript, the backend."""
    from onnx import helper

    from ..reference import build_reference

    ref = build_reference(problem)
    funcs = ref.primfuncs()
    script, n_constants = ref.brief_script()  # constants' values (weights, tables) would flood the prompt
    outputs = []
    for o in problem.model.graph.output:
        tt = o.type.tensor_type
        outputs.append(
            {
                "name": o.name,
                "dtype": helper.tensor_dtype_to_np_dtype(tt.elem_type).name,
                "shape": [d.dim_value for d in tt.shape.dim],
            }
        )
    return {
        "problem": problem,
        "inputs": [{"name": s.name, "dtype": s.dtype, "shape": list(s.shape)} for s in problem.inputs],
        "outputs": outputs,
        "n_weights": len(ref.params),
        "primfuncs": [
            {"name": n, "signature": _signature(funcs[n])} for n in dict.fromkeys(ref.kernel_calls())
        ],
        "reference_script": script.strip(),
        "n_constants": n_constants,
        "backend": {
            "name": profile.name,
            "description": profile.description or "-",
            # "mcpu": "native" resolved: the model is told the real CPU (and the thread count)
            "target_json": json.dumps(resolve_target(profile), sort_keys=True),
            "vector_bits": profile.vector_bits,
            "vector_lanes": profile.vector_lanes,
            "threads": profile.threads,
            "caches": ", ".join(f"{k} = {v}" for k, v in sorted(profile.caches.items())) or "-",
        },
    }


def build_prompt(problem, profile, track: str = "direct") -> Prompt:
    version, thash = template_info(track)
    user = _env().get_template(f"{track}.j2").render(**prompt_context(problem, profile))
    return Prompt(track, SYSTEM, user.strip() + "\n", track, version, thash)


def render_prompt(template: str, problem, profile, **extra) -> Prompt:
    """An agent's prompt (AGENT_TEMPLATES) for `problem` on `profile`, with the template's own variables."""
    version, thash = template_info(template)
    user = _env().get_template(f"{template}.j2").render(**prompt_context(problem, profile), **extra)
    return Prompt(template, SYSTEM, user.strip() + "\n", template, version, thash)
