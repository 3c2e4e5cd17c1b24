"""The native ONNX Runtime timer: data/ekb_ort_timer.c, ONNX Runtime's C API driven from C.

A candidate is timed by TVM's C++ timer (the VM's time_evaluator: a C loop); ONNX Runtime timed by
`session.run` in a Python loop would pay Python's call overhead (~10 us per call) on every run, which
on small problems is most of what would be measured. This timer runs `RunWithBinding` back to back in C,
on inputs and outputs bound once (I/O binding), and returns seconds per call -- the same shape as the
candidate's timer.

The library is compiled from the C source into the per-user cache of native libraries (native.py), keyed
by the source's hash and onnxruntime's version. The
harness's PARENT process builds it (`resolve_library`) and hands the path to its worker, which only
loads it (`NativeORTTimer`): the worker may run where it cannot write outside its job directory.
$EKB_ORT_TIMER_LIB names a library to use as it is (no build). The library does not link against
ONNX Runtime: the worker dlopens the onnxruntime package's own libonnxruntime and passes its C API
entry point in."""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import re
import weakref
from pathlib import Path

import numpy as np

from ..errors import EKBError
from ..native import NativeBuildError, build_shared, source_key

log = logging.getLogger(__name__)

SOURCE = Path(__file__).parent / "data" / "ekb_ort_timer.c"
API_VERSION = 5  # the first OrtApi version with every function the C file uses
LIB_ENV = "EKB_ORT_TIMER_LIB"

# ONNXTensorElementDataType values
ONNX_TYPES = {
    np.dtype(np.float32): 1,
    np.dtype(np.uint8): 2,
    np.dtype(np.int8): 3,
    np.dtype(np.uint16): 4,
    np.dtype(np.int16): 5,
    np.dtype(np.int32): 6,
    np.dtype(np.int64): 7,
    np.dtype(np.bool_): 9,
    np.dtype(np.float16): 10,
    np.dtype(np.float64): 11,
    np.dtype(np.uint32): 12,
    np.dtype(np.uint64): 13,
}


class NativeTimerError(EKBError):
    """The native timer cannot be built, loaded, run or trusted here; str(e) is why, in one line."""


