"""Shared record types: the Result of judging one candidate on one backend, its Timing and Correctness,
and the failure reasons. Every layer may import this module; it imports nothing of edgekernelbench."""

from __future__ import annotations

import dataclasses
import math
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
    "disk",  # the worker wrote more into its directory than it may (harness/isolation.py Limits.disk_mb)
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


def _known(cls, d: dict) -> dict:
    """The entries of `d` that are fields of the dataclass `cls` (a record written by a newer or older
    judge may carry others: they are left out, never an error)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in d.items() if k in names}


@dataclass(frozen=True)
class Roofline:
    """Where a timed candidate stands against the backend's roofs (metrics.roofline)."""

    achieved_flops: float  # FLOP/s
    achieved_bw: float  # bytes/s
    intensity: float | None  # FLOP/byte; None when bytes == 0 (inf intensity)
    attainable_flops: float | None  # min of the known roofs; None when no roof applies
    fraction: float | None  # achieved / attainable (memory-bound ops: achieved_bw / peak_bw)
    bound: str | None  # "compute" | "memory" | None (unknown)
    level: str | None = None  # memory level of the roof: "L1d", "L2", ..., "DRAM"; "memory" (one figure)
    peak_bw: float | None = None  # bytes/s of that level: the memory roof used
    flag: str | None = None  # "above_roof" when fraction > 1 (a measurement error, see `reason`)
    reason: str | None = None  # one line: which roof, by how much, the likely cause

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict | None) -> Roofline | None:
        """A record's roofline; a field it lacks (an older record) is None."""
        return cls(**{f.name: d.get(f.name) for f in dataclasses.fields(cls)}) if d else None


@dataclass(frozen=True)
class Plausibility:
    """Whether a correct, timed candidate's speed is one it can have (harness/api.check_plausible)."""

    status: str = "plausible"  # "plausible" | "implausible" | "implausible-confirmed" (a fresh judge agreed)
    seconds: float | None = None  # the candidate's median time judged
    stateless_ratio: float | None = None  # StatelessTiming.ratio
    bound_s: float | None = None  # the physical bound (metrics.time_bound)
    fresh_seconds: float | None = None  # a fresh judge's time (below the bound: judged again)
    poisoned_seconds: float | None = None  # its kernels on outputs poisoned before every call
    reason: str = ""

    @property
    def implausible(self) -> bool:
        """Never counted fast (metrics.verdict); "implausible-confirmed" is not: the bound was off."""
        return self.status == "implausible"

    @classmethod
    def from_dict(cls, d: dict | None) -> Plausibility | None:
        return cls(**_known(cls, d)) if d else None


@dataclass(frozen=True)
class TimingEnv:
    """What this machine did while a candidate was timed on it (harness/timing.MachineWatch)."""

    cpus: list[int] = field(default_factory=list)  # the CPUs watched: every CPU but the timing one
    other_cpus_busy: float | None = None  # their busy share over the timing (None: not readable)
    preemptions: int | None = None  # context switches of the timing thread
    seconds: float = 0.0  # how long the timing took
    disturbed: bool = False  # other_cpus_busy above harness.timing.DISTURBED_BUSY
    pinned_cpu: int | None = None  # the CPU the timing thread and the runners were pinned to
    round_trip_us: float | None = None  # a request to the candidate's runner process and back (timed there)
    request_overhead_us: float | None = None  # the fixed cost of a timed request, taken off its time

    @classmethod
    def from_dict(cls, d: dict | None) -> TimingEnv | None:
        return cls(**_known(cls, d)) if d else None


@dataclass(frozen=True)
class KernelTime:
    """One kernel of a module timed alone (a per-kernel profile: Runner.profile, the stateless timing)."""

    kernel: str
    median: float  # seconds per call
    flops: int = 0
    iqr: float = 0.0
    calls: int = 1  # calls of it in one run of main
    share: float = 0.0  # of the time of main's calls timed (median x calls)

    @property
    def per_run(self) -> float:
        """Seconds per run of main in this kernel's calls."""
        return self.median * self.calls

    @classmethod
    def from_dict(cls, d: dict) -> KernelTime:
        return cls(**_known(cls, d))


