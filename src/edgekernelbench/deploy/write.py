"""The artifact's files: the weights, the model, the runner, the Relax VM library and the C program.

model.onnx      the model (verification runs ONNX Runtime on it)
model.so        the Relax VM executable with the kernels, for the target: a host shared library; for a
                cross profile linked by its cross gcc -- the form TVM RPC uploads to a board
weights/        the weights after main_transform_params (run once, at deploy time), raw bytes, one file
                each; and the C program's constants (const<k>.bin)
run.py          runs the model with TVM's runtime (libtvm_runtime.so via tvm_ffi) and NumPy only
c/              the whole model as a static C program (model.c, kernels.o, the driver's runtime
                ekb_driver.c, headers, build.sh) and the program build.sh made (c/model): cross profiles
                (for a board without a TVM runtime) and host profiles (the same form, measured here)
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import EKBError, last_line
from ..tvm_env import build_graph
from ..tvm_env import compile as tvm_compile
from .model import DeployError

RUNNER = Path(__file__).parent / "data" / "run.py"


def safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:60] or "w"


def write_weights(out: Path, params, weights: list[np.ndarray]) -> list[dict]:
    """weights/<k>_<name>.bin, raw bytes; their manifest entries."""
    (out / "weights").mkdir()
    entries = []
    for i, (p, w) in enumerate(zip(params, weights, strict=True)):
        file = f"weights/{i:03d}_{safe_name(p.name)}.bin"
        w.tofile(out / file)
        entries.append({"name": p.name, "shape": list(w.shape), "dtype": str(w.dtype), "file": file})
    return entries


def write_model_files(out: Path, problem) -> None:
    (out / "model.onnx").write_bytes(problem.model.SerializeToString())
    shutil.copy(RUNNER, out / "run.py")


def export_library(mod, target, profile, compiler: str | None, path: Path) -> dict:
    """The Relax VM executable for `target` as a shared library (cross: linked by the cross gcc)."""
    ex = build_graph(mod, target)  # as the judge built it (tvm_env.build_graph)
    if profile.kind == "cross":
        from tvm.support import cc as tvm_cc

        ex.export_library(str(path), fcompile=tvm_cc.cross_compiler(compiler))
        how = f"linked by {Path(compiler).name}: upload with TVM RPC to a {profile.name} board"
    else:
        ex.export_library(str(path))
    return {
        "file": path.name,
        "form": "Relax VM executable + kernels (tvm.compile, export_library)",
        "load": "tvm_ffi.load_module(file), libtvm_runtime.so loaded (run.py); or tvm.runtime.load_module",
        "runs_here": profile.kind == "host",
        **({"rpc": how} if profile.kind == "cross" else {}),
    }


@dataclass
class CProgramJob:
    """What the C program is built from and with."""

    mod: object  # the deployed graph module (main + kernels)
    target: object  # tvm.target.Target of the kernels
    compiler: str  # the C compiler (the profile's cross gcc, or the host's cc)
    title: str
    threads: int
    emulator: list[str]


def host_c_compiler(profile) -> tuple[str | None, str]:
    """(the host's C compiler, "") for a host profile's C program, or (None, why not)."""
    from ..native import c_compiler

    cc = c_compiler()
    if cc is None or not shutil.which(cc):
        return None, "no C compiler on this host ($CC, cc or gcc): the C program was not built"
    return cc, ""


def write_c_program(job: CProgramJob, out: Path, n_in: int, weights: list[dict]) -> dict:
    """c/: kernels.o (the PrimFuncs for the target), model.c (deploy/cprogram.py), the driver's runtime, the
    headers it needs, build.sh, and c/model built with the compiler (static). EKBError when it does not
    build."""
    from ..backends.cross import (
        CFLAGS,
        DRIVER_SOURCE,
        LDLIBS,
        kernel_symbol,
        object_symbols,
        tvm_include_dirs,
    )
    from ..backends.host import primfunc_library
    from .cprogram import model_program

    cdir = out / "c"
    cdir.mkdir()
    kernels = tvm_compile(primfunc_library(job.mod), job.target)
    kernels.mod.write_to_file(str(cdir / "kernels.o"))
    prog = model_program(
        job.mod["main"], n_in, [Path(w["file"]).name for w in weights], job.title, job.threads
    )
    symbols = object_symbols(cdir / "kernels.o", job.compiler)
    if symbols is not None:
        missing = [k for k in prog.kernels if symbols.get(kernel_symbol(k), "U") in "Uu"]
        if missing:
            raise DeployError(f"kernels.o lacks {[kernel_symbol(k) for k in missing]}")
    for name, value in prog.constants.items():
        value.tofile(out / "weights" / name)
    (cdir / "model.c").write_text(prog.source)
    shutil.copy(DRIVER_SOURCE, cdir / "ekb_driver.c")
    inc = cdir / "include"
    for d in tvm_include_dirs():
        for rel in ("tvm/ffi/c_api.h", "dlpack/dlpack.h"):
            if (d / rel).is_file() and not (inc / rel).exists():
                (inc / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(d / rel, inc / rel)
    cmd = [*CFLAGS, "-Iinclude", "model.c", "kernels.o", "-o", "model", *LDLIBS]
    script = (
        f"#!/bin/sh\n# Builds ./model (the whole model, static) for {job.title}: what `ekb deploy` ran.\n"
        f'set -e\ncd "$(dirname "$0")"\n${{CC:-{Path(job.compiler).name}}} {" ".join(cmd)}\n'
    )
    (cdir / "build.sh").write_text(script)
    os.chmod(cdir / "build.sh", 0o755)
    proc = subprocess.run([job.compiler, *cmd], cwd=cdir, capture_output=True, text=True)
    if proc.returncode != 0:
        raise EKBError(
            f"building the C program with {Path(job.compiler).name} failed: "
            f"{last_line(RuntimeError(proc.stderr))}"
        )
    return {
        "status": "built",
        "source": "c/model.c",
        "binary": "c/model",
        "build": "c/build.sh",
        "compiler": Path(job.compiler).name,
        "usage": "c/model [-r REPEAT] [-p PROFILE_RUNS] [-t THREADS] [-j STATS.json] weights IN_0.bin ... "
        "OUT_0.bin ... (raw tensors)",
        "constants": sorted(prog.constants),
        "kernel_calls": prog.calls,
        "buffers": prog.buffers,
        "buffer_bytes": prog.bytes,
        "emulator": list(job.emulator),
    }
