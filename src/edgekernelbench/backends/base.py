"""The Backend abstraction: a named profile (TVM target, threads, how candidates run there) and the
operations the harness needs: build, move data, run kernel by kernel, run and time the graph.

A new kind of backend (cross-compiled and emulated, GPU, remote over TVM RPC) is a new file that
implements `Backend` and registers a profile; the harness does not change.
"""

from __future__ import annotations

import abc
from dataclasses import asdict, dataclass, field, replace

from ..errors import EKBError


@dataclass(frozen=True)
class BackendProfile:
    """A named backend as data (see data/profiles.toml): target, toolchain, resources, peaks, run mode."""

    name: str
    target: dict  # TVM target, JSON dict form ("mcpu": "native" = this machine's CPU)
    kind: str = "host"  # host | cross | gpu
    run: str = "local"  # local | emulated | remote | compile-only
    host: dict | None = None  # target host, for device targets
    threads: int = 1
    description: str = ""
    rpc_key: str | None = None  # devices registered under this key on a TVM RPC tracker
    cross_compiler: str | None = None
    toolchain_package: str | None = None  # Debian package that provides cross_compiler
    emulator: tuple[str, ...] = ()  # qemu-user command line prefix
    vector_bits: int = 128
    caches: dict = field(default_factory=dict)
    peak_flops: float | None = None  # FLOP/s; None until measured (`ekb peak`) or from a datasheet
    peak_bandwidth: float | None = None  # bytes/s (main memory)
    # per memory level, from `ekb peak`: [{level = "L1d", capacity = bytes, bandwidth = bytes/s,
    # working_set = bytes}, ..., {level = "DRAM", bandwidth = ...}] (DRAM has no capacity)
    peak_levels: list = field(default_factory=list)
    peak_source: str = ""
    source: str = "built-in"  # which file defined it
    extra: dict = field(default_factory=dict)

    @property
    def can_build(self) -> bool:
        return True

    @property
    def can_check(self) -> bool:
        return self.run in ("local", "emulated", "remote")

    @property
    def can_time(self) -> bool:
        return self.run in ("local", "remote")

    def uses_local_gpu(self, tracker: str | None = None) -> bool:
        """Candidates run on a GPU of this machine: a GPU profile with run = "local", unless a tracker
        may send them to a farm device of its rpc_key."""
        return self.kind == "gpu" and self.run == "local" and not (tracker and self.rpc_key)

    @property
    def vector_lanes(self) -> int:
        """float32 lanes of one vector register."""
        return max(1, self.vector_bits // 32)

    def with_threads(self, threads: int | None) -> BackendProfile:
        return self if not threads or threads == self.threads else replace(self, threads=threads)

    def to_dict(self) -> dict:
        """As JSON data (a Job carries the profile its parent resolved to the worker: harness/job.py)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> BackendProfile:
        return cls(**{**d, "emulator": tuple(d.get("emulator") or ())})


@dataclass
class Built:
    """A candidate built for a backend: the Relax VM executable (graph) and the kernel library."""

    graph: object  # tvm VMExecutable
    kernels: object  # tvm runtime module holding each PrimFunc under its name
    seconds: float = 0.0


class Backend(abc.ABC):
    def __init__(self, profile: BackendProfile):
        self.profile = profile

    @property
    def name(self) -> str:
        return self.profile.name

    @abc.abstractmethod
    def target(self, extra_attrs: dict | None = None):
        """The tvm.target.Target to build for."""

    @abc.abstractmethod
    def build(self, mod, extra_attrs: dict | None = None, stock: bool = False) -> Built:
        """Compiles a fused Relax module (Relax functions + PrimFuncs). `stock`: as tvm.compile builds it
        (TVM's default Relax pipeline for the target and its own TIR lowering: the "tvm-default"
        baseline), not with this project's lowering (tvm_env.compile)."""

    @abc.abstractmethod
    def session(self) -> Session:
        """Opens a place to run built modules (this process, an emulator, a remote device)."""


class DeviceFailure(EKBError):
    """The place a candidate runs failed in a way its error alone does not explain: a lost device
    (reason "infra"; `retry`: another device may do), a session the device ended after its time limit
    ("timeout"), or a session that died while the device stayed up ("crash")."""

    def __init__(self, reason: str, message: str, retry: bool = False):
        self.reason, self.retry = reason, retry
        super().__init__(message)


class Session(abc.ABC):
    device: object

    @abc.abstractmethod
    def to_device(self, array): ...

    @abc.abstractmethod
    def load(self, built: Built) -> Loaded: ...

    def diagnose(self, error: BaseException) -> DeviceFailure | None:
        """After `error` was raised while using this session: a DeviceFailure when the session or its
        device is at fault rather than the candidate, else None. Local sessions never are."""
        return None

    def describe(self) -> dict:
        """What the record should say about where it ran (e.g. the remote device), for Result.extra."""
        return {}


class Loaded(abc.ABC):
    """A built module loaded in a session: callable kernel by kernel, and as a whole graph."""

    kernels: object  # name -> callable PrimFunc

    @abc.abstractmethod
    def call(self, fname: str, args: list) -> list:
        """Runs Relax function `fname` through the VM; returns a flat list of output tensors."""

    @abc.abstractmethod
    def timer(self, fname: str, args: list):
        """Returns f(number) -> seconds per call over `number` back-to-back calls of `fname`."""

    @abc.abstractmethod
    def kernel_timer(self, kernel: str, args: list):
        """Like timer(), for one PrimFunc called with destination-passing arguments."""

    def poisoned_kernel_time(self, kernel: str, args: list, n_out: int, repeats: int) -> float:
        """Median seconds of single calls of `kernel`, its last `n_out` arguments (the outputs) refilled
        with a sentinel before each call, outside the timed region (harness/api.py check_plausible)."""
        raise NotImplementedError(f"{type(self).__name__} cannot refill outputs between timed calls")
