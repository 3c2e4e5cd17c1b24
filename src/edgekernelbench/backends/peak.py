"""Peak FLOP/s and memory bandwidth of a backend, measured with TVM-built micro-kernels.

- FLOP/s: `chains` independent vector FMA chains of `lanes` float32 lanes, kept in vector registers,
  iterated `iters` times (2 FLOP per lane per FMA); on a CPU the best of 7 calls (see below);
- bandwidth, two figures per memory level (L1d, L2, L3, ... and DRAM), each over a working set sized to
  sit inside that level -- the cache sizes come from Linux sysfs on the host (`host_cache_levels`), or
  from the profile's `caches` table for a device measured elsewhere: "bandwidth", a read+write stream
  between two buffers (B = 2 * A, then A = 0.5 * B: as many bytes written as read), and
  "read_bandwidth", a read-only sum over one buffer (a kernel that mostly reads, e.g. a GEMV over its
  weights, is not bound by the read+write figure: see metrics.mix_bandwidth). Each kernel repeats its
  passes `reps` times inside one call, so an L1-sized working set is timed over ~128 MiB of traffic per
  call, far above the timer's resolution and with no call overhead per pass; the figure is the best of
  REPEAT calls (contention from other processes only ever slows a call, and a roof is a ceiling).
  DRAM's working set is two buffers of at least 64 MiB, each as large as the last-level cache;
- on a GPU target the same two, bound to threads: every thread of a large grid runs the FMA chains in
  registers, and the scale kernel is one element per thread over at least 256 MiB (past any L2): one
  bandwidth figure (DRAM).
Both are what TVM-generated code reaches, so a roofline fraction of 1.0 means "as fast as TVM
can go on this core", not a datasheet figure. Run `python -m edgekernelbench.backends.peak --threads N`
in a fresh process so the thread pool has the profile's size.
"""

from __future__ import annotations

import json
import logging
import math
import re
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..tvm_env import compile as tvm_compile

log = logging.getLogger(__name__)

SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
DRAM = "DRAM"
ROW = 64  # float32 per row of the stream kernel's buffers: one vectorized inner loop
CALL_BYTES = 128 * 2**20  # traffic of one timed call of the stream kernel in a cache level
MIN_DRAM_MIB = 64  # smallest DRAM buffer (each of two)
REPEAT = 7  # timed calls per cache level and kernel; the best is kept
DRAM_REPEAT = 3  # ... for DRAM, whose calls are long (and noisy only downwards, like the others)


@dataclass(frozen=True)
class Peak:
    flops: float  # FLOP/s
    bandwidth: float  # bytes/s: main memory (DRAM), the level of last resort
    threads: int
    target: str
    source: str = "measured: TVM micro-kernels (backends/peak.py)"
    # one dict per memory level, smallest first: {"level": "L1d" | "L2" | "L3" | ... | "DRAM",
    # "capacity": bytes the run's threads can keep there (None for DRAM), "bandwidth": bytes/s of the
    # read+write stream, "read_bandwidth": bytes/s of the read-only sum (CPU only), "working_set": bytes
    # the kernels kept there}; () in records from before levels existed
    levels: tuple = field(default=())
    # int8 ops/s (2 per multiply-add) of the u8 x s8 dot-product instruction, where the target has one (x86
    # VNNI: vpdpbusd, `_dot_kernel`); None elsewhere: integer problems are then held to `flops`
    int8_ops: float | None = None


@dataclass(frozen=True)
class MemLevel:
    """A memory level: its name and the bytes the run's threads can keep in it (None: main memory)."""

    name: str
    capacity: int | None


