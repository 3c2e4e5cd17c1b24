"""Small C libraries the harness builds once per user and loads with ctypes: the native ONNX Runtime timer
(baselines/ort_native.py) and the TVM call loop (backends/call_loop.py).

Each is compiled from a C source shipped in the package with the host C compiler ($CC, else cc or gcc)
into a per-user cache ($EKB_NATIVE_CACHE, else ~/.cache/edgekernelbench/), under a name keyed by the
source's hash and what else it depends on; the file appears by an atomic rename, so concurrent builders
are safe. The harness's PARENT process builds a library and hands its path to a worker, which only loads
it: a worker may not write outside its job directory."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .errors import EKBError

CACHE_ENV = "EKB_NATIVE_CACHE"
BUILD_TIMEOUT_S = 120.0


class NativeBuildError(EKBError):
    """A native library cannot be built here; str(e) is why, in one line."""


def cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "edgekernelbench"


def c_compiler() -> str | None:
    env = os.environ.get("CC")
    if env:
        return shutil.which(env) or env
    return shutil.which("cc") or shutil.which("gcc")


def source_key(source: Path, *depends: str) -> str:
    """16 hex digits of the source's bytes and the versions (or paths) it is built against."""
    h = hashlib.sha256(source.read_bytes())
    for d in depends:
        h.update(b"\0" + d.encode())
    return h.hexdigest()[:16]


def build_shared(
    source: Path, stem: str, key: str, what: str, flags: list[str] = (), cache: Path | None = None
) -> Path:
    """`source` compiled into cache/<stem>-<key>.so (or .dylib) the first time; the path. `what` names the
    library in errors; `flags` come after the source (include dirs, libraries). Raises NativeBuildError."""
    cache = Path(cache) if cache is not None else cache_dir()
    suffix = ".dylib" if os.uname().sysname == "Darwin" else ".so"
    out = cache / f"{stem}-{key}{suffix}"
    if out.is_file():
        return out
    cc = c_compiler()
    if not cc:
        raise NativeBuildError(f"no C compiler ($CC, cc or gcc) to build {what}")
    try:
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache, prefix=f".{stem}-", suffix=suffix)
        os.close(fd)
    except OSError as e:
        raise NativeBuildError(f"cannot write {what} into {cache}: {e}") from e
    try:
        cmd = [cc, "-O2", "-shared", "-fPIC", "-o", tmp, str(source), *flags]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise NativeBuildError(f"{cc} could not build {what}: {e}") from e
        if p.returncode != 0:
            lines = [ln for ln in (p.stderr or p.stdout).splitlines() if ln.strip()]
            raise NativeBuildError(f"{cc} failed to build {what}: {lines[-1] if lines else p.returncode}")
        os.replace(tmp, out)  # atomic: a concurrent builder's file is equally good
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return out
