"""Loaded (as sitecustomize, by PYTHONPATH) into the process where `ekb deploy --verify` runs an artifact's
run.py: that process must do without TVM's compiler. `import tvm` (whose package loads libtvm_compiler.so)
raises ImportError, ctypes refuses to load libtvm_compiler, and at exit the process reads its own memory
map: had the compiler library been mapped anyway, it exits with status 3."""

import atexit
import ctypes
import os
import sys

EXIT_COMPILER_LOADED = 3


class NoCompiler:
    def find_spec(self, name, path=None, target=None):
        if name == "tvm" or name.startswith("tvm."):
            raise ImportError(f"import {name}: TVM's compiler may not be imported in this process")
        return None


sys.meta_path.insert(0, NoCompiler())
_cdll_init = ctypes.CDLL.__init__


def _guarded_init(self, name, *args, **kwargs):
    if name is not None and "tvm_compiler" in os.path.basename(str(name)):
        raise OSError(f"{name}: TVM's compiler library may not be loaded in this process")
    _cdll_init(self, name, *args, **kwargs)


ctypes.CDLL.__init__ = _guarded_init


def _check_maps():
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return
    if "libtvm_compiler" in maps:
        sys.stdout.flush()
        sys.stderr.write("runtime-only check: libtvm_compiler was loaded into this process\n")
        sys.stderr.flush()
        os._exit(EXIT_COMPILER_LOADED)


atexit.register(_check_maps)
