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


def load_json(text: str):
    """A TVM object from JSON that this TVM version wrote (tvm.ir.save_json): tvm_ffi's own reader, without
    tvm.ir.load_json's Python pass that upgrades older versions' JSON (it parses and re-encodes the whole
    text: 12 ms for one scheduled ResNet-8 kernel, 42 ms for its module, vs 6 ms for the module here).
    Only for JSON of this install (the builder, the judge and the runner share it): a graph from an older
    version is not upgraded."""
    import tvm  # noqa: F401  (registers the IR's object types the graph names)
    from tvm_ffi.serialization import from_json_graph_str

    return from_json_graph_str(text)