def _parse_size(text: str) -> int:
    """sysfs cache sizes: "48K" -> 49152, "2M", "107520K", or plain bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"not a cache size: {text!r}")
    return int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2).upper()]


def _cpu_count(cpulist: str) -> int:
    """ "0-3,8" -> 5 (a sysfs cpu list)."""
    n = 0
    for part in cpulist.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            n += int(hi or lo) - int(lo) + 1
    return n


def _scaled(levels: list[tuple[int, int, int | None]], threads: int) -> list[MemLevel]:
    """(level, bytes, CPUs sharing it or None) -> MemLevels for `threads` threads on distinct cores: a
    cache shared by k CPUs gives ceil(threads / k) copies of itself. Unknown sharing: the last level is
    shared by all, the others are private to a core."""
    out = []
    for i, (lvl, size, sharing) in enumerate(sorted(levels)):
        if sharing is None:
            sharing = threads if i == len(levels) - 1 else 1
        out.append(MemLevel("L1d" if lvl == 1 else f"L{lvl}", size * math.ceil(threads / max(1, sharing))))
    return out


def host_cache_levels(threads: int = 1, root: Path = SYSFS_CACHE) -> list[MemLevel]:
    """This machine's data caches from Linux sysfs (`root`/index*/{level,type,size,shared_cpu_list}):
    one MemLevel per level, smallest first (instruction caches skipped; capacities for `threads` threads,
    see `_scaled`). [] where sysfs says nothing (not Linux, some containers and Arm kernels); a level
    that sysfs lacks is simply absent."""
    found: dict[int, tuple[int, int | None]] = {}
    for d in sorted(Path(root).glob("index*")):
        try:
            if (d / "type").read_text().strip() == "Instruction":
                continue
            lvl, size = int((d / "level").read_text()), _parse_size((d / "size").read_text())
        except (OSError, ValueError):
            continue
        try:
            sharing = _cpu_count((d / "shared_cpu_list").read_text())
        except (OSError, ValueError):
            sharing = None
        if size > 0 and size > found.get(lvl, (0, None))[0]:
            found[lvl] = (size, sharing)
    return _scaled([(lvl, size, sh) for lvl, (size, sh) in found.items()], threads)


def profile_cache_levels(caches: dict, threads: int = 1) -> list[MemLevel]:
    """The levels of a profile's `caches` table ({l1d_kib = 32, l2_kib = 1024, l3_kib = ...}), for a
    device measured elsewhere (over RPC) or a host whose sysfs says nothing."""
    levels = []
    for key, kib in (caches or {}).items():
        m = re.fullmatch(r"l(\d)d?_kib", key)
        if m and isinstance(kib, int | float) and kib > 0:
            levels.append((int(m.group(1)), int(kib * 1024), None))
    return _scaled(levels, threads)


def cache_levels(threads: int = 1, fallback: dict | None = None, root: Path = SYSFS_CACHE) -> list[MemLevel]:
    """The cache levels to measure on this machine: sysfs's, else the profile table `fallback`'s, else
    none (then only DRAM is measured, with the default buffer)."""
    levels = host_cache_levels(threads, root)
    if not levels and fallback:
        log.info("no cache sizes in %s: using the profile's caches table %s", root, fallback)
        levels = profile_cache_levels(fallback, threads)
    return levels


@dataclass(frozen=True)
class LevelRun:
    """How one level is measured: `threads` slices of `rows` x ROW float32 (`rows` even) in each of two
    buffers for the stream kernel, `reps` ping-pong repetitions inside one call; the read kernel sums one
    buffer of the same working set, `read_reps` times."""

    level: MemLevel
    rows: int
    reps: int
    threads: int

    @property
    def working_set(self) -> int:
        return 2 * self.threads * self.rows * ROW * 4

    @property
    def bytes_per_call(self) -> int:
        return 2 * self.reps * self.working_set  # per repetition: two passes, each reads and writes ws/2

    @property
    def read_reps(self) -> int:
        return max(1, math.ceil(self.bytes_per_call / self.working_set))  # about the same traffic

    @property
    def read_bytes_per_call(self) -> int:
        return self.read_reps * self.working_set


def bandwidth_plan(levels: list[MemLevel], threads: int = 1, mib: int | None = None) -> list[LevelRun]:
    """A LevelRun per cache level plus DRAM. A cache level's working set is half its capacity for the
    first level; for the next ones the geometric mean of the previous capacity and its own (clearly past
    the previous level, yet well inside this one: a VM's share of a socket-wide LLC is smaller than what
    sysfs reports), at most half its capacity. DRAM: `mib` MiB per buffer, by default the larger of
    MIN_DRAM_MIB and the last cache level (so the working set is twice that level: a stream over it
    misses it on every line)."""
    runs: list[LevelRun] = []
    prev = 0
    row_pair = 2 * threads * ROW * 4  # bytes of one row in each buffer, for all threads
    for lv in levels:
        cap = lv.capacity
        if not cap or cap <= prev:  # not larger than the level below: nothing to measure
            continue
        ws = cap // 2 if not prev else min(cap // 2, max(2 * prev, int(math.sqrt(prev * cap))))
        if ws <= prev:
            ws = (prev + cap) // 2
        rows = max(2, ws // row_pair // 2 * 2)  # even: the read kernel takes rows two at a time
        reps = max(1, math.ceil(CALL_BYTES / (2 * rows * row_pair)))
        runs.append(LevelRun(lv, rows, reps, threads))
        prev = cap
    per_buffer = mib * 2**20 if mib else max(MIN_DRAM_MIB * 2**20, prev)
    if mib and per_buffer < prev:
        log.warning("a %d MiB DRAM buffer fits in the last cache level (%d bytes)", mib, prev)
    rows = max(2, per_buffer // (threads * ROW * 4) // 2 * 2)
    runs.append(LevelRun(MemLevel(DRAM, None), rows, 1, threads))
    return runs


def _fma_kernel(chains: int, lanes: int, iters: int):
    """`chains` independent FMA chains of `lanes` float32 lanes, updated in place in A: A is a noalias
    parameter, so LLVM keeps the chains in vector registers across the iteration loop (a local buffer
    would be a workspace allocation, its loads and stores kept, at less than half the peak)."""
    from tvm.script import tirx as T

    n = chains * lanes

    @T.prim_func
    def fma(A: T.Buffer((n,), "float32"), X: T.Buffer((2,), "float32")):
        T.func_attr({"tirx.noalias": True})
        for _ in range(iters):
            for c in T.unroll(chains):
                for lane in T.vectorized(lanes):
                    A[c * lanes + lane] = A[c * lanes + lane] * (
                        T.float32(1) - X[0] * X[0] * T.float32(0.0001)
                    ) + X[1] * T.float32(0.5)

    return fma


def _dot_kernel(chains: int, iters: int):
    """`chains` independent int32x16 accumulators, each updated by vpdpbusd (64 u8 x s8 products summed 4
    by 4 into 16 lanes) per iteration, in place in the noalias buffer A (kept in registers, like
    `_fma_kernel`'s chains); the bytes multiplied come from X (loop-invariant, loaded once)."""
    from tvm.script import tirx as T

    from ..ir.int8_dot import VPDPBUSD

    n = chains * DOT_LANES

    @T.prim_func
    def dot(A: T.Buffer((n,), "int32"), X: T.Buffer((2 * DOT_BYTES,), "int8")):
        T.func_attr({"tirx.noalias": True})
        for _ in range(iters):
            for c in T.unroll(chains):
                A[T.ramp(c * DOT_LANES, 1, DOT_LANES)] = T.call_llvm_pure_intrin(
                    T.llvm_lookup_intrinsic_id(VPDPBUSD),
                    A[T.ramp(c * DOT_LANES, 1, DOT_LANES)],
                    X[T.ramp(0, 1, DOT_BYTES)],
                    X[T.ramp(DOT_BYTES, 1, DOT_BYTES)],
                    dtype="int32x16",
                )

    return dot


DOT_LANES, DOT_BYTES = 16, 64  # int32 lanes of one vpdpbusd, and the bytes of each of its two operands


def measure_int8_ops(target, chains: int = 12, iters: int = 100_000) -> float | None:
    """int8 ops/s of one core's dot-product instruction (2 per multiply-add: vpdpbusd does 64), the best of
    7 calls, on a target with VNNI (this machine's CPU); None without it."""
    import tvm

    target = _vnni_target(target)
    if target is None:
        return None
    mod, args, ops = _dot_build(target, chains, iters)
    t = min(mod.time_evaluator("main", tvm.cpu(0), number=1, repeat=7)(*args).results)
    return ops / t


def _vnni_target(target):
    """`target` (a tvm Target or its dict) as a Target when it has VNNI, else None."""
    import tvm

    from ..ir.int8_dot import target_has_vnni

    target = tvm.target.Target(target) if isinstance(target, dict) else target
    return target if target_has_vnni(target) else None


def _dot_build(target, chains: int = 12, iters: int = 100_000):
    """`_dot_kernel` built for `target` (on this CPU): (runtime module, its arguments, int8 ops per call)."""
    import numpy as np
    import tvm

    func = _dot_kernel(chains, iters).with_attr("global_symbol", "main")
    ex = tvm_compile(tvm.IRModule({"main": func}), target)
    dev = tvm.cpu(0)
    a = tvm.runtime.tensor(np.zeros(chains * DOT_LANES, "int32"), dev)
    x = tvm.runtime.tensor(np.ones(2 * DOT_BYTES, "int8"), dev)
    return ex.mod, [a, x], 2.0 * DOT_BYTES * chains * iters


def int8_contender(target):
    """`measure_int8_ops`'s micro-kernel as a contender of harness.timing's protocol (like `peak_contender`)
    and its int8 ops per call; None on a target without VNNI."""
    import tvm

    from .host import evaluator_timer

    target = _vnni_target(target)
    if target is None:
        return None
    mod, args, ops = _dot_build(target)
    return evaluator_timer(mod, "main", tvm.cpu(0), args), ops


def _stream_kernel(threads: int):
    """B = 2 * A, then A = 0.5 * B, `reps` times; A and B are (threads, m, ROW) float32 with m given at
    run time, each thread streaming its own slice (so private caches stay private). The second pass
    reads what the first wrote, so no repetition can be dropped; the values stay 1.0 (no denormals)."""
    from tvm.script import tirx as T

    loop = T.parallel if threads > 1 else T.serial

    @T.prim_func
    def stream(a: T.handle, b: T.handle, reps: T.int32):
        T.func_attr({"tirx.noalias": True})
        m = T.int32()
        A = T.match_buffer(a, (threads, m, ROW), "float32")
        B = T.match_buffer(b, (threads, m, ROW), "float32")
        for p in loop(threads):
            for _r in range(reps):
                for i in range(m):
                    for j in T.vectorized(ROW):
                        B[p, i, j] = A[p, i, j] * T.float32(2)
                for i in range(m):
                    for j in T.vectorized(ROW):
                        A[p, i, j] = B[p, i, j] * T.float32(0.5)

    return stream


def _read_kernel(threads: int):
    """O[p] += the rows of A[p], two rows (2 x ROW lanes: enough independent add chains to keep the
    loads busy) at a time, `reps` times; A is (threads, m, ROW) float32, m even, given at run time. O is
    a noalias parameter, so LLVM keeps its rows in vector registers across the loop (as in the FMA
    kernel); every load of A is used, so none can be dropped."""
    from tvm.script import tirx as T

    loop = T.parallel if threads > 1 else T.serial

    @T.prim_func
    def read(a: T.handle, o: T.handle, reps: T.int32):
        T.func_attr({"tirx.noalias": True})
        m = T.int32()
        A = T.match_buffer(a, (threads, m, ROW), "float32")
        O = T.match_buffer(o, (threads, 2, ROW), "float32")
        for p in loop(threads):
            for _r in range(reps):
                for i in range(m // 2):
                    for j in T.vectorized(ROW):
                        O[p, 0, j] = O[p, 0, j] + A[p, 2 * i, j]
                    for j in T.vectorized(ROW):
                        O[p, 1, j] = O[p, 1, j] + A[p, 2 * i + 1, j]

    return read


# GPU micro-kernels: every thread of GPU_BLOCKS x GPU_THREADS keeps CHAINS accumulators in registers
GPU_BLOCKS, GPU_THREADS, GPU_ITERS = 1024, 256, 4096


def _gpu_fma_kernel(blocks: int, tpb: int, chains: int, iters: int):
    from tvm.script import tirx as T

    n = blocks * tpb * chains

    @T.prim_func
    def fma(A: T.Buffer((n,), "float32"), X: T.Buffer((2,), "float32")):
        for b in T.thread_binding(blocks, thread="blockIdx.x"):
            for t in T.thread_binding(tpb, thread="threadIdx.x"):
                acc = T.alloc_buffer((chains,), "float32", scope="local")
                s0 = T.float32(1) - X[0] * X[0] * T.float32(0.0001)
                s1 = X[1] * T.float32(0.5)
                for c in T.unroll(chains):
                    acc[c] = A[(b * tpb + t) * chains + c]
                for _ in range(iters):
                    for c in T.unroll(chains):
                        acc[c] = acc[c] * s0 + s1
                for c in T.unroll(chains):
                    A[(b * tpb + t) * chains + c] = acc[c]

    return fma


def _gpu_scale_kernel(n: int, tpb: int):
    from tvm import s_tir, te

    a = te.placeholder((n,), "float32", name="A")
    b = te.compute((n,), lambda i: a[i] * 2.0, name="B")
    sch = s_tir.Schedule(te.create_prim_func([a, b]))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    bx, tx = sch.split(i, [None, tpb])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return sch.mod["main"]


CHAINS, ITERS = 8, 100_000


@dataclass(frozen=True)
class MicroKernels:
    """The micro-kernels built for a target: FLOPs of one fma call; the bandwidth kernels (CPU: the
    stream and read kernels, measured per level of `plan`; GPU: the scale kernel over `n` elements)."""

    fma: object
    scale: object
    fma_elems: int
    fma_flops: float
    n: int  # float32 elements of one DRAM buffer
    plan: tuple[LevelRun, ...] = ()  # CPU only
    read: object = None  # CPU only


def _build(target, lanes: int, mib: int | None, threads: int, levels: list[MemLevel] = ()) -> MicroKernels:
    """The micro-kernels compiled for `target`: CPU (a vector FMA loop per core; the stream and read
    kernels, timed over a working set per level of `levels` and DRAM, see `bandwidth_plan`) or GPU
    (every thread of a large grid runs FMA chains; a thread-bound scale over at least 256 MiB).
    `mib`: DRAM buffer (None: auto)."""
    import tvm

    if target.kind.name == "llvm":
        fma_func, elems = _fma_kernel(CHAINS, lanes, ITERS), CHAINS * lanes
        flops = 2.0 * CHAINS * lanes * ITERS * threads  # one kernel per core: the scalar loop is not parallel
        plan = tuple(bandwidth_plan(list(levels), threads, mib))
        n = plan[-1].rows * threads * ROW
        scale_func = _stream_kernel(threads)
        read_func = _read_kernel(threads)
    else:
        fma_func = _gpu_fma_kernel(GPU_BLOCKS, GPU_THREADS, CHAINS, GPU_ITERS)
        elems = GPU_BLOCKS * GPU_THREADS * CHAINS
        flops = 2.0 * elems * GPU_ITERS
        n = max((mib or 0) * 2**20 // 4, 256 * 2**20 // 4)
        n -= n % GPU_THREADS
        plan, read_func = (), None
        scale_func = _gpu_scale_kernel(n, GPU_THREADS)

    def build(func):
        return tvm_compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target)

    read = build(read_func) if read_func is not None else None
    return MicroKernels(build(fma_func), build(scale_func), elems, flops, n, plan, read)


def _level(name: str, capacity: int | None, bandwidth: float, working_set: int, read_bw=None) -> dict:
    d = {"level": name, "capacity": capacity, "bandwidth": bandwidth, "working_set": working_set}
    if read_bw is not None:
        d["read_bandwidth"] = read_bw
    return d


def _time(fma, scale, k: MicroKernels, threads: int, dev, target_dict: dict, source: str, read=None) -> Peak:
    """Times the loaded kernels (runtime modules, local or remote) on `dev`: FLOP/s, then per planned
    level the stream kernel (`scale`) and the read kernel (`read`): one call moves `bytes_per_call`
    (`read_bytes_per_call`); the best of REPEAT calls after the time evaluator's warm-up call."""
    import numpy as np
    import tvm

    def best(mod, repeat, *args) -> float:
        return min(mod.time_evaluator("main", dev, number=1, repeat=repeat)(*args).results)

    a = tvm.runtime.tensor(np.ones(k.fma_elems, "float32"), dev)
    x = tvm.runtime.tensor(np.array([0.999, 0.001], "float32"), dev)
    fma_results = fma.time_evaluator("main", dev, number=3, repeat=7)(a, x).results
    # CPU: the best of the repeats, like the bandwidths (a roof measured during contention would be low)
    t = min(fma_results) if k.plan else sorted(fma_results)[len(fma_results) // 2]
    flops = k.fma_flops / t
    levels = []
    if k.plan:
        for run in k.plan:
            repeat = DRAM_REPEAT if run.level.capacity is None else REPEAT
            shape = (threads, run.rows, ROW)
            src = tvm.runtime.tensor(np.ones(shape, "float32"), dev)
            dst = tvm.runtime.empty(shape, "float32", dev)  # written before it is read
            bw = run.bytes_per_call / best(scale, repeat, src, dst, run.reps)
            del src, dst
            whole = tvm.runtime.tensor(np.ones((threads, 2 * run.rows, ROW), "float32"), dev)
            acc = tvm.runtime.tensor(np.zeros((threads, 2, ROW), "float32"), dev)
            read_bw = run.read_bytes_per_call / best(read, repeat, whole, acc, run.read_reps)
            del whole, acc
            levels.append(_level(run.level.name, run.level.capacity, bw, run.working_set, read_bw))
    else:  # GPU: one scale pass over n elements (read n, write n)
        src = tvm.runtime.tensor(np.ones(k.n, "float32"), dev)
        dst = tvm.runtime.empty((k.n,), "float32", dev)
        t = scale.time_evaluator("main", dev, number=2, repeat=7)(src, dst).median
        levels.append(_level(DRAM, None, 8 * k.n / t, 8 * k.n))
    return Peak(
        flops=flops,
        bandwidth=levels[-1]["bandwidth"],
        threads=threads,
        target=json.dumps(target_dict, sort_keys=True),
        source=source,
        levels=tuple(levels),
    )


def target_lanes(target) -> int:
    """float32 lanes of the widest vectors an LLVM target (a Target or its dict) has
    (hostinfo.vector_bits_of): the FMA micro-kernel's vectors. Wider ones are legalized into several
    registers each, and its chains then spill: on an AVX2 host, 16-lane chains measured 25.8 GFLOP/s, a
    third of the core's peak."""
    from .hostinfo import target_features, vector_bits_of

    t = target if isinstance(target, dict) else dict(target.export())
    return vector_bits_of(target_features(t)) // 32


def measure_peak(
    target_dict: dict,
    threads: int = 1,
    lanes: int | None = None,
    mib: int | None = None,
    caches: dict | None = None,
    sysfs: Path = SYSFS_CACHE,
) -> Peak:
    """Measures on this machine: its CPU, or device 0 of a GPU target's kind; `target_dict` is the
    backend's TVM target (JSON dict). CPU cache levels from `sysfs`, else the profile table `caches`."""
    import tvm

    target = tvm.target.Target(target_dict)
    cpu = target.kind.name == "llvm"
    dev = tvm.cpu(0) if cpu else tvm.device(target.kind.name, 0)
    levels = cache_levels(threads, caches, sysfs) if cpu else []
    lanes = lanes or (target_lanes(target_dict) if cpu else 16)
    k = _build(target, lanes, mib, threads, levels)
    read = k.read.mod if k.read is not None else None
    peak = _time(k.fma.mod, k.scale.mod, k, threads, dev, target_dict, Peak.source, read)
    int8 = measure_int8_ops(target) if cpu and threads == 1 else None  # one core's; the kernel is serial
    return replace(peak, int8_ops=int8) if int8 else peak


def peak_contender(target, lanes: int | None = None):
    """The FLOP/s micro-kernel of `measure_peak` as a contender of harness.timing's protocol (a callable
    run(number) -> seconds per call) on this machine's CPU, and its FLOPs per call. Timed in the same
    interleaved rounds as a kernel, it gives that kernel's fraction of peak under the conditions the
    kernel ran in (harness.timing.fraction_of_peak), where the recorded peak is a best-of-REPEAT ceiling."""
    import numpy as np
    import tvm

    from .host import evaluator_timer

    target = tvm.target.Target(target) if isinstance(target, dict) else target  # a JSON dict or a Target
    if target.kind.name != "llvm":
        raise ValueError(f"peak_contender times on this CPU only, not on {target.kind.name}")
    lanes = lanes or target_lanes(target)
    func = _fma_kernel(CHAINS, lanes, ITERS).with_attr("global_symbol", "main")
    ex = tvm_compile(tvm.IRModule({"main": func}), target)
    dev = tvm.cpu(0)
    a = tvm.runtime.tensor(np.ones(CHAINS * lanes, "float32"), dev)
    x = tvm.runtime.tensor(np.array([0.999, 0.001], "float32"), dev)
    return evaluator_timer(ex.mod, "main", dev, [a, x]), 2.0 * CHAINS * lanes * ITERS


def measure_peak_remote(
    profile, tracker: str, lanes: int | None = None, mib: int | None = None
) -> tuple[Peak, str]:
    """Measures on a device of the profile's rpc_key behind `tracker`: the kernels are built here for
    the profile's target, exported (cross compiler for a cross target), uploaded and timed there with
    the remote time_evaluator; the cache levels are the profile's `caches` table (the board's sysfs is
    not read). Returns (the peaks, the device's "host:port")."""
    import tempfile

    from ..errors import EKBError, last_line
    from .host import resolve_target
    from .rpc import RPCBackend

    backend = RPCBackend(profile, tracker)
    threads = backend.profile.threads
    target = backend.target()
    levels = profile_cache_levels(backend.profile.caches, threads) if target.kind.name == "llvm" else []
    lanes = lanes or (target_lanes(resolve_target(backend.profile)) if target.kind.name == "llvm" else 16)
    k = _build(target, lanes, mib, threads, levels)
    session = backend.session()
    remote = session.connect()  # DeviceFailure (an EKBError) when the key has no device
    source = f"TVM micro-kernels over RPC on {session.server}"
    try:
        with tempfile.TemporaryDirectory(prefix="ekb-peak-") as tmp:
            mods = {}
            for exe, stem in ((k.fma, "fma"), (k.scale, "scale"), (k.read, "read")):
                if exe is None:
                    continue
                path = Path(tmp, f"ekb_peak_{stem}.so")
                exe.export_library(str(path), fcompile=backend.fcompile())
                remote.upload(str(path), target=path.name)
                mods[stem] = remote.load_module(path.name)
        target_dict = resolve_target(backend.profile)
        peak = _time(
            mods["fma"], mods["scale"], k, threads, session.device, target_dict, source, mods.get("read")
        )
    except EKBError:
        raise
    except Exception as e:
        raise EKBError(f"peak measurement failed on {session.server}: {last_line(e, 500)}") from None
    return peak, session.server


def profile_peak(profile, threads: int) -> dict | None:
    """The profile's own peaks when `ekb peak` measured them (peak_source "measured: ...") with this
    thread count (or a source that names none), with its per-level bandwidths (`peak_levels`) when it
    has them; else None."""
    if not (profile.peak_flops and profile.peak_bandwidth and profile.peak_source.startswith("measured")):
        return None
    m = re.search(r"(\d+) thread", profile.peak_source)
    if m and int(m.group(1)) != threads:
        return None
    return {
        "flops": float(profile.peak_flops),
        "bandwidth": float(profile.peak_bandwidth),
        "threads": threads,
        "target": json.dumps(profile.target, sort_keys=True),
        "source": profile.peak_source,
        "levels": peak_levels_from_profile(profile.peak_levels),
    }


def peak_levels_from_profile(rows) -> list[dict]:
    """A profile's `peak_levels` (TOML inline tables; DRAM has no capacity key) as a peak record's
    ``levels``: [{"level", "capacity" (None: unbounded), "bandwidth", "working_set"}], smallest first."""
    out = []
    for row in rows or ():
        out.append(
            {
                "level": str(row["level"]),
                "capacity": int(row["capacity"]) if row.get("capacity") is not None else None,
                "bandwidth": float(row["bandwidth"]),
                "working_set": int(row["working_set"]) if row.get("working_set") is not None else None,
                **({"read_bandwidth": float(row["read_bandwidth"])} if row.get("read_bandwidth") else {}),
            }
        )
    return out


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True, help="TVM target as JSON")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--lanes", type=int, help="float32 lanes of the FMA chains (default: the target's widest vectors)"
    )
    ap.add_argument(
        "--mib", type=int, help="DRAM buffer, each of two (MiB; default: max(64, the last-level cache))"
    )
    ap.add_argument("--caches", help="the profile's caches table (JSON), used when sysfs has no cache sizes")
    args = ap.parse_args(argv)
    caches = json.loads(args.caches) if args.caches else None
    peak = measure_peak(json.loads(args.target), args.threads, args.lanes, args.mib, caches)
    print(json.dumps(asdict(peak)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
