"""Peak FLOP/s and memory bandwidth of a backend, measured with TVM-built micro-kernels.

- FLOP/s: `chains` independent vector FMA chains of `lanes` float32 lanes, kept in vector registers,
  iterated `iters` times (2 FLOP per lane per FMA);
- bandwidth: y = 2 * x over a buffer much larger than the last-level cache (read + write bytes);
- on a GPU target the same two, bound to threads: every thread of a large grid runs the FMA chains in
  registers, and the scale kernel is one element per thread over at least 256 MiB (past any L2).
Both are what TVM-generated code reaches, so a roofline fraction of 1.0 means "as fast as TVM
can go on this core", not a datasheet figure. Run `python -m edgekernelbench.backends.peak --threads N`
in a fresh process so the thread pool has the profile's size.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Peak:
    flops: float  # FLOP/s
    bandwidth: float  # bytes/s
    threads: int
    target: str
    source: str = "measured: TVM micro-kernels (backends/peak.py)"


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


def _scale_kernel(n: int, threads: int):
    from tvm import s_tir, te

    a = te.placeholder((n,), "float32", name="A")
    b = te.compute((n,), lambda i: a[i] * 2.0, name="B")
    sch = s_tir.Schedule(te.create_prim_func([a, b]))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    io, ii = sch.split(i, [None, 64])
    if threads > 1:
        sch.parallel(io)
    sch.vectorize(ii)
    return sch.mod["main"]


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
    """The two micro-kernels built for a target: FLOPs of one fma call, elements of the scale buffer."""

    fma: object
    scale: object
    fma_elems: int
    fma_flops: float
    n: int


def _build(target, lanes: int, mib: int, threads: int) -> MicroKernels:
    """The micro-kernels compiled for `target`: CPU (a vector FMA loop per core, a parallel vectorized
    scale) or GPU (every thread of a large grid runs FMA chains; a thread-bound scale)."""
    import tvm

    n = mib * 2**20 // 4
    if target.kind.name == "llvm":
        fma_func, elems = _fma_kernel(CHAINS, lanes, ITERS), CHAINS * lanes
        flops = 2.0 * CHAINS * lanes * ITERS * threads  # one kernel per core: the scalar loop is not parallel
        scale_func = _scale_kernel(n, threads)
    else:
        fma_func = _gpu_fma_kernel(GPU_BLOCKS, GPU_THREADS, CHAINS, GPU_ITERS)
        elems = GPU_BLOCKS * GPU_THREADS * CHAINS
        flops = 2.0 * elems * GPU_ITERS
        n = max(n, 256 * 2**20 // 4)
        n -= n % GPU_THREADS
        scale_func = _gpu_scale_kernel(n, GPU_THREADS)
    fma = tvm.compile(tvm.IRModule({"main": fma_func.with_attr("global_symbol", "main")}), target)
    scale = tvm.compile(tvm.IRModule({"main": scale_func}), target)
    return MicroKernels(fma, scale, elems, flops, n)


def _time(fma, scale, k: MicroKernels, threads: int, dev, target_dict: dict, source: str) -> Peak:
    """Times the loaded kernels (runtime modules, local or remote) on `dev`."""
    import numpy as np
    import tvm

    n = k.n
    a = tvm.runtime.tensor(np.ones(k.fma_elems, "float32"), dev)
    x = tvm.runtime.tensor(np.array([0.999, 0.001], "float32"), dev)
    t = fma.time_evaluator("main", dev, number=3, repeat=7)(a, x).median
    flops = k.fma_flops / t
    src = tvm.runtime.tensor(np.ones(n, "float32"), dev)
    dst = tvm.runtime.empty((n,), "float32", dev)
    t = scale.time_evaluator("main", dev, number=2, repeat=7)(src, dst).median
    return Peak(
        flops=flops,
        bandwidth=8 * n / t,
        threads=threads,
        target=json.dumps(target_dict, sort_keys=True),
        source=source,
    )


def measure_peak(target_dict: dict, threads: int = 1, lanes: int = 16, mib: int = 64) -> Peak:
    """Measures on this machine: its CPU, or device 0 of a GPU target's kind; `target_dict` is the
    backend's TVM target (JSON dict)."""
    import tvm

    target = tvm.target.Target(target_dict)
    dev = tvm.cpu(0) if target.kind.name == "llvm" else tvm.device(target.kind.name, 0)
    k = _build(target, lanes, mib, threads)
    return _time(k.fma.mod, k.scale.mod, k, threads, dev, target_dict, Peak.source)


def measure_peak_remote(profile, tracker: str, lanes: int = 16, mib: int = 64) -> tuple[Peak, str]:
    """Measures on a device of the profile's rpc_key behind `tracker`: the kernels are built here for
    the profile's target, exported (cross compiler for a cross target), uploaded and timed there with
    the remote time_evaluator. Returns (the peaks, the device's "host:port")."""
    import tempfile
    from pathlib import Path

    from ..errors import EKBError, last_line
    from .host import resolve_target
    from .rpc import RPCBackend

    backend = RPCBackend(profile, tracker)
    threads = backend.profile.threads
    k = _build(backend.target(), lanes, mib, threads)
    session = backend.session()
    remote = session.connect()  # DeviceFailure (an EKBError) when the key has no device
    source = f"TVM micro-kernels over RPC on {session.server}"
    try:
        with tempfile.TemporaryDirectory(prefix="ekb-peak-") as tmp:
            mods = []
            for exe, stem in ((k.fma, "fma"), (k.scale, "scale")):
                path = Path(tmp, f"ekb_peak_{stem}.so")
                exe.export_library(str(path), fcompile=backend.fcompile())
                remote.upload(str(path), target=path.name)
                mods.append(remote.load_module(path.name))
        peak = _time(*mods, k, threads, session.device, resolve_target(backend.profile), source)
    except EKBError:
        raise
    except Exception as e:
        raise EKBError(f"peak measurement failed on {session.server}: {last_line(e, 500)}") from None
    return peak, session.server


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True, help="TVM target as JSON")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lanes", type=int, default=16)
    ap.add_argument("--mib", type=int, default=64, help="bandwidth buffer (MiB; larger than the LLC)")
    args = ap.parse_args(argv)
    print(json.dumps(asdict(measure_peak(json.loads(args.target), args.threads, args.lanes, args.mib))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
