"""`ekb deploy MODEL --backend B --out DIR`: the model's kernels with the best decisions known
(deploy/decisions.py), the rest as tvm-default makes them, built into an artifact that runs without the
compiler, with what an engineer checks before shipping it: its size, its planned memory (and a budget it must
fit: `max_memory`), then, when verified, its latency, peak memory and a per-kernel profile.

`deploy()` runs the stages in order, each a function of its own:

    request      the model, the backend profile, the output directory (checked, not touched yet)
    decisions    the graph, the target attributes and each kernel's decision (`--from RUN`: the run's best
                 candidate of the model whole; else the run's other candidates, the kernel database,
                 `--trials` of LEKA, `--rules`), with what did not carry over and why
    graph        the deployed graph module, the weights after main_transform_params; on the host each
                 decided kernel timed against tvm-default's version
    memory       the Relax VM's static plan, the kernels' workspace (deploy/memory.py); DeployError when it
                 does not fit `max_memory`, before anything is written
    artifact     the files (deploy/write.py), their sizes (deploy/size.py), manifest.json
    verify       deploy/verification.py: outputs vs ONNX Runtime, latency, peak memory, timing, profile

DIR holds manifest.json (model, backend, target and its attributes, TVM version, weights, library, C program,
decisions, per kernel its source and figures, carryover, size, memory, and after a verification what it
measured), the files of deploy/write.py, and verify.json (the last verification).
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import EKBError, ForbiddenConstruct, last_line
from ..tvm_env import compile as tvm_compile
from .artifact import FORMAT, graph_module, transformed_weights
from .decisions import (
    SOURCES,
    TVM_DEFAULT,
    Carryover,
    KernelChoice,
    RunCandidate,
    best_candidate,
    carryover,
    db_offers,
    leka_offers,
    model_kernels,
    revert,
    rule_offers,
    run_offers,
    take,
)
from .memory import MemoryPlan, check_budget, plan_memory
from .model import DeployError, model_hash, resolve_model

log = logging.getLogger(__name__)

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


@dataclass
class Request:
    """What was asked, resolved: the model, the profile and its builder, where the artifact goes."""

    problem: object  # Problem
    profile: object  # BackendProfile
    builder: object  # LocalBackend | CrossBackend
    out: Path
    timing: object  # TimingConfig
    versions: dict
    from_run: Path | None = None
    db_path: str | None = None
    trials: int = 0
    rules: bool = False
    measure: bool = True
    max_memory: int | None = None
    max_memory_text: str | None = None


@dataclass
class Decided:
    """The decisions stage's outcome: the reference on the chosen graph and each kernel's decision."""

    reference: object  # Reference, on the deployed graph
    kernels: list[KernelChoice]
    target_attrs: dict = field(default_factory=dict)  # merged into the profile's target
    graph: dict | None = None  # {"passes": [...], "source": ...} when deployed on a changed graph
    carryover: Carryover | None = None
    tuning: dict | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class Graph:
    """The graph stage's outcome: what gets built."""

    default_mod: object  # tvm-default's module on the deployed graph
    deployed: object  # graph_module: main and its kernels, the decisions applied
    weights: list[np.ndarray]
    n_inputs: int
    weight_params: list


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


def check_out_dir(out: Path) -> None:
    """DeployError unless `out` is new, empty, or an earlier artifact (whose files get replaced)."""
    if out.exists() and not out.is_dir():
        raise DeployError(f"--out {out}: exists and is not a directory")
    if out.is_dir():
        other = sorted(p.name for p in out.iterdir() if p.name not in (*ARTIFACT_FILES, "tuning"))
        if other:
            raise DeployError(
                f"--out {out}: holds {', '.join(other[:3])}, which no artifact has; choose an empty directory"
            )


def prepare_dir(out: Path) -> None:
    """An empty (or new) directory, or an earlier artifact, whole or partly written (its files are replaced;
    an earlier tuning's run store stays)."""
    check_out_dir(out)
    if out.is_dir():
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


