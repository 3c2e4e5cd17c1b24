"""What the parent sends a worker: one candidate to judge on one backend."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from .timing import TimingConfig

DEFAULT_BASELINES = ("tvm-default", "onnxruntime")
KNOWN_BASELINES = ("tvm-default", "onnxruntime", "tvm-dlight")  # tvm-dlight: baselines/tvm_default.py
# The judging protocol's version: raised when what a verdict means changes (inputs, checks, baselines).
# 2: fresh seeds, stress inputs, rotated and checked timed calls, tvm-default as tvm.compile gives it.
JUDGE_PROTOCOL = 2


def judge_version() -> str:
    """The judge a result came from, as recorded in it: the protocol and the package's version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        package = version("edgekernelbench")
    except PackageNotFoundError:
        package = "unknown"
    return f"judge-{JUDGE_PROTOCOL} (edgekernelbench {package})"


@dataclass
class Job:
    problem: str
    sample: int
    backend: str
    spec: dict  # KernelSpec.to_dict()
    candidate: str = ""  # where it came from (file path), for the record
    threads: int = 1
    trials: int = 5
    seed: int | None = None  # None: the judge draws one from the OS after its runners started
    timing: dict = field(default_factory=lambda: asdict(TimingConfig()))
    baselines: list[str] = field(default_factory=lambda: list(DEFAULT_BASELINES))
    measure: bool = True  # time the candidate and baselines when it is correct
    # also time each kernel call of main (candidate and tvm-default); a list of kernel names: only the
    # candidate's calls of those kernels (an agent comparing one kernel's versions)
    profile: bool | list[str] = False
    tracker: str | None = None  # TVM RPC tracker HOST:PORT: run on a device under the profile's rpc_key
    timeout_s: float = 300.0  # the worker's wall-clock limit; a remote session gets the same
    # the native ONNX Runtime timer library, built by the parent (baselines/ort_native.py): the worker only
    # loads it; None: ONNX Runtime is timed from Python (I/O binding), and ort_timer_unavailable says why
    ort_timer_lib: str | None = None
    ort_timer_unavailable: str = ""
    # ONNX Runtime held to a pinned host profile's ISA (baselines/ort_isa.py: ISAPin.to_dict, planned by the
    # parent): the judge's process hides those CPUID bits before it loads onnxruntime; None: nothing to
    # hide, or it cannot be (ort_isa_unavailable says why)
    ort_isa: dict | None = None
    ort_isa_unavailable: str = ""
    # the C loop of the timed calls (backends/call_loop.py), built by the parent: the runners only load it;
    # None: they loop in Python, and call_loop_unavailable says why
    call_loop_lib: str | None = None
    call_loop_unavailable: str = ""
    # "evaluate" (judge the candidate) | "build" (the builder: materialize it, harness/builder.py) |
    # "floors" (harness/floors.py; no candidate)
    task: str = "evaluate"
    handoff: bool = False  # the judge gets the candidate module as JSON from the parent, via its stdin
    sandbox: dict | None = None  # Landlock paths the worker applies to itself (harness/sandbox.py)
    confirm: bool = False  # a fresh judge of an implausibly fast result: also time with poisoned outputs
    # the backend's profile as the parent resolved it (BackendProfile.to_dict, with `threads`): the worker
    # builds its backend from it; None (a Job written by hand): looked up by `backend` name
    backend_profile: dict | None = None
    # a warm judge's kernel cache (backends/kernel_cache.py): the judge compiles the candidate's kernels
    # one by one, each once per cache, and its runner links the graph with them; None: the runner builds
    kernel_cache: str | None = None

    def resolved_profile(self):
        """The BackendProfile this job runs on: the parent's (backend_profile), else looked up by name."""
        from ..backends.base import BackendProfile
        from ..backends.registry import get_profile

        if self.backend_profile:
            return BackendProfile.from_dict(self.backend_profile)
        return get_profile(self.backend, self.threads)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Job:
        return cls(**json.loads(text))
