"""Importing TVM with a fixed thread pool, and compiling with it. TVM sizes its pool from TVM_NUM_THREADS
at first use, so the thread count must be in the environment before `import tvm` in a worker process."""

from __future__ import annotations

import functools
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


@functools.cache
def host_cpu_features() -> dict[str, bool]:
    """LLVM's view of this host's ISA features (CPUID and what the OS enabled: XCR0), {} where this LLVM
    cannot tell. The CPU's name alone is not enough: a hypervisor may hide AVX-512 from a Zen 4 or an
    AVX-512 Xeon, and LLVM's "znver4" then emits instructions this machine traps on (SIGILL)."""
    import tvm

    f = tvm.get_global_func("tvm.codegen.llvm.GetHostCPUFeatures", allow_missing=True)
    if f is None:
        return {}
    try:
        return {str(k): bool(v) for k, v in dict(f()).items()}
    except Exception:  # noqa: BLE001 -- an LLVM without host feature detection: the name decides
        return {}


@functools.cache
def host_mattr() -> tuple[str, ...]:
    """The LLVM attributes that make host_cpu_name() this host: "-f" for each ISA feature the CPU's name
    implies and this host lacks, "+f" for each it has that the name does not imply (what clang's
    -march=native passes besides the CPU name)."""
    import tvm
    from tvm.target import codegen

    host = host_cpu_features()
    if not host:
        return ()
    try:
        named = tvm.target.Target({"kind": "llvm", "mcpu": host_cpu_name()})
        implied = set(codegen.llvm_get_cpu_features(named))
    except Exception:  # noqa: BLE001 -- an LLVM that does not know its own host's name: its features only
        implied = set()
    lacks = sorted(f for f in implied if f in host and not host[f])
    extra = sorted(f for f, on in host.items() if on and f not in implied)
    return tuple([*(f"-{f}" for f in lacks), *(f"+{f}" for f in extra)])


def host_target(target: dict | None = None) -> dict:
    """An LLVM target dict for this host: `target` (default {"kind": "llvm"}) with "mcpu" set to the host's
    CPU and "mattr" extended by host_mattr() (the profile's own attributes first: they are kept)."""
    t = dict(target or {"kind": "llvm"})
    t["mcpu"] = host_cpu_name()
    mattr = [*(t.get("mattr") or []), *host_mattr()]
    if mattr:
        t["mattr"] = mattr
    return t


def load_json(text: str):
    """A TVM object from JSON that this TVM version wrote (tvm.ir.save_json): tvm_ffi's own reader, without
    tvm.ir.load_json's Python pass that upgrades older versions' JSON (it parses and re-encodes the whole
    text: 12 ms for one scheduled ResNet-8 kernel, 42 ms for its module, vs 6 ms for the module here).
    Only for JSON of this install (the builder, the judge and the runner share it): a graph from an older
    version is not upgraded."""
    import tvm  # noqa: F401  (registers the IR's object types the graph names)
    from tvm_ffi.serialization import from_json_graph_str

    return from_json_graph_str(text)


# Every build of this project lowers TIR with TVM's own pipeline plus one pass (stack_small_buffers) before
# LowerTVMBuiltin, named here so that a build, a cache key and a record can say which lowering made it.
TIR_PIPELINE = "ekb-stack-4k"
# bytes: a constant-size "global" buffer up to this size is a stack array of the function that uses it
STACK_BUFFER_LIMIT = 4096