def target_attrs_of(builder, attrs: dict) -> tuple[dict, str]:
    """(the attributes to merge into the target, "") or ({}, why they cannot be): only those the judge
    allows a candidate (harness/verify.py), and only when the target takes them."""
    from ..harness.verify import verify_target_attrs

    if not attrs:
        return {}, ""
    try:
        verify_target_attrs(attrs)
        builder.target(attrs)
    except ForbiddenConstruct as e:
        return {}, f"refused (off the judge's allow-list): {e.construct}"
    except Exception as e:  # noqa: BLE001 -- TVM's target parser raises several kinds
        return {}, f"not a target attribute of {builder.profile.name}: {last_line(e, 200)}"
    return dict(attrs), ""


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
    max_memory: int | str | None = None,
    runs: int = 200,
    profile_dir: str | Path | None = None,
) -> Deployment:
    """Deploys `model` (a problem id, a Problem, or an ONNX file with `inputs` shapes "NAME=1x3x96x96") for
    `backend` (a profile name or BackendProfile) into `out` (default deploy/<model>-<backend>), then
    verifies it (deploy/verification.py) unless `verify` is False. Decisions: `from_run` (a run directory:
    its best candidate of the model whole), the kernel database (`kernel_db`, default $EKB_KERNEL_DB;
    `use_db=False` skips it), a fresh LEKA tuning of `trials` judge evaluations, then (`rules`) the rule-based
    schedules; the rest tvm-default. `max_memory` (bytes, or a size such as "256K"): the planned memory
    (activations + workspace) must fit, else DeployError before anything is written. `quick`: the short
    timing protocol. `measure`: time kernels and the model on the host; `runs`: single runs timed for the
    latency percentiles; `profile_dir`: the per-kernel profile goes there. Raises EKBError subclasses."""
    problem = resolve_model(model, inputs, atol, rtol)
    req = request(problem, backend, out, from_run, kernel_db, use_db, trials, rules, threads, quick)
    req.measure = measure
    if max_memory is not None:
        from .memory import parse_size

        req.max_memory_text = str(max_memory)
        req.max_memory = max_memory if isinstance(max_memory, int) else parse_size(max_memory)
    stages = Stages()
    decided = decide(req, stages)
    graph = prepare_graph(req, decided, stages)
    plan = memory_stage(req, decided, graph, stages)
    manifest = write_artifact(req, decided, graph, plan, stages)
    result = Deployment(req.out, manifest, None, decided.notes)
    if verify:
        from .verification import verify as verify_artifact

        result.verification = verify_artifact(
            req.out,
            quick=quick,
            tracker=tracker,
            checks=checks,
            measure=measure,
            runs=runs,
            profile_dir=profile_dir,
        )
        result.manifest = json.loads((req.out / "manifest.json").read_text())
    return result


def request(problem, backend, out, from_run, kernel_db, use_db, trials, rules, threads, quick) -> Request:
    """The request stage: everything checked that can be before any work (one line each)."""
    from ..backends.registry import as_profile
    from ..harness.timing import TimingConfig
    from ..kerneldb import KernelDB

    profile = as_profile(backend, threads)
    builder = backend_of(profile)
    if profile.kind == "cross":
        builder.check_toolchain()  # ToolchainMissing: one line, before anything is built
    out = Path(out) if out is not None else Path("deploy") / f"{problem.name}-{profile.name}"
    check_out_dir(out)
    if from_run is not None:
        from ..store import DB_NAME

        if not (Path(from_run) / DB_NAME).is_file():
            raise DeployError(f"--from {from_run}: no run store ({DB_NAME}) there")
    if "tvm" not in sys.modules:
        from ..tvm_env import set_threads

        set_threads(profile.threads)
    db_path = None
    if use_db:
        with KernelDB(kernel_db) as db:
            db_path = str(db.path)
    return Request(
        problem,
        profile,
        builder,
        out,
        TimingConfig.quick() if quick else TimingConfig(),
        tvm_versions(),
        Path(from_run) if from_run is not None else None,
        db_path,
        trials,
        rules,
    )


# ------------------------------------------------------------------------------------------ decisions
def decide(req: Request, stages: Stages) -> Decided:
    """The decisions stage: the run's best candidate of the model whole, when there is one; else each kernel
    from the run's other candidates, the kernel database, a tuning and the rules."""
    from ..reference import build_reference

    reference = build_reference(req.problem)
    stages.done("reference")
    notes: list[str] = []
    by_workload: dict[str, list] = {}
    if req.from_run is not None:
        cand, notes = best_candidate(req.from_run, req.profile.name, req.problem.id)
        if cand is not None:
            decided = whole_candidate(req, reference, cand)
            decided.notes = notes + decided.notes
            stages.done("decisions")
            return decided
        by_workload, more = run_offers(req.from_run, req.profile.name)
        notes = list(dict.fromkeys(notes + more))
    decided = Decided(reference, [], notes=notes)
    decided.kernels = offered_decisions(req, reference, by_workload, req.builder.target())
    stages.done("decisions")
    if req.trials > 0 and any(k.source == TVM_DEFAULT for k in decided.kernels):
        tuned(req, decided, by_workload)
        stages.done("tuning")
    if req.rules and any(k.source == TVM_DEFAULT for k in decided.kernels):
        ruled(req, decided)
        stages.done("rules")
    return decided


