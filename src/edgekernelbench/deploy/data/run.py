#!/usr/bin/env python3
"""Runs a model deployed by `ekb deploy` with TVM's runtime and NumPy only: no TVM compiler, no
edgekernelbench.

    python run.py input.npz [more.npz ...] [--out OUT.npz] [--repeat N] [--stats STATS.json]

Each input file holds one array per model input, by name (manifest.json "inputs"). The outputs of each go to
<input>.out.npz (or --out, for one input file), one array per model output, by name. --repeat N also runs
the first input N times, each timed, and prints the median milliseconds per run. --stats FILE writes, as
JSON: load_s (the runtime library, model.so, the VM and the weights loaded; runtime_s of it: importing
tvm_ffi and loading libtvm_runtime), first_s (the first run),
runs_s (each --repeat run), threads, and the process's resident memory in KiB: before loading the model
(Python and NumPy), after loading it, and its peak (Linux /proc/self/status; else getrusage's peak).

What it needs: numpy, the `apache-tvm-ffi` package (module loading, tensors) and TVM's runtime library
libtvm_runtime.so (the Relax VM). The library is found in $TVM_RUNTIME_LIBRARY, else in the lib/ directory of
an installed `tvm` package on sys.path, else by the dynamic loader. `import tvm` is never executed: it would
load libtvm_compiler.so as well.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
KDL_CPU = 1  # DLPack device type of the CPU
POOLED_ALLOCATOR = 2  # the Relax VM's allocator (tvm.relax.VirtualMachine.POOLED_ALLOCATOR)
ALIGN = 64  # bytes: TVM kernels may assume aligned buffers


class RunError(Exception):
    pass


def runtime_library() -> str:
    env = os.environ.get("TVM_RUNTIME_LIBRARY")
    if env:
        if not Path(env).is_file():
            raise RunError(f"TVM_RUNTIME_LIBRARY={env}: no such file")
        return env
    for entry in sys.path:
        for name in ("libtvm_runtime.so", "libtvm_runtime.dylib"):
            cand = Path(entry or ".") / "tvm" / "lib" / name
            if cand.is_file():
                return str(cand)
    found = ctypes.util.find_library("tvm_runtime")
    if found:
        return found
    raise RunError("libtvm_runtime.so not found: install TVM's runtime or set TVM_RUNTIME_LIBRARY")


def last_line(e: BaseException) -> str:
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else type(e).__name__


def aligned(array, np):
    """A C-contiguous copy of `array` whose data starts on an ALIGN-byte boundary."""
    array = np.asarray(array)
    raw = np.empty(array.nbytes + ALIGN, dtype=np.uint8)
    start = (-raw.ctypes.data) % ALIGN
    out = raw[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out


class Model:
    def __init__(self, folder: Path):
        import numpy as np

        self.np = np
        self.manifest = json.loads((folder / "manifest.json").read_text())
        os.environ.setdefault("TVM_NUM_THREADS", str(self.manifest["threads"]))
        t0 = time.perf_counter()
        import tvm_ffi

        ctypes.CDLL(runtime_library(), ctypes.RTLD_GLOBAL)  # registers the Relax VM's functions
        self.runtime_s = time.perf_counter() - t0  # importing tvm_ffi, loading libtvm_runtime
        self.ffi = tvm_ffi
        lib = folder / self.manifest["library"]["file"]
        try:
            self.module = tvm_ffi.load_module(str(lib))
        except Exception as e:  # e.g. a library cross-compiled for a board, loaded on the host
            where = self.manifest["target"].get("mtriple") or "the deploying host"
            raise RunError(f"cannot load {lib.name} (built for {where}): {last_line(e)}") from e
        self.vm = self.module["vm_load_executable"]()
        self.vm["vm_initialization"](KDL_CPU, 0, POOLED_ALLOCATOR)
        self.weights = []  # the NumPy arrays stay alive: the tensors share their memory
        for w in self.manifest["weights"]:
            arr = np.fromfile(folder / w["file"], dtype=w["dtype"]).reshape(w["shape"])
            self.weights.append(aligned(arr, np))
        self.weight_tensors = [tvm_ffi.from_dlpack(w) for w in self.weights]

    def inputs(self, feeds: dict) -> list:
        out = []
        for spec in self.manifest["inputs"]:
            if spec["name"] not in feeds:
                raise RunError(f"input '{spec['name']}' missing (the file has {sorted(feeds)})")
            arr = self.np.asarray(feeds[spec["name"]])
            if list(arr.shape) != list(spec["shape"]) or str(arr.dtype) != spec["dtype"]:
                raise RunError(
                    f"input '{spec['name']}' is {arr.dtype}{list(arr.shape)}; the model takes "
                    f"{spec['dtype']}{spec['shape']}"
                )
            out.append(aligned(arr, self.np))
        return out

    def run(self, arrays: list) -> dict:
        args = [self.ffi.from_dlpack(a) for a in arrays] + self.weight_tensors
        result = self.vm["main"](*args)
        flat = [result] if hasattr(result, "__dlpack__") else list(result)
        names = [o["name"] for o in self.manifest["outputs"]]
        # copies: the VM's pooled allocator reuses its output buffers on the next run
        return {n: self.np.array(self.np.from_dlpack(t)) for n, t in zip(names, flat, strict=True)}


def resident_kib() -> tuple[int | None, int | None]:
    """(resident, peak resident) KiB of this process: /proc/self/status VmRSS / VmHWM (Linux), else
    (None, getrusage's ru_maxrss)."""
    try:
        fields = dict(
            line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line
        )
        return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])
    except (OSError, KeyError, ValueError):
        import resource

        return None, int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+", type=Path, help="NPZ files: one array per model input")
    ap.add_argument("--out", type=Path, help="where the outputs go (one input file only)")
    ap.add_argument("--repeat", type=int, default=0, help="time N runs of the first input")
    ap.add_argument("--stats", type=Path, help="write load, first-run and per-run times and memory (JSON)")
    args = ap.parse_args(argv)
    try:
        if args.out and len(args.inputs) != 1:
            raise RunError("--out takes one input file")
        import numpy as np

        stats: dict = {"rss_before_load_kib": resident_kib()[0]}
        t0 = time.perf_counter()
        model = Model(HERE)
        stats.update(load_s=time.perf_counter() - t0, rss_after_load_kib=resident_kib()[0])
        stats["runtime_s"] = model.runtime_s
        stats["threads"] = int(os.environ.get("TVM_NUM_THREADS", model.manifest["threads"]))
        for path in args.inputs:
            with np.load(path) as f:
                feeds = {k: f[k] for k in f.files}
            arrays = model.inputs(feeds)
            t0 = time.perf_counter()
            outs = model.run(arrays)
            stats.setdefault("first_s", time.perf_counter() - t0)
            dest = args.out or path.with_name(path.name.removesuffix(".npz") + ".out.npz")
            np.savez(dest, **outs)
            shapes = ", ".join(f"{k} {v.dtype}{list(v.shape)}" for k, v in outs.items())
            print(f"{path.name} -> {dest.name}: {shapes}")
        if args.repeat > 0:
            with np.load(args.inputs[0]) as f:
                arrays = model.inputs({k: f[k] for k in f.files})
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                model.run(arrays)
                times.append(time.perf_counter() - t0)
            print(f"{args.repeat} runs: median {sorted(times)[len(times) // 2] * 1e3:.3f} ms per run")
            stats["runs_s"] = times
        if args.stats:
            stats["peak_rss_kib"] = resident_kib()[1]
            args.stats.write_text(json.dumps(stats) + "\n")
    except (RunError, OSError, ValueError, KeyError) as e:
        print(f"run.py: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 -- the runtime's errors end with their message
        print(f"run.py: error: {type(e).__name__}: {last_line(e)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