def stack_small_buffers(limit: int = STACK_BUFFER_LIMIT):
    """A TIR module pass: every constant-size "global"-scope AllocBuffer of at most `limit` bytes gets the
    annotation `disable_lower_builtin`, which LowerTVMBuiltin honours by emitting a stack array instead of
    a TVMBackendAllocWorkspace call. TVM itself does so only below 1 KiB (runtime::kMaxStackAlloca), which
    puts a kernel's register tile of 1 KiB or more (a 16 x 16 float accumulator, a 5 x 4 VNNI tile of int32
    vectors) behind a pointer returned by a call: the compiler then cannot keep the tile in registers across
    the loop that accumulates into it and stores it back every step. On a 64 x 64 x 64 matmul with a 16 x 16
    tile that is 3.1x slower (14.1 us vs 4.5 us on the 2-core Zen 4 of 2026-12-06, median of 7 x 200 calls).
    The stack array lives in the function's entry block (one per call, also in a parallel loop's closure);
    4 KiB stays far below any thread's stack."""
    import tvm
    import tvm_ffi
    from tvm import tirx

    def one(node):
        if not isinstance(node, tirx.AllocBuffer) or "disable_lower_builtin" in node.annotations:
            return node
        buf = node.buffer
        if buf.scope() != "global" or not all(isinstance(d, tirx.IntImm) for d in buf.shape):
            return node
        size = buf.dtype.bits * buf.dtype.lanes // 8
        for d in buf.shape:
            size *= int(d.value)
        if size > limit:
            return node
        return tirx.AllocBuffer(buf, {**node.annotations, "disable_lower_builtin": tirx.IntImm("bool", 1)})

    @tvm.transform.module_pass(opt_level=0, name="StackSmallBuffers")
    def run(mod, _ctx):
        return tvm.IRModule(
            {
                gv: tvm_ffi.structural_map(f, one) if isinstance(f, tirx.PrimFunc) else f
                for gv, f in mod.functions.items()
            },
            attrs=mod.attrs,
        )

    return run


def tir_pipeline() -> str:
    """TIR_PIPELINE, registered with TVM (once per process): TVM's default ("s_tir") lowering whose host
    finalization runs stack_small_buffers before LowerTVMBuiltin. Device code is lowered as TVM does."""
    import tvm
    from tvm.tirx import compilation_pipeline as pipelines

    if TIR_PIPELINE not in pipelines.PIPELINE_MAP:

        def factory():
            main, finalize_host, finalize_device = pipelines.PIPELINE_MAP["s_tir"]()
            return (
                main,
                lambda: tvm.transform.Sequential([stack_small_buffers(), finalize_host()]),
                finalize_device,
            )

        pipelines.register_tir_pipeline(TIR_PIPELINE, factory)
    return TIR_PIPELINE


# How a candidate's graph (Relax main) runs on a CPU: "compiled", the VM's instructions compiled into one
# TIR function with the kernels (relax.build's exec_mode), not interpreted bytecode: about 0.3 us less per
# kernel call (11 trivial kernels in a row: 6.7 -> 3.7 us; host-avx2 on a 2-vCPU Xeon), which on a small
# model (fc_autoencoder_ad: 11 kernels, 16 us) is a fifth of its time. The tvm-default baseline keeps
# tvm.compile's bytecode: TVM as it gives it.
GRAPH_EXEC_MODE = "compiled"


def build_graph(mod, target):
    """A candidate's Relax module built for a CPU target as this project builds graphs: Relax's
    "default_build" pipeline, this project's TIR lowering (compile) and the VM compiled (GRAPH_EXEC_MODE)."""
    from tvm import relax

    return relax.build(
        mod, target, relax_pipeline="default_build", tir_pipeline=tir_pipeline(), exec_mode=GRAPH_EXEC_MODE
    )


def compile(mod, target, *, stock: bool = False, **kwargs):  # noqa: A001  (tvm.compile, this project's TIR lowering)
    """tvm.compile with tir_pipeline=tir_pipeline(): every build of a kernel, a graph or a candidate in this
    project goes through here, so all of them are lowered alike. `stock`: TVM's own lowering instead, as
    `tvm.compile` gives it (the "tvm-default" baseline: baselines/tvm_default.py)."""
    import tvm

    if stock:
        return tvm.compile(mod, target, **kwargs)
    return tvm.compile(mod, target, tir_pipeline=tir_pipeline(), **kwargs)


def build_tir(mod, target):
    """tvm.tirx.build with this project's TIR lowering (see compile)."""
    import tvm

    return tvm.tirx.build(mod, target=target, pipeline=tir_pipeline())
