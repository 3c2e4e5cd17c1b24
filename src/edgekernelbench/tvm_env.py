"""Importing TVM with a fixed thread pool. TVM sizes its pool from TVM_NUM_THREADS at first use,
so the thread count must be in the environment before `import tvm` in a worker process."""

from __future__ import annotations

import os


def set_threads(n: int) -> None:
    for var in ("TVM_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ[var] = str(n)


def import_tvm():
    import tvm  # noqa: F401

    return tvm


def host_cpu_name() -> str:
    import tvm

    f = tvm.get_global_func("target.llvm_get_system_cpu", allow_missing=True)
    return str(f()) if f is not None else "generic"
