"""Calls of a built graph's `main` over several input sets in turn: what the judge times.

A judge that timed back-to-back calls on one input set would let a kernel that recognises the inputs it
saw last (its pooled output buffer still holds their result) skip its work. So every contender is timed
over `sets` argument lists in rotation: call i takes set (start + i) mod len(sets), and no call sees the
inputs of the call before it. The loop runs in C (data/ekb_call_loop.c: TVMFFIFunctionCall in a loop, as
TVM's time evaluator calls a function) when the parent could build the library (`resolve_library`), else
in Python (~0.5 us more per call, the same for every contender of a judgment; recorded as `how`)."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
from pathlib import Path

from ..native import NativeBuildError, build_shared, source_key

log = logging.getLogger(__name__)

SOURCE = Path(__file__).parent / "data" / "ekb_call_loop.c"
TVM_FFI_TENSOR = 70  # kTVMFFITensor in tvm/ffi/c_api.h


def _ffi_paths() -> tuple[Path, Path]:
    """(include dir, lib dir) of the installed apache-tvm-ffi wheel."""
    import tvm_ffi

    root = Path(tvm_ffi.__file__).parent
    return root / "include", root / "lib"


def build_library(cache: Path | None = None) -> Path:
    """The call loop library for this source and tvm-ffi, compiled the first time (native.build_shared).
    Raises NativeBuildError."""
    from importlib.metadata import version

    include, lib = _ffi_paths()
    key = source_key(SOURCE, "apache-tvm-ffi " + version("apache-tvm-ffi"), str(lib))
    flags = [f"-I{include}", f"-L{lib}", f"-Wl,-rpath,{lib}", "-ltvm_ffi"]
    return build_shared(SOURCE, "ekb_call_loop", key, "the TVM call loop", flags, cache)


_why_not: dict[str, str] = {}


def resolve_library() -> tuple[str | None, str]:
    """For the harness's parent: (the library's path, "") or (None, why there is none). Never raises."""
    try:
        return str(build_library()), ""
    except (NativeBuildError, OSError, ImportError) as e:
        why = str(e)
        if why not in _why_not:
            _why_not[why] = why
            log.warning("%s; timed calls loop in Python instead", why)
        return None, why


class _Any(ctypes.Structure):
    _fields_ = [("type_index", ctypes.c_int32), ("zero_padding", ctypes.c_uint32), ("v", ctypes.c_void_p)]


_LIBS: dict[str, ctypes.CDLL] = {}


def _load(path: str) -> ctypes.CDLL:
    if path not in _LIBS:
        lib = ctypes.CDLL(path)
        fn = lib.ekb_call_loop
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int64]
        fn.argtypes += [ctypes.c_int64]
        fn.restype = ctypes.c_int
        lib.ekb_workspace_poison.argtypes, lib.ekb_workspace_poison.restype = [], None
        lib.ekb_workspace_select.argtypes, lib.ekb_workspace_select.restype = [ctypes.c_int], None
        _LIBS[path] = lib
    return _LIBS[path]


class RotatingCaller:
    """`func` (a TVM FFI function: a VM's main) over argument lists `sets` (device tensors) in turn.
    run(number): `number` calls, continuing the rotation from `next_set`; call_next(): one call from
    Python on `next_set`, its result returned; call_on(k): one on set k, after which the rotation goes on
    from k + 1. `calls` counts every call made."""

    def __init__(self, func, sets: list[list], lib_path: str | None = None, why_python: str = ""):
        if not sets or any(len(s) != len(sets[0]) for s in sets):
            raise ValueError("argument sets of one length are needed")
        self.func, self.sets, self.calls, self.next_set = func, sets, 0, 0
        self._loop = None
        self.how = "python loop" + (f" ({why_python})" if why_python else "")
        if lib_path:
            try:
                self._loop = _load(lib_path).ekb_call_loop
                self._handle = ctypes.c_void_p(func.__chandle__())
                n = len(sets[0])
                self._anys = (_Any * (n * len(sets)))()
                for k, args in enumerate(sets):
                    for i, t in enumerate(args):
                        self._anys[k * n + i] = _Any(TVM_FFI_TENSOR, 0, t.__chandle__())
                self.how = "c loop"
            except (OSError, AttributeError) as e:
                self._loop, self.how = None, f"python loop (the C loop did not load: {e})"

    def run(self, number: int) -> None:
        number = int(number)
        if number <= 0:
            return
        k, start = len(self.sets), self.next_set
        if self._loop is not None:
            if self._loop(self._handle, self._anys, len(self.sets[0]), k, start, number) != 0:
                raise RuntimeError("a call of main failed in the call loop")
        else:
            func, sets = self.func, self.sets
            for i in range(start, start + number):
                func(*sets[i % k])
        self.calls += number
        self.next_set = (start + number) % k

    def call_next(self):
        return self.call_on(self.next_set)

    def call_on(self, k: int):
        out = self.func(*self.sets[k])
        self.calls += 1
        self.next_set = (k + 1) % len(self.sets)
        return out


# ------------------------------------------------------------------------------- the kernels' workspace
_WORKSPACE: list[ctypes.CDLL] = []  # the call loop library whose pool serves this process's candidate


def take_workspace(module_path: str, lib_path: str | None) -> str:
    """Points the candidate library `module_path` (loaded already, by TVM) at the call loop library's
    workspace pool (data/ekb_call_loop.c), so that `poison_workspace` can overwrite what its kernels' scratch
    buffers held between calls. Call it between calls of the module (no workspace block is held then).
    Returns "ours", or why the library keeps TVM's pool ("none": its kernels have no workspace)."""
    if not lib_path:
        return "TVM's pool (no call loop library)"
    try:
        lib = _load(lib_path)
        module = ctypes.CDLL(module_path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    except OSError as e:
        return f"TVM's pool ({e})"
    try:
        alloc = ctypes.c_void_p.in_dll(module, "__TVMBackendAllocWorkspace")
        free = ctypes.c_void_p.in_dll(module, "__TVMBackendFreeWorkspace")
    except ValueError:
        return "none"
    alloc.value = ctypes.cast(lib.ekb_workspace_alloc, ctypes.c_void_p).value
    free.value = ctypes.cast(lib.ekb_workspace_free, ctypes.c_void_p).value
    if lib not in _WORKSPACE:
        _WORKSPACE.append(lib)
    return "ours"


def poison_workspace() -> None:
    """Every free block of the selected workspace pool (stateless_workspace's), overwritten (0xff bytes)."""
    for lib in _WORKSPACE:
        lib.ekb_workspace_poison()


@contextlib.contextmanager
def stateless_workspace():
    """Within this block the candidate's kernels take their scratch buffers from a pool of their own, which
    `poison_workspace` overwrites (the stateless timing's); the timed calls' pool stays as they left it."""
    for lib in _WORKSPACE:
        lib.ekb_workspace_select(1)
    try:
        yield
    finally:
        for lib in _WORKSPACE:
            lib.ekb_workspace_select(0)