def whole_candidate(req: Request, reference, cand: RunCandidate) -> Decided:
    """The run's candidate as it was judged: its graph, its target attributes, its decision for each kernel
    by name (a kernel it did not schedule stays the reference's); what cannot be applied is recorded."""
    dec = cand.spec.decisions
    passes, graph, graph_why = dec.graph.get("passes"), None, ""
    if passes:
        try:
            reference = graph_reference_of(req.problem, reference, passes)
            graph = {"passes": list(passes), "source": cand.label()}
        except DeployError as e:
            graph_why = str(e)
    attrs, attrs_why = target_attrs_of(req.builder, dec.target_attrs)
    target = req.builder.target(attrs)
    kernels = model_kernels(reference)
    offered = leka_offers(cand.spec, cand.speedup, kernels, "run", cand.provenance())
    funcs = reference.primfuncs()
    for k in kernels:
        k.pinned = True
        if k.name in offered:
            take(k, [offered[k.name]], funcs[k.name], target, req.versions["tvm"])
        elif k.name in dec.scheduled_funcs():
            k.fallbacks.append(
                f"{cand.label()} scheduled {k.name} of workload {dec.workloads.get(k.name)}; here it is "
                f"{k.workload}: not applied"
            )
    carry = carryover(cand, kernels, graph_why, attrs_why)
    return Decided(reference, kernels, attrs, graph, carry)


def offered_decisions(
    req: Request, reference, by_workload: dict, target, tuned_spec=None
) -> list[KernelChoice]:
    """Each kernel of `reference` takes the first offer that applies: the run's, the tuned candidate's
    (`tuned_spec`: (spec, speedup), LEKA's on the graph it changed, judged on this very model), the kernel
    database's."""
    from ..backends.host import resolve_target
    from ..kerneldb import KernelDB
    from ..kerneldb import target_key as db_target_key

    target_key = db_target_key(resolve_target(req.profile))  # as LEKA records it (search.kernels)
    kernels = model_kernels(reference)
    funcs = reference.primfuncs()
    offered = leka_offers(tuned_spec[0], tuned_spec[1], kernels) if tuned_spec is not None else {}
    stored = KernelDB(req.db_path) if req.db_path else None
    try:
        for k in kernels:
            offers = list(by_workload.get(k.workload, []))
            offers += [offered[k.name]] if k.name in offered else []
            offers += db_offers(stored, k.workload, target_key) if stored is not None else []
            take(k, offers, funcs[k.name], target, req.versions["tvm"])
    finally:
        if stored is not None:
            stored.close()
    return kernels


def tuned(req: Request, decided: Decided, by_workload: dict) -> None:
    """A fresh tuning (deploy/tune.py) for the kernels still without a decision; its graph and target
    attributes when it kept them."""
    from .tune import tune

    out = req.out / "tuning"
    best = tune(
        req.problem, req.profile, req.trials, out, Path(req.db_path) if req.db_path else None, req.timing
    )
    decided.tuning = {"trials": req.trials, "run_dir": str(out), "speedup": best[1] if best else None}
    if best is None:
        return
    decided.target_attrs, why = target_attrs_of(req.builder, best[0].decisions.target_attrs)
    if why:
        decided.notes.append(f"the tuned candidate's target attributes: {why}")
    target = req.builder.target(decided.target_attrs)
    passes = best[0].decisions.graph.get("passes")
    if passes:  # the model on the graph LEKA kept
        decided.graph = {"passes": list(passes), "source": "leka (--trials)"}
        decided.reference = graph_reference_of(req.problem, decided.reference, passes)
        decided.kernels = offered_decisions(req, decided.reference, by_workload, target, best)
        return
    offered = leka_offers(best[0], best[1], decided.kernels)  # the same graph: for kernels without one
    funcs = decided.reference.primfuncs()
    for k in decided.kernels:
        if k.source == TVM_DEFAULT and k.name in offered:
            take(k, [offered[k.name]], funcs[k.name], target, req.versions["tvm"])


def ruled(req: Request, decided: Decided) -> None:
    """The rule-based schedules for the kernels still without a decision."""
    graph_ref = decided.reference if decided.graph is not None else None
    offers = rule_offers(req.problem, req.profile, decided.kernels, graph_ref)
    funcs = decided.reference.primfuncs()
    target = req.builder.target(decided.target_attrs)
    for k in decided.kernels:
        if k.source == TVM_DEFAULT and k.name in offers:
            take(k, [offers[k.name]], funcs[k.name], target, req.versions["tvm"])


