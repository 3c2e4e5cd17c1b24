"""KernelSpec: a candidate kernel as data.

A candidate is TVM IR plus the decisions that produced it, grouped by layer:

- graph:  Relax passes applied to the imported graph before legalization/fusion
          (e.g. a layout conversion), which decide the PrimFuncs that exist;
- loop:   split / reorder / fuse / parallel / vectorize / unroll / compute_at ... ;
- memory: cache_read / cache_write / transform_layout / storage scopes ... ;
- target: tensorize / intrinsics / annotations, plus target attributes.

Loop, memory and target decisions are TVM schedule traces in their JSON form, keyed by the
PrimFunc they apply to. For one PrimFunc the layers are phases replayed in order
(loop, then memory, then target) on one schedule, so a later layer may use the loops and blocks
an earlier layer made; variable names are shared across the phases of one PrimFunc.

This module is pure data (no TVM import): the parent process reads and validates specs;
only a worker process materializes them (see ir/replay.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import MalformedCandidate

SCHEDULE_LAYERS = ("loop", "memory", "target")
LAYERS = ("graph", *SCHEDULE_LAYERS)
FORMAT_VERSION = 1

Trace = list  # a TVM schedule trace in its JSON form: [instructions, decisions]
KernelLayers = dict[str, Trace]  # one PrimFunc's schedule layers: layer (SCHEDULE_LAYERS) -> its trace
KernelDecisions = dict[str, KernelLayers]  # PrimFunc name -> its layers (a search's kept decisions)


@dataclass
class Decisions:
    graph: dict = field(default_factory=dict)  # {"passes": [{"name": ..., "args": {...}}]}
    loop: dict[str, Trace] = field(default_factory=dict)  # PrimFunc name -> its trace in this layer
    memory: dict[str, Trace] = field(default_factory=dict)
    target: dict[str, Trace] = field(default_factory=dict)
    target_attrs: dict = field(default_factory=dict)  # attributes merged into the backend's target
    workloads: dict[str, str] = field(default_factory=dict)  # PrimFunc name -> workload key recorded on

    def is_empty(self) -> bool:
        return not (self.graph.get("passes") or self.loop or self.memory or self.target or self.target_attrs)

    def scheduled_funcs(self) -> list[str]:
        names: list[str] = []
        for layer in SCHEDULE_LAYERS:
            for name in getattr(self, layer):
                if name not in names:
                    names.append(name)
        return names

    def layer_traces(self, func: str) -> list[tuple[str, Trace]]:
        return [
            (layer, getattr(self, layer)[func]) for layer in SCHEDULE_LAYERS if func in getattr(self, layer)
        ]


@dataclass
class KernelSpec:
    problem: str
    module: str | None = None  # TVMScript IRModule: a full module, or PrimFuncs that replace the reference's
    decisions: Decisions = field(default_factory=Decisions)
    method: str = ""  # what produced it (e.g. "reference", "rules", "llm:gpt-x", "leka")
    notes: str = ""
    format_version: int = FORMAT_VERSION
    # Python text (from a model) defining `schedule(name, sch)`: run in the WORKER only, once per PrimFunc
    # of the module, on an s_tir.Schedule of it (ir/replay.py); never executed in the parent.
    schedule_code: str | None = None
    # how it was generated (model, template + hash, prompt hash, tokens, cost; a failed parse's text and
    # error under "parse_error" / "response"): data only, never executed
    metadata: dict = field(default_factory=dict)

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict:
        d = asdict(self)
        for key in ("schedule_code", "metadata"):  # omitted when unset: older specs keep their hash
            if not d[key]:
                d.pop(key)
        return d

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True)

    def hash(self) -> str:
        return hashlib.sha256(self.to_json(indent=None).encode()).hexdigest()[:16]

    @classmethod
    def from_dict(cls, d: dict, source: str = "spec") -> KernelSpec:
        if not isinstance(d, dict):
            raise MalformedCandidate(f"{source}: a spec must be a JSON object")
        version = d.get("format_version", FORMAT_VERSION)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise MalformedCandidate(f"{source}: 'format_version' must be a positive integer")
        if version > FORMAT_VERSION:
            raise MalformedCandidate(f"{source}: spec format {d['format_version']} is newer than this ekb")
        if not isinstance(d.get("problem"), str):
            raise MalformedCandidate(f"{source}: missing string field 'problem'")
        module = d.get("module")
        if module is not None and not isinstance(module, str):
            raise MalformedCandidate(f"{source}: 'module' must be TVMScript text")
        raw = d.get("decisions") or {}
        if not isinstance(raw, dict):
            raise MalformedCandidate(f"{source}: 'decisions' must be an object")
        unknown = set(raw) - {"graph", *SCHEDULE_LAYERS, "target_attrs", "workloads"}
        if unknown:
            raise MalformedCandidate(
                f"{source}: unknown decision layer(s) {sorted(unknown)}; layers are {LAYERS}"
            )
        try:
            dec = Decisions(**{k: v for k, v in raw.items()})
        except TypeError as e:
            raise MalformedCandidate(f"{source}: decisions: {e}") from None
        for layer in SCHEDULE_LAYERS:
            traces = getattr(dec, layer)
            if not isinstance(traces, dict):
                raise MalformedCandidate(f"{source}: decisions.{layer} must map PrimFunc names to traces")
            for func, trace in traces.items():
                _check_trace(trace, f"{source}: decisions.{layer}['{func}']")
        if not isinstance(dec.graph, dict) or not isinstance(dec.graph.get("passes", []), list):
            raise MalformedCandidate(f"{source}: decisions.graph must be {{'passes': [...]}}")
        code = d.get("schedule_code")
        if code is not None and not isinstance(code, str):
            raise MalformedCandidate(f"{source}: 'schedule_code' must be Python text")
        metadata = d.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise MalformedCandidate(f"{source}: 'metadata' must be an object")
        if metadata.get("parse_error"):  # a model answer without usable code: the candidate's failure
            raise MalformedCandidate(
                f"{source}: no usable code in the model's response: {metadata['parse_error']}"
            )
        if module is None and dec.is_empty() and not code:
            raise MalformedCandidate(
                f"{source}: a spec needs a 'module' or at least one decision (or 'schedule_code')"
            )
        return cls(
            problem=d["problem"],
            module=module,
            decisions=dec,
            method=str(d.get("method", "")),
            notes=str(d.get("notes", "")),
            format_version=int(d.get("format_version", FORMAT_VERSION)),
            schedule_code=code,
            metadata=metadata,
        )

    @classmethod
    def from_json(cls, text: str, source: str = "spec") -> KernelSpec:
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise MalformedCandidate(f"{source}: not valid JSON ({e.msg} at line {e.lineno})") from e
        except RecursionError:
            raise MalformedCandidate(f"{source}: JSON nested too deeply") from None
        try:
            return cls.from_dict(d, source)
        except MalformedCandidate:
            raise
        except (
            TypeError,
            ValueError,
            AttributeError,
            KeyError,
            RecursionError,
        ) as e:  # a value of the wrong type
            raise MalformedCandidate(f"{source}: malformed spec ({type(e).__name__}: {e})") from None


def _check_trace(trace, where: str) -> None:
    ok = (
        isinstance(trace, list)
        and len(trace) == 2
        and isinstance(trace[0], list)
        and isinstance(trace[1], list)
        and all(isinstance(i, list) and len(i) == 4 and isinstance(i[0], str) for i in trace[0])
    )
    if not ok:
        raise MalformedCandidate(f"{where}: a trace is [[[kind, inputs, attrs, outputs], ...], decisions]")


MAX_CANDIDATE_BYTES = 32 * 2**20  # a candidate file larger than this is not read


def load_candidate(path: Path, problem: str) -> KernelSpec:
    """Reads a candidate file: TVMScript (.py, .tvmscript) or a spec (.json)."""
    return read_candidate(path, problem)[0]


def read_candidate(path: Path, problem: str) -> tuple[KernelSpec, str]:
    """(the candidate, the SHA-256 of the bytes it was read from): one read, so the hash is of what is
    judged. The file is read as untrusted (files.read_regular: no symbolic link, a regular file of at most
    MAX_CANDIDATE_BYTES): an agent writes the run directory."""
    from ..files import UntrustedFileError, read_regular, sha256_hex

    path = Path(path)
    try:
        data = read_regular(path, MAX_CANDIDATE_BYTES)
        text = data.decode()
    except UntrustedFileError as e:
        raise MalformedCandidate(f"cannot read candidate: {e}") from None
    except UnicodeDecodeError as e:
        raise MalformedCandidate(f"{path}: cannot read candidate ({e})") from None
    return _parse_candidate(path, problem, text), sha256_hex(data)


def _parse_candidate(path: Path, problem: str, text: str) -> KernelSpec:
    if path.suffix == ".json":
        spec = KernelSpec.from_json(text, str(path))
        if spec.problem != problem:
            raise MalformedCandidate(
                f"{path}: spec is for problem '{spec.problem}', file is under '{problem}'"
            )
        return spec
    if path.suffix in (".py", ".tvmscript"):
        if not text.strip():
            raise MalformedCandidate(f"{path}: empty candidate file")
        return KernelSpec(problem=problem, module=text, method="tvmscript-file")
    raise MalformedCandidate(
        f"{path}: unknown candidate type '{path.suffix}' (use .py TVMScript or .json spec)"
    )