def kernel_times(rows) -> list[KernelTime]:
    """`rows` (KernelTimes, or dicts from a store or a runner process) as KernelTimes; a row that is not
    one (a runner runs the candidate's code: its replies are read as hostile) is left out."""
    out = []
    for r in rows if isinstance(rows, list) else []:
        if isinstance(r, KernelTime):
            out.append(r)
            continue
        if not (isinstance(r, dict) and isinstance(r.get("kernel"), str) and _number(r.get("median"))):
            continue
        num = {k: r[k] for k in ("flops", "iqr", "share") if _number(r.get(k))}
        calls = r.get("calls") if isinstance(r.get("calls"), int) and r["calls"] >= 1 else 1
        out.append(KernelTime(r["kernel"], float(r["median"]), calls=calls, **num))
    return out


def _number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


@dataclass(frozen=True)
class StatelessTiming:
    """The candidate's kernels, each on outputs overwritten before every call, against its timed calls in
    the same rounds (harness/runner.Runner.stateless): a ratio above metrics.STATE_FACTOR means it reuses
    what earlier calls left in memory."""

    ratio: float  # median over the rounds of kernels / timed calls
    seconds: float  # the kernels' sum (median)
    timed_s: float  # a timed call (median)
    rounds: int
    kernels: list[KernelTime] = field(default_factory=list)
    # the pool the kernels' scratch buffers came from: "ours" (overwritten before each call alone), "none"
    # (no scratch buffers), else TVM's and why (kept across calls: not checked)
    workspace: str = ""

    @classmethod
    def from_dict(cls, d: dict | None) -> StatelessTiming | None:
        if not d or d.get("ratio") is None:
            return None
        d = _known(cls, d)
        return cls(**{**d, "kernels": kernel_times(d.get("kernels"))})


# Result fields that records from before them kept in `extra` under these keys (read back by from_dict)
_MOVED_FROM_EXTRA = {
    "roofline": "roofline",
    "plausibility": "plausibility",
    "timing_env": "timing_env",
    "stateless_timing": "stateless",
    "kernels": "kernels",
}


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
        d = _known(cls, d)
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
    roofline: Roofline | None = None  # against the backend's roofs (metrics.result_roofline)
    plausibility: Plausibility | None = None  # a correct, timed candidate's (harness/api.check_plausible)
    timing_env: TimingEnv | None = None  # what the machine did while it was timed (a local backend)
    stateless: StatelessTiming | None = None  # its kernels on overwritten outputs vs its timed calls
    kernels: list[KernelTime] = field(default_factory=list)  # per-kernel profile, when asked (Job.profile)
    baseline_kernels: dict[str, list[KernelTime]] = field(default_factory=dict)  # each baseline's profile
    node: Node | None = None  # where it was judged (None: a store from before it was recorded)
    extra: dict = field(default_factory=dict)  # the rest: phases, isolation, runner, backend's notes, ...

    @property
    def implausible(self) -> bool:
        return bool(self.plausibility and self.plausibility.implausible)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Result:
        d = dict(d)
        extra = dict(d.get("extra") or {})
        for old, new in _MOVED_FROM_EXTRA.items():  # a record from before these were fields
            if old in extra and d.get(new) in (None, [], {}):
                d[new] = extra.pop(old)
        for key in [k for k in extra if k.startswith("kernels:")]:
            d.setdefault("baseline_kernels", {})[key.split(":", 1)[1]] = extra.pop(key)
        d["extra"] = extra
        if d.get("correctness"):
            d["correctness"] = Correctness(**d["correctness"])
        if d.get("runtime"):
            d["runtime"] = Timing(**d["runtime"])
        d["baselines"] = {k: Timing(**v) for k, v in (d.get("baselines") or {}).items()}
        d["roofline"] = Roofline.from_dict(d.get("roofline"))
        d["plausibility"] = Plausibility.from_dict(d.get("plausibility"))
        d["timing_env"] = TimingEnv.from_dict(d.get("timing_env"))
        d["stateless"] = StatelessTiming.from_dict(d.get("stateless"))
        d["kernels"] = kernel_times(d.get("kernels"))
        d["baseline_kernels"] = {k: kernel_times(v) for k, v in (d.get("baseline_kernels") or {}).items()}
        if d.get("node"):
            d["node"] = Node.from_dict(d["node"])
        return cls(**_known(cls, d))

    def failure(self, reason: str, detail: str) -> Result:
        self.correct = False
        self.reason = reason
        self.detail = detail[-4000:]
        return self