# ------------------------------------------------------------------------------------------ graph
def prepare_graph(req: Request, decided: Decided, stages: Stages) -> Graph:
    """The graph stage: tvm-default's module on the deployed graph, the weights, main's signature checked,
    each decided kernel timed on the host, and the deployed module."""
    from ..baselines.tvm_default import tvm_default_module

    problem, reference = req.problem, decided.reference
    default_mod = tvm_default_module(reference.module, req.builder.target())
    weights = transformed_weights(reference)
    stages.done("weights")
    n_in = len(reference.input_names)
    main_params = list(reference.module["main"].params)
    if len(problem.inputs) != n_in or len(main_params) != n_in + len(weights):
        raise DeployError(
            f"{problem.id}: main takes {len(main_params)} arguments; the model has {len(problem.inputs)} "
            f"inputs and {len(weights)} weights"
        )
    for spec, p in zip(problem.inputs, main_params[:n_in], strict=True):
        if tuple(int(d) for d in p.ty.shape.values) != tuple(spec.shape):
            raise DeployError(f"{problem.id}: input {spec.name} {spec.shape} is not main's {p.name} {p.ty}")
    if req.measure and req.profile.kind == "host" and req.profile.run == "local":
        measure_kernels(req, decided, default_mod, weights)
        stages.done("kernel timing")
    elif req.measure:
        for k in decided.kernels:
            k.measured = f"not measured: {req.profile.name} runs {req.profile.run}"
    deployed = graph_module(default_mod, {k.name: k.func for k in decided.kernels if k.func is not None})
    kernel_figures(decided.kernels, deployed)
    return Graph(default_mod, deployed, weights, n_in, main_params[n_in:])


def kernel_figures(kernels: list[KernelChoice], deployed) -> None:
    """Each kernel's FLOPs (TVM's estimate), the bytes of its buffers and of its outputs, per call: the
    per-kernel profile's roofline."""
    from ..executor import graph_steps
    from ..ir.replay import buffer_signature
    from ..reference import kernel_flops
    from .cprogram import CTensor, nbytes

    outs = {s.func: len(s.outs) for s in graph_steps(deployed["main"]) if s.kind == "call_tir"}
    for k in kernels:
        func = deployed[k.name]
        sizes = [nbytes(CTensor(shape, dtype, "")) for shape, dtype in buffer_signature(func)]
        k.flops = kernel_flops(func)
        k.bytes = sum(sizes)
        k.bytes_written = sum(sizes[len(sizes) - outs.get(k.name, 1) :])


def measure_kernels(req: Request, decided: Decided, default_mod, weights) -> None:
    """Each decided kernel, deployed vs tvm-default's version of it, timed here with the harness's protocol
    (same arguments: those of its first call in main). A decision measured slower in every round goes back to
    tvm-default, recorded -- unless it is the run's candidate's, taken whole (as it was judged)."""
    import tvm

    from ..backends.host import evaluator_timer, primfunc_library
    from ..executor import KernelRunner
    from ..harness.timing import paired_speedup, time_interleaved

    kernels = decided.kernels
    decided_ones = [k for k in kernels if k.func is not None]
    for k in kernels:
        k.measured = "tvm-default's kernel" if k.func is None else k.measured
    if not decided_ones:
        return
    dev = tvm.cpu(0)
    mine = graph_module(default_mod, {k.name: k.func for k in decided_ones})
    lib = tvm_compile(primfunc_library(mine), req.builder.target(decided.target_attrs))
    base_mod = tvm.IRModule({k.name: default_mod[k.name] for k in decided_ones})
    base = tvm_compile(primfunc_library(base_mod), req.builder.target())
    runner = KernelRunner(mine, lib, dev, lambda a: tvm.runtime.tensor(a, dev), check_inputs=False)
    sample = req.problem.sample_inputs(0)
    args = [tvm.runtime.tensor(np.asarray(sample[s.name], order="C"), dev) for s in req.problem.inputs]
    args += [tvm.runtime.tensor(w, dev) for w in weights]
    calls: list = []
    runner.run("main", args, calls=calls)
    first = {}
    for name, call_args, _ in calls:
        first.setdefault(name, call_args)
    for k in decided_ones:
        t = time_interleaved(
            {
                "deployed": evaluator_timer(lib.mod, k.name, dev, first[k.name]),
                TVM_DEFAULT: evaluator_timer(base.mod, k.name, dev, first[k.name]),
            },
            req.timing,
        )
        s, lo, hi = paired_speedup(t[TVM_DEFAULT], t["deployed"])
        k.measured_speedup, k.measured_ci = round(s, 4), [round(lo, 4), round(hi, 4)]
        k.measured = (
            f"{t['deployed'].median * 1e6:.2f} us vs tvm-default {t[TVM_DEFAULT].median * 1e6:.2f} us"
        )
        if hi < 1.0 and not k.pinned:
            revert(k, f"measured slower than tvm-default's kernel here ({s:.2f}x, every round)")
            k.measured = f"reverted: {k.fallbacks[-1]}"