def ort_package_dir() -> Path:
    """The installed onnxruntime package's directory, found without importing it."""
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        raise NativeTimerError("onnxruntime is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def ort_library() -> Path:
    """The C API library shipped in the onnxruntime package (capi/libonnxruntime.so.<version>)."""
    capi = ort_package_dir() / "capi"
    found = sorted(capi.glob("libonnxruntime.so*")) + sorted(capi.glob("libonnxruntime*.dylib"))
    found = [p for p in found if "providers" not in p.name]
    if not found:
        raise NativeTimerError(f"the onnxruntime package has no C API library (libonnxruntime) in {capi}")
    return found[-1]


def ort_version() -> str:
    """onnxruntime's version, from its C library's file name, else the package's metadata."""
    m = re.search(r"(\d+\.\d+\.\d+)", ort_library().name)
    if m:
        return m.group(1)
    from importlib.metadata import version

    return version("onnxruntime")


def library_key() -> str:
    return source_key(SOURCE, "onnxruntime " + ort_version())


def build_library(cache: Path | None = None) -> Path:
    """The timer library for this source and onnxruntime version, compiled into `cache` (default
    native.cache_dir()) the first time. Raises NativeTimerError when it cannot be built."""
    try:
        out = build_shared(
            SOURCE, "ekb_ort_timer", library_key(), "the native ONNX Runtime timer", cache=cache
        )
    except NativeBuildError as e:
        raise NativeTimerError(str(e)) from None
    log.debug("the native ONNX Runtime timer: %s", out)
    return out


_warned: set[str] = set()


def resolve_library() -> tuple[str | None, str]:
    """For the harness's parent: (path of the timer library, "") or (None, why there is none).
    Never raises: the worker then times ONNX Runtime in Python (I/O binding) and records why."""
    env = os.environ.get(LIB_ENV)
    if env:
        return env, ""
    try:
        return str(build_library()), ""
    except (NativeTimerError, OSError) as e:
        why = str(e)
        if why not in _warned:
            _warned.add(why)
            log.warning("%s; ONNX Runtime is timed from Python (I/O binding) instead", why)
        return None, why


def _declare(lib) -> None:
    vp, i32, u32, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_size_t
    lib.ekb_ort_version.argtypes, lib.ekb_ort_version.restype = [vp], ctypes.c_char_p
    lib.ekb_ort_error.argtypes, lib.ekb_ort_error.restype = [vp], ctypes.c_char_p
    lib.ekb_ort_open.argtypes = [vp, u32, ctypes.c_char_p, sz, i32, i32, i32, ctypes.POINTER(vp)]
    lib.ekb_ort_open.restype = i32
    lib.ekb_ort_bind.argtypes = [vp, i32, ctypes.c_char_p, vp, sz, ctypes.POINTER(ctypes.c_int64), sz, i32]
    lib.ekb_ort_bind.restype = i32
    lib.ekb_ort_run_once.argtypes, lib.ekb_ort_run_once.restype = [vp], i32
    lib.ekb_ort_new_binding.argtypes, lib.ekb_ort_new_binding.restype = [vp], i32
    lib.ekb_ort_run.argtypes, lib.ekb_ort_run.restype = [vp, ctypes.c_int64], ctypes.c_double
    lib.ekb_ort_close.argtypes, lib.ekb_ort_close.restype = [vp], None


class NativeORTTimer:
    """One ONNX Runtime session driven by the C timer library at `lib_path`, with the baseline's
    session options, `inputs` bound as they are (one set, or a list of sets: one I/O binding each, taken
    by the runs in turn) and `outputs` (name -> preallocated array, written by each run) bound as outputs
    of every binding. run(number) -> seconds per call. Raises NativeTimerError."""

    def __init__(
        self,
        lib_path: str | Path,
        model: bytes,
        inputs: dict[str, np.ndarray] | list[dict[str, np.ndarray]],
        outputs: dict[str, np.ndarray],
        threads: int,
        optimize: bool = True,
        ort_lib: str | Path | None = None,
    ):
        try:
            lib = ctypes.CDLL(str(lib_path))
            _declare(lib)
        except (OSError, AttributeError) as e:
            raise NativeTimerError(f"cannot load the native ONNX Runtime timer {lib_path}: {e}") from e
        ort_path = Path(ort_lib) if ort_lib else ort_library()
        try:
            ort = ctypes.CDLL(str(ort_path))
            get_api_base = ctypes.cast(ort.OrtGetApiBase, ctypes.c_void_p)
        except (OSError, AttributeError) as e:
            raise NativeTimerError(f"cannot load ONNX Runtime's C API from {ort_path}: {e}") from e
        self._lib, self._ort = lib, ort
        self.version = lib.ekb_ort_version(get_api_base).decode()
        self._model = bytes(model)
        self._arrays: list[np.ndarray] = []  # the bound memory: alive as long as the session
        handle = ctypes.c_void_p()
        rc = lib.ekb_ort_open(
            get_api_base, API_VERSION, self._model, len(self._model), int(threads), 1, int(optimize), handle
        )
        self._handle = handle.value
        self._finalizer = weakref.finalize(self, lib.ekb_ort_close, self._handle)
        if rc != 0:
            raise NativeTimerError(f"onnxruntime {self.version} C API: {self.error()}")
        for k, feeds in enumerate([inputs] if isinstance(inputs, dict) else inputs):
            if k and lib.ekb_ort_new_binding(self._handle) != 0:
                raise NativeTimerError(f"onnxruntime {self.version} C API: {self.error()}")
            for is_output, arrays in ((0, feeds), (1, outputs)):
                for name, arr in arrays.items():
                    self._bind(is_output, name, arr)

    def error(self) -> str:
        return (self._lib.ekb_ort_error(self._handle) or b"").decode(errors="replace")

    def _bind(self, is_output: int, name: str, arr: np.ndarray) -> None:
        if arr.dtype not in ONNX_TYPES:
            raise NativeTimerError(
                f"{'output' if is_output else 'input'} {name}: no native binding for {arr.dtype}"
            )
        if not arr.flags.c_contiguous or (is_output and not arr.flags.writeable):
            raise NativeTimerError(
                f"{name}: the bound array must be C-contiguous (and writeable, as an output)"
            )
        self._arrays.append(arr)
        shape = (ctypes.c_int64 * max(1, arr.ndim))(*arr.shape)
        rc = self._lib.ekb_ort_bind(
            self._handle,
            is_output,
            name.encode(),
            arr.ctypes.data,
            arr.nbytes,
            shape,
            arr.ndim,
            ONNX_TYPES[arr.dtype],
        )
        if rc != 0:
            raise NativeTimerError(f"onnxruntime {self.version} C API: {self.error()}")

    def run_once(self) -> None:
        if self._lib.ekb_ort_run_once(self._handle) != 0:
            raise NativeTimerError(f"onnxruntime {self.version} C API: {self.error()}")

    def run(self, number: int) -> float:
        s = self._lib.ekb_ort_run(self._handle, max(1, int(number)))
        if s < 0:
            raise NativeTimerError(f"onnxruntime {self.version} C API: {self.error()}")
        return float(s)

    def close(self) -> None:
        self._finalizer()
