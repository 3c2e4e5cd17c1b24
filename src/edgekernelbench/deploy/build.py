"""`ekb deploy MODEL --backend B --out DIR`: the model's kernels with the best decisions known
(deploy/decisions.py), the rest as tvm-default makes them, built into an artifact that runs without the
compiler.

DIR holds:

    manifest.json   model (id, SHA-256, inputs, outputs, tolerances), backend and target, TVM version, the
                    weights, the library, and per kernel: workload key, where its decision came from, the
                    speedup its source recorded and the one measured here (host), the offers not used and why
    model.onnx      the model (verification runs ONNX Runtime on it)
    model.so        the Relax VM executable with the kernels, for the backend's target: a host shared library;
                    for a cross profile linked by its cross gcc -- the form TVM RPC uploads to a board
    weights/        the weights after main_transform_params (run once, here), raw bytes, one file each
    run.py          runs the model with TVM's runtime (libtvm_runtime.so via tvm_ffi) and NumPy only
    c/              cross profiles: the whole model as a static C program (model.c, kernels.o, the driver's
                    runtime ekb_driver.c, headers, build.sh) and the program built by build.sh (c/model)
    verify.json     the last verification (deploy/verification.py)
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import EKBError, last_line
from ..tvm_env import compile as tvm_compile
from .artifact import FORMAT, graph_module
from .decisions import (
    SOURCES,
    TVM_DEFAULT,
    KernelChoice,
    db_offers,
    leka_offers,
    model_kernels,
    revert,
    rule_offers,
    run_graph,
    run_offers,
    take,
)
from .model import DeployError, model_hash, resolve_model

log = logging.getLogger(__name__)

RUNNER = Path(__file__).parent / "data" / "run.py"
ARTIFACT_FILES = ("manifest.json", "model.onnx", "model.so", "weights", "run.py", "c", "verify.json")


class Stages:
    """Seconds per stage of a deployment (the manifest's "seconds"), logged as each ends."""

    def __init__(self):
        self.t = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def done(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(now - self.t, 2)
        log.info("deploy: %s %.1f s", name, now - self.t)
        self.t = now


@dataclass
class Deployment:
    """What `deploy` made: the artifact's directory, its manifest, and the verification (None: not run)."""

    dir: Path
    manifest: dict
    verification: dict | None = None
    notes: list[str] = field(default_factory=list)  # sources' offers left out, and other remarks

    @property
    def fallbacks(self) -> list[tuple[str, str]]:
        """(kernel, reason) for every decision offered and not used."""
        return [(k["name"], why) for k in self.manifest["kernels"] for why in k["fallbacks"]]


def io_entry(name: str, shape: list, dtype: str, renaming) -> dict:
    """A manifest's input or output: its name in the artifact and, when the model named it otherwise
    (an exporter's name made an identifier), the model's own name."""
    entry = {"name": name, "shape": shape, "dtype": dtype}
    if renaming.name(name) != name:
        entry["onnx_name"] = renaming.name(name)
    return entry


def tvm_versions() -> dict:
    import tvm
    import tvm_ffi

    return {"tvm": str(tvm.__version__), "tvm_ffi": str(getattr(tvm_ffi, "__version__", ""))}


def prepare_dir(out: Path) -> None:
    """An empty (or new) directory, or an earlier artifact, whole or partly written (its files are replaced;
    an earlier tuning's run store stays)."""
    if out.exists() and not out.is_dir():
        raise DeployError(f"--out {out}: exists and is not a directory")
    if out.is_dir():
        other = sorted(p.name for p in out.iterdir() if p.name not in (*ARTIFACT_FILES, "tuning"))
        if other:
            raise DeployError(
                f"--out {out}: holds {', '.join(other[:3])}, which no artifact has; choose an empty directory"
            )
        for name in ARTIFACT_FILES:
            p = out / name
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()
    out.mkdir(parents=True, exist_ok=True)


def backend_of(profile):
    """The Backend that builds for `profile` here (host or cross CPU)."""
    if profile.kind == "cross":
        from ..backends.cross import CrossBackend

        return CrossBackend(profile)
    if profile.kind == "host":
        from ..backends.host import LocalBackend

        return LocalBackend(profile)
    raise DeployError(
        f"{profile.name} is a {profile.kind} profile: ekb deploy builds for CPU profiles (host, cross)"
    )


def graph_reference_of(problem, reference, passes: list[dict]):
    """The model's reference on the graph its decisions chose (the weights' re-layouts lifted into
    main_transform_params, so the artifact stores them re-laid out)."""
    from ..errors import DecisionError
    from ..search.graph import with_graph

    try:
        return with_graph(problem, reference, passes)
    except DecisionError as e:
        raise DeployError(f"{problem.id}: the graph decisions do not apply: {e.detail}") from None


def transformed_weights(reference) -> list[np.ndarray]:
    """main's weight arguments: main_transform_params run once on this host (generic LLVM), or the raw
    weights when there is none."""
    import tvm
    from tvm import relax

    names = {gv.name_hint for gv in reference.module.functions}
    if not reference.params:
        return []
    if "main_transform_params" not in names:
        return [np.asarray(p, order="C") for p in reference.params]
    mod = relax.transform.DeadCodeElimination(["main_transform_params"])(reference.module)
    mod = tvm.IRModule({gv: f for gv, f in mod.functions.items() if gv.name_hint != "main"}, attrs=mod.attrs)
    ex = tvm_compile(mod, tvm.target.Target({"kind": "llvm"}), relax_pipeline="default_build")
    vm = relax.VirtualMachine(ex, tvm.cpu(0))
    out = vm["main_transform_params"](
        tuple(tvm.runtime.tensor(np.asarray(p, order="C")) for p in reference.params)
    )
    return [np.asarray(t.numpy(), order="C") for t in out]


def tensor_entries(ty) -> list[tuple[list[int], str]]:
    from tvm import relax

    fields = list(ty.fields) if isinstance(ty, relax.TupleType) else [ty]
    out = []
    for f in fields:
        try:
            out.append(([int(d) for d in f.shape.values], str(f.dtype)))
        except Exception as e:
            raise DeployError(f"the model's output {f} has no static shape") from e
    return out


# ------------------------------------------------------------------------------------------ deploy
def deploy(
    model,
    backend="host-cpu",
    out: str | Path | None = None,
    *,
    inputs: list[str] | dict | None = None,
    from_run: str | Path | None = None,
    kernel_db: str | Path | None = None,
    use_db: bool = True,
    trials: int = 0,
    rules: bool = False,
    threads: int | None = None,
    verify: bool = True,
    quick: bool = False,
    measure: bool = True,
    tracker: str | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    checks: int = 3,
) -> Deployment:
    """Deploys `model` (a problem id, a Problem, or an ONNX file with `inputs` shapes "NAME=1x3x96x96") for
    `backend` (a profile name or BackendProfile) into `out` (default deploy/<model>-<backend>), then
    verifies it (deploy/verification.py) unless `verify` is False. Decisions: `from_run` (a run directory),
    the kernel database (`kernel_db`, default $EKB_KERNEL_DB; `use_db=False` skips it), a fresh LEKA tuning
    of `trials` judge evaluations, then (`rules`) the rule-based schedules; the rest tvm-default. `quick`: the
    short timing protocol (tuning, per-kernel and end-to-end timings). `measure`: time kernels and the model
    on the host. Raises EKBError subclasses."""
    from ..backends.registry import as_profile

    problem = resolve_model(model, inputs, atol, rtol)
    profile = as_profile(backend, threads)
    builder = backend_of(profile)
    if profile.kind == "cross":
        builder.check_toolchain()  # ToolchainMissing: one line, before anything is built
    out = Path(out) if out is not None else Path("deploy") / f"{problem.name}-{profile.name}"
    if "tvm" not in sys.modules:
        from ..tvm_env import set_threads

        set_threads(profile.threads)
    from ..harness.timing import TimingConfig

    timing = TimingConfig.quick() if quick else TimingConfig()
    stages = Stages()
    versions = tvm_versions()
    prepare_dir(out)

    from ..backends.host import resolve_target
    from ..kerneldb import KernelDB
    from ..kerneldb import target_key as db_target_key
    from ..reference import build_reference

    reference = build_reference(problem)
    stages.done("reference")
    target = builder.target()
    target_key = db_target_key(resolve_target(profile))  # as LEKA records it (search.kernels)
    notes: list[str] = []
    by_workload: dict[str, list] = {}
    graph = None  # {"passes": [...], "source": ...} when the model is deployed on a changed graph
    if from_run is not None:
        by_workload, run_notes = run_offers(Path(from_run), profile.name)
        notes += run_notes
        found = run_graph(Path(from_run), profile.name, problem.id)
        if found is not None:
            graph = {"passes": found[0], "source": found[1]}
    db_path = None
    if use_db:
        with KernelDB(kernel_db) as db:
            db_path = str(db.path)

    def decide(reference, tuned=None) -> list[KernelChoice]:
        """Each kernel of `reference` takes the first offer that applies: the run's, the tuned candidate's
        (`tuned`: LEKA's on the graph it changed, judged on this very model), the kernel database's."""
        kernels = model_kernels(reference)
        funcs = reference.primfuncs()
        offered = leka_offers(tuned[0], tuned[1], kernels) if tuned is not None else {}
        stored = KernelDB(db_path) if db_path else None
        try:
            for k in kernels:
                offers = list(by_workload.get(k.workload, []))
                offers += [offered[k.name]] if k.name in offered else []
                offers += db_offers(stored, k.workload, target_key) if stored is not None else []
                take(k, offers, funcs[k.name], target, versions["tvm"])
        finally:
            if stored is not None:
                stored.close()
        return kernels

    if graph is not None:
        reference = graph_reference_of(problem, reference, graph["passes"])
    kernels = decide(reference)
    stages.done("decisions")
    # 3. a fresh tuning for the kernels still without a decision; its graph, when it kept a change
    tuning = None
    if trials > 0 and any(k.source == TVM_DEFAULT for k in kernels):
        from .tune import tune

        best = tune(problem, profile, trials, out / "tuning", Path(db_path) if db_path else None, timing)
        tuning = {"trials": trials, "run_dir": str(out / "tuning"), "speedup": best[1] if best else None}
        passes = best[0].decisions.graph.get("passes") if best is not None else None
        if passes and graph is None:  # the model on the graph LEKA kept
            graph = {"passes": list(passes), "source": "leka (--trials)"}
            reference = graph_reference_of(problem, reference, graph["passes"])
            kernels = decide(reference, best)
        elif best is not None:  # the same graph: the tuned decisions serve the kernels still without one
            offered = leka_offers(best[0], best[1], kernels)
            funcs = reference.primfuncs()
            for k in kernels:
                if k.source == TVM_DEFAULT and k.name in offered:
                    take(k, [offered[k.name]], funcs[k.name], target, versions["tvm"])
        stages.done("tuning")
    ref_funcs = reference.primfuncs()
    # 4. the rule-based schedules
    if rules and any(k.source == TVM_DEFAULT for k in kernels):
        ruled = rule_offers(problem, profile, kernels, reference if graph is not None else None)
        for k in kernels:
            if k.source == TVM_DEFAULT and k.name in ruled:
                take(k, [ruled[k.name]], ref_funcs[k.name], target, versions["tvm"])
        stages.done("rules")

    from ..baselines.tvm_default import tvm_default_module

    default_mod = tvm_default_module(reference.module, target)
    weights = transformed_weights(reference)
    stages.done("weights")
    n_in = len(reference.input_names)
    input_specs = list(problem.inputs)
    main_params = list(reference.module["main"].params)
    if len(input_specs) != n_in or len(main_params) != n_in + len(weights):
        raise DeployError(
            f"{problem.id}: main takes {len(main_params)} arguments; the model has {len(input_specs)} "
            f"inputs and {len(weights)} weights"
        )
    for spec, p in zip(input_specs, main_params[:n_in], strict=True):
        if tuple(int(d) for d in p.ty.shape.values) != tuple(spec.shape):
            raise DeployError(f"{problem.id}: input {spec.name} {spec.shape} is not main's {p.name} {p.ty}")

    if measure and profile.kind == "host" and profile.run == "local":
        measure_kernels(kernels, default_mod, problem, weights, builder, timing)
        stages.done("kernel timing")
    elif measure:
        for k in kernels:
            k.measured = f"not measured: {profile.name} runs {profile.run}"
    deployed = graph_module(default_mod, {k.name: k.func for k in kernels if k.func is not None})

    # the artifact
    wdir = out / "weights"
    wdir.mkdir()
    weight_entries = []
    for i, (p, w) in enumerate(zip(main_params[n_in:], weights, strict=True)):
        file = f"weights/{i:03d}_{_safe(p.name)}.bin"
        w.tofile(out / file)
        weight_entries.append({"name": p.name, "shape": list(w.shape), "dtype": str(w.dtype), "file": file})
    (out / "model.onnx").write_bytes(problem.model.SerializeToString())
    shutil.copy(RUNNER, out / "run.py")
    library = export_library(deployed, builder, profile, out / "model.so")
    c_program = None
    if profile.kind == "cross":
        c_program = write_c_program(deployed, builder, profile, out, n_in, weight_entries, problem)
    stages.done("build")
    outputs = tensor_entries(reference.module["main"].ret_ty)
    out_names = [o.name for o in problem.model.graph.output]
    if len(out_names) != len(outputs):
        out_names = [f"output{i}" for i in range(len(outputs))]
    manifest = {
        "format": FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "model": {
            "id": problem.id,
            "source": problem.source,
            "file": "model.onnx",
            "sha256": model_hash(problem.model),
            "atol": problem.atol,
            "rtol": problem.rtol,
        },
        # "name": the artifact's (an identifier: problems/names.py); "onnx_name": the model's own, when other
        "inputs": [io_entry(s.name, list(s.shape), s.dtype, problem.renaming) for s in input_specs],
        "outputs": [
            io_entry(n, shape, dtype, problem.renaming)
            for n, (shape, dtype) in zip(out_names, outputs, strict=True)
        ],
        "backend": {
            "name": profile.name,
            "kind": profile.kind,
            "run": profile.run,
            "profile": profile.to_dict(),
        },
        "target": json.loads(target_key),
        "threads": profile.threads,
        "versions": versions,
        "library": library,
        "weights": weight_entries,
        "c_program": c_program,
        "decisions": {
            "order": list(SOURCES),
            "rules": rules,
            "from_run": str(from_run) if from_run is not None else None,
            "kernel_db": db_path,
            "tuning": tuning,
            "graph": graph,
        },
        "kernels": [k.manifest_entry() for k in kernels],
        "seconds": dict(stages.seconds),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    result = Deployment(out, manifest, None, notes)
    if verify:
        from .verification import verify as verify_artifact

        result.verification = verify_artifact(
            out, quick=quick, tracker=tracker, checks=checks, measure=measure
        )
    return result


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:60] or "w"


# ------------------------------------------------------------------------------------------ timing
def measure_kernels(kernels: list[KernelChoice], default_mod, problem, weights, builder, timing):
    """Each decided kernel, deployed vs tvm-default's version of it, timed here with the harness's protocol
    (same arguments: those of its first call in main). A decision measured slower in every round goes back to
    tvm-default, recorded."""
    import tvm

    from ..backends.host import evaluator_timer, primfunc_library
    from ..executor import KernelRunner
    from ..harness.timing import paired_speedup, time_interleaved

    decided = [k for k in kernels if k.func is not None]
    for k in kernels:
        k.measured = "tvm-default's kernel" if k.func is None else k.measured
    if not decided:
        return
    target = builder.target()
    dev = tvm.cpu(0)
    mine = graph_module(default_mod, {k.name: k.func for k in decided})
    lib = tvm_compile(primfunc_library(mine), target)
    base = tvm_compile(primfunc_library(tvm.IRModule({k.name: default_mod[k.name] for k in decided})), target)
    runner = KernelRunner(mine, lib, dev, lambda a: tvm.runtime.tensor(a, dev), check_inputs=False)
    sample = problem.sample_inputs(0)
    args = [tvm.runtime.tensor(np.asarray(sample[s.name], order="C"), dev) for s in problem.inputs]
    args += [tvm.runtime.tensor(w, dev) for w in weights]
    calls: list = []
    runner.run("main", args, calls=calls)
    first = {}
    for name, call_args, _ in calls:
        first.setdefault(name, call_args)

    for k in decided:
        t = time_interleaved(
            {
                "deployed": evaluator_timer(lib.mod, k.name, dev, first[k.name]),
                TVM_DEFAULT: evaluator_timer(base.mod, k.name, dev, first[k.name]),
            },
            timing,
        )
        s, lo, hi = paired_speedup(t[TVM_DEFAULT], t["deployed"])
        k.measured_speedup, k.measured_ci = round(s, 4), [round(lo, 4), round(hi, 4)]
        k.measured = (
            f"{t['deployed'].median * 1e6:.2f} us vs tvm-default {t[TVM_DEFAULT].median * 1e6:.2f} us"
        )
        if hi < 1.0:
            revert(k, f"measured slower than tvm-default's kernel here ({s:.2f}x, every round)")
            k.measured = f"reverted: {k.fallbacks[-1]}"


# ------------------------------------------------------------------------------------------ libraries
def export_library(mod, builder, profile, path: Path) -> dict:
    """The Relax VM executable for the target as a shared library (cross: linked by the cross gcc)."""
    ex = tvm_compile(mod, builder.target(), relax_pipeline="default_build")
    if profile.kind == "cross":
        from tvm.support import cc as tvm_cc

        ex.export_library(str(path), fcompile=tvm_cc.cross_compiler(builder.compiler()))
        how = f"linked by {Path(builder.compiler()).name}: upload with TVM RPC to a {profile.name} board"
    else:
        ex.export_library(str(path))
    return {
        "file": path.name,
        "form": "Relax VM executable + kernels (tvm.compile, export_library)",
        "load": "tvm_ffi.load_module(file), libtvm_runtime.so loaded (run.py); or tvm.runtime.load_module",
        "runs_here": profile.kind == "host",
        **({"rpc": how} if profile.kind == "cross" else {}),
    }


def write_c_program(mod, builder, profile, out: Path, n_in: int, weights: list[dict], problem) -> dict:
    """c/: kernels.o (the PrimFuncs for the target), model.c (deploy/cprogram.py), the driver's runtime, the
    headers it needs, build.sh, and c/model built with the cross gcc (static)."""
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
    cc = builder.compiler()
    lib_mod = primfunc_library(mod)
    kernels = tvm_compile(lib_mod, builder.target())
    kernels.mod.write_to_file(str(cdir / "kernels.o"))
    prog = model_program(
        mod["main"],
        n_in,
        [Path(w["file"]).name for w in weights],
        f"{problem.id} on {profile.name} ({profile.target.get('mtriple', '')})",
        profile.threads,
    )
    symbols = object_symbols(cdir / "kernels.o", cc)
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
        "#!/bin/sh\n# Builds ./model (the whole model, static) for "
        f"{profile.target.get('mtriple', profile.name)}: what `ekb deploy` ran.\n"
        f'set -e\ncd "$(dirname "$0")"\n${{CC:-{Path(cc).name}}} {" ".join(cmd)}\n'
    )
    (cdir / "build.sh").write_text(script)
    os.chmod(cdir / "build.sh", 0o755)
    proc = subprocess.run([cc, *cmd], cwd=cdir, capture_output=True, text=True)
    if proc.returncode != 0:
        raise EKBError(
            f"building the C program with {Path(cc).name} failed: {last_line(RuntimeError(proc.stderr))}"
        )
    return {
        "source": "c/model.c",
        "binary": "c/model",
        "build": "c/build.sh",
        "usage": "c/model [-r REPEAT] [-t THREADS] weights IN_0.bin ... OUT_0.bin ... (raw tensors)",
        "constants": sorted(prog.constants),
        "kernel_calls": prog.calls,
        "buffers": prog.buffers,
        "buffer_bytes": prog.bytes,
        "emulator": list(profile.emulator),
    }