# ------------------------------------------------------------------------------------------ memory
def memory_stage(req: Request, decided: Decided, graph: Graph, stages: Stages) -> MemoryPlan:
    """The memory stage: the plan of the deployed module for its target; DeployError when it does not fit
    the budget (nothing written yet)."""
    import tvm

    funcs = {
        gv.name_hint: f for gv, f in graph.deployed.functions.items() if isinstance(f, tvm.tirx.PrimFunc)
    }
    target = req.builder.target(decided.target_attrs)
    weights_bytes = sum(int(w.nbytes) for w in graph.weights)
    plan = plan_memory(graph.deployed, funcs, target, req.profile.threads, weights_bytes)
    stages.done("memory plan")
    check_budget(plan, req.max_memory, req.max_memory_text)
    return plan


# ------------------------------------------------------------------------------------------ artifact
def write_artifact(req: Request, decided: Decided, graph: Graph, plan: MemoryPlan, stages: Stages) -> dict:
    """The artifact stage: the files, their sizes and manifest.json; returns the manifest."""
    from .size import artifact_size
    from .write import (
        CProgramJob,
        export_library,
        host_c_compiler,
        write_c_program,
        write_model_files,
        write_weights,
    )

    problem, profile, out = req.problem, req.profile, req.out
    prepare_dir(out)
    weight_entries = write_weights(out, graph.weight_params, graph.weights)
    write_model_files(out, problem)
    target = req.builder.target(decided.target_attrs)
    compiler, why = (req.builder.compiler(), "") if profile.kind == "cross" else host_c_compiler(profile)
    library = export_library(graph.deployed, target, profile, compiler, out / "model.so")
    title = f"{problem.id} on {profile.name} ({target.attrs.get('mtriple') or target.attrs.get('mcpu', '')})"
    c_program: dict = {"status": why}
    if compiler is not None:
        job = CProgramJob(graph.deployed, target, compiler, title, profile.threads, list(profile.emulator))
        try:
            c_program = write_c_program(job, out, graph.n_inputs, weight_entries)
        except EKBError as e:  # a host's C toolchain that cannot link statically: recorded, not fatal
            if profile.kind == "cross" or isinstance(e, DeployError):
                raise
            c_program = {"status": f"not built: {e}"}
    stages.done("build")
    manifest = manifest_of(req, decided, graph, plan, library, weight_entries, c_program)
    size = artifact_size(out, manifest, profile, compiler)
    manifest["size"] = size.to_dict()
    stages.done("size")
    manifest["seconds"] = dict(stages.seconds)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def manifest_of(
    req: Request, decided: Decided, graph: Graph, plan: MemoryPlan, library, weights, c_program
) -> dict:
    from ..backends.host import resolve_target
    from ..kerneldb import target_key

    problem, profile = req.problem, req.profile
    outputs = tensor_entries(decided.reference.module["main"].ret_ty)
    out_names = [o.name for o in problem.model.graph.output]
    if len(out_names) != len(outputs):
        out_names = [f"output{i}" for i in range(len(outputs))]
    target = json.loads(target_key(resolve_target(profile)))  # the profile's, as the kernel database keys it
    return {
        "format": FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "model": {
            "id": problem.id,
            "source": problem.source,
            "file": "model.onnx",
            "sha256": model_hash(problem.model),
            "atol": problem.atol,
            "rtol": problem.rtol,
            "integer": bool(problem.integer),
        },
        # "name": the artifact's (an identifier: problems/names.py); "onnx_name": the model's own, when other
        "inputs": [io_entry(s.name, list(s.shape), s.dtype, problem.renaming) for s in problem.inputs],
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
        "target": {**target, **decided.target_attrs},
        "target_attrs": dict(decided.target_attrs),
        "threads": profile.threads,
        "versions": req.versions,
        "library": library,
        "weights": weights,
        "c_program": c_program,
        "decisions": {
            "order": list(SOURCES),
            "rules": req.rules,
            "from_run": str(req.from_run) if req.from_run is not None else None,
            "kernel_db": req.db_path,
            "tuning": decided.tuning,
            "graph": decided.graph,
        },
        "carryover": decided.carryover.to_dict() if decided.carryover is not None else None,
        "kernels": [k.manifest_entry() for k in decided.kernels],
        "memory": plan.to_dict(),
    }
