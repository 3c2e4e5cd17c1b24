"""Shared record types: the Result of judging one candidate on one backend, its Timing and Correctness,
and the failure reasons. Every layer may import this module; it imports nothing of edgekernelbench."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

# Why a candidate failed. One reason per result; `detail` carries the text.
FAIL_REASONS = (
    "parse_error",  # the candidate file or module text could not be read
    "decision_error",  # a recorded decision did not apply to the reference
    "compile_error",  # TVM could not build the module
    "signature",  # wrong parameters, shapes, dtypes or number of outputs
    "forbidden",  # the IR uses a construct the judge does not build (harness/verify.py): not run
    "wrong_output",  # ran, but the output differs from the oracle
    "nan_output",  # left the sentinel (NaN) in some output element: wrote nothing / part
    "input_mutated",  # wrote into one of its inputs
    "runtime_error",  # a kernel raised at run time
    "crash",  # the worker process died (signal, abort)
    "timeout",  # the worker ran past its wall-clock limit
    "memory",  # the worker ran past its memory limit
    "infra",  # the harness itself failed (not the candidate's fault)
    "not_checked",  # compiled, but no device here to check it on (compile-only backend): not a verdict
)


@dataclass
class Timing:
    """One contender's timing: per-call seconds, median over `count` interleaved rounds."""

    median: float
    iqr: float  # interquartile range of the rounds
    min: float
    max: float
    count: int  # number of rounds
    number: int  # calls per round
    samples: list[float] = field(default_factory=list)  # seconds per call in each round, in round order

    @property
    def spread(self) -> float:
        return self.iqr / self.median if self.median else 0.0


@dataclass
class Correctness:
    correct: bool
    trials: int = 0
    max_abs_err: list[float] = field(default_factory=list)  # per output, worst over trials
    max_rel_err: list[float] = field(default_factory=list)
    first_failing_trial: int | None = None
    reason: str | None = None
    detail: str = ""
    inputs: list[str] = field(default_factory=list)  # each counted trial's distribution (harness/inputs.py)
    uncounted: list[str] = field(default_factory=list)  # trials left out: the oracle's output was not finite


@dataclass(frozen=True)
class Node:
    """Where a judgment ran: the machine (and, on a Ray cluster, the node), its CPU as the OS and LLVM name
    it, its ISA, and the CPUs its judge was pinned to (a core claimed for it on a cluster; () unpinned).
    `timing_core`: its timed phase ran on a core reserved for timing (cluster/cores.py)."""

    host: str
    ray_node: str = ""  # Ray's node id (hex); "" outside a cluster
    cpu_model: str = ""  # /proc/cpuinfo's name
    llvm_cpu: str = ""  # LLVM's name of the CPU ("znver3", "cascadelake")
    isa: tuple[str, ...] = ()  # the ISA extensions that matter to kernels (backends/hostinfo.ISA_FEATURES)
    cpus: tuple[int, ...] = ()
    timing_core: bool = False

    @property
    def label(self) -> str:
        """How a report names it: the host, and the first 8 digits of Ray's node id on a cluster."""
        return f"{self.host}/{self.ray_node[:8]}" if self.ray_node else self.host

    @classmethod
    def from_dict(cls, d: dict) -> Node:
        known = {f.name for f in dataclasses.fields(cls)}
        d = {k: v for k, v in d.items() if k in known}
        for k in ("isa", "cpus"):
            d[k] = tuple(d.get(k) or ())
        return cls(**d)


@dataclass
class Result:
    problem: str
    sample: int
    backend: str
    compiled: bool = False
    correct: bool = False
    reason: str | None = None  # one of FAIL_REASONS when not correct
    detail: str = ""  # compiler error text, failing check, ...
    correctness: Correctness | None = None
    runtime: Timing | None = None
    baselines: dict[str, Timing] = field(default_factory=dict)
    speedups: dict[str, float] = field(default_factory=dict)  # baseline time / candidate time
    # per baseline [low, high]: the 95% confidence interval of the speedup (median of the paired per-round
    # ratios, harness/timing.py); a speedup counts as fast at p only when low > p (metrics.verdict)
    speedup_ci: dict[str, list[float]] = field(default_factory=dict)
    timing_status: str = "not measured"  # measured | not measured | compile-only | skipped: <why>
    flops: int = 0
    bytes: int = 0
    compile_seconds: float = 0.0
    eval_seconds: float = 0.0
    candidate: str = ""  # file the candidate came from
    spec_hash: str = ""
    method: str = ""  # who made the candidate (free text from the spec)
    # the oracle that judged correctness: "onnxruntime" or "onnx-reference" (exact, for integer
    # arithmetic; edgekernelbench.oracle); "" when no output was checked, or in stores from before it
    oracle: str = ""
    # the judgment's input seed, drawn from the OS by the judge after the candidate's processes started and
    # recorded after the verdict (None: not judged, or a store from before it); `ekb eval --seed` replays it
    seed: int | None = None
    candidate_sha256: str = ""  # SHA-256 of the candidate's bytes as judged (its file, else its spec JSON)
    judge_version: str = ""  # the judge that gave the verdict (harness.job.judge_version())
    profile_sha256: str = ""  # SHA-256 of the backend profile the candidate was judged on (its content)
    node: Node | None = None  # where it was judged (None: a store from before it was recorded)
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Result:
        d = dict(d)
        if d.get("correctness"):
            d["correctness"] = Correctness(**d["correctness"])
        if d.get("runtime"):
            d["runtime"] = Timing(**d["runtime"])
        d["baselines"] = {k: Timing(**v) for k, v in (d.get("baselines") or {}).items()}
        if d.get("node"):
            d["node"] = Node.from_dict(d["node"])
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    def failure(self, reason: str, detail: str) -> Result:
        self.correct = False
        self.reason = reason
        self.detail = detail[-4000:]
        return self
