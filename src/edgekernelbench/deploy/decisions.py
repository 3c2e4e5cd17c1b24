"""Where each kernel of a deployed model gets its schedule from.

The kernels are the PrimFuncs the reference's `main` calls, each with its workload key
(ir.replay.workload_key: the same workload in any model has the same key). Decisions are offered, in this
order, by

1. a run directory (`--from RUN`): the run's correct candidates on the backend, best speedup over tvm-default
   first; a candidate's layered decisions for a PrimFunc serve every kernel of the same workload. Candidates
   given as module text or schedule code are not used: that text runs only in the judge's sandbox, never here;
2. the kernel database (kerneldb.py), by workload key and target key, best speedup first;
3. a fresh LEKA tuning of the model (offline proposer, `--trials N` judge evaluations: deploy/tune.py), for
   the kernels still without a decision;
4. with `--rules`, the rule-based schedule (search/rules) of each kernel still without one: not judged, so
   on the host every decided kernel is timed against tvm-default's version before it is kept (build.py).

The graph comes first: when the run's best candidate of this model (`--from RUN`), else LEKA's tuned
candidate (`--trials N`), kept a graph-layer change (convolutions channels last, fast math), the model is
deployed on that graph -- its weights re-laid out once at deploy time -- and every kernel is looked up by
the workload it has there.

A decision is used when it was recorded with this TVM version, replays on the kernel (its layers, in order)
and the kernel then builds for the target; otherwise the next offer is tried and the reason is kept. A kernel
left without a decision gets tvm-default's version of it (TVM's default pipeline as tvm.compile gives it:
on a CPU, unscheduled), and its manifest entry says so, with the reasons.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, fields
from pathlib import Path

from ..errors import DecisionError, EKBError, MalformedCandidate, last_line
from ..ir.spec import SCHEDULE_LAYERS, KernelSpec, load_candidate
from ..rundir import existing_candidate
from ..tvm_env import compile as tvm_compile
from .model import DeployError

log = logging.getLogger(__name__)

TVM_DEFAULT = "tvm-default"
SOURCES = ("run", "kerneldb", "leka", "rules", TVM_DEFAULT)


@dataclass
class Offer:
    """A decision one source offers for a kernel: its layer traces and where they come from."""

    source: str  # run | kerneldb | leka
    layers: dict  # layer -> trace JSON
    provenance: dict  # problem, method, sample / entry id, ...
    speedup: float | None = None  # what the source measured (whole-problem speedup over tvm-default)
    tvm_version: str = ""  # "" when the source does not say (a run of this installation)

    def label(self) -> str:
        p = self.provenance
        if self.source == "kerneldb":
            return f"kernel database entry {p.get('entry')}"
        if self.source == "run":
            return f"run {p.get('run')} ({p.get('problem')} sample {p.get('sample')})"
        if self.source == "rules":
            return f"the rule-based schedule ({p.get('strategy')})"
        return f"{self.source} ({p.get('problem', '')})"


@dataclass
class KernelChoice:
    name: str  # the PrimFunc's name in the reference
    workload: str
    calls: int  # how often main calls it
    source: str = TVM_DEFAULT
    layers: dict | None = None
    provenance: dict = field(default_factory=dict)
    recorded_speedup: float | None = None
    measured_speedup: float | None = None  # this kernel, deployed vs tvm-default's, timed at deploy time
    measured_ci: list[float] | None = None
    measured: str = "not measured"  # or why it was not
    fallbacks: list[str] = field(default_factory=list)  # offers not used, and why
    func: object = field(default=None, repr=False)  # the scheduled PrimFunc (None: tvm-default's)

    def manifest_entry(self) -> dict:
        """As JSON data: the decision's layers by name (their traces are in its source), no PrimFunc."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("func", "layers")}
        d["layers"] = sorted(self.layers or {}, key=SCHEDULE_LAYERS.index)
        return json.loads(json.dumps(d))


def model_kernels(reference) -> list[KernelChoice]:
    """The kernels main calls, in call order, each once (with its number of calls), all tvm-default yet."""
    from ..ir.replay import workload_key

    funcs = reference.primfuncs()
    calls = reference.kernel_calls()
    out = []
    for name in dict.fromkeys(calls):
        if name in funcs:
            out.append(KernelChoice(name, workload_key(funcs[name]), calls.count(name)))
    return out


# ------------------------------------------------------------------------------------------ sources
def _candidate_file(run_dir: Path, problem: str, sample: int, recorded: str) -> Path | None:
    found = existing_candidate(run_dir, problem, sample, order=(".json", ".py", ".tvmscript"))
    if found is not None:
        return found
    return Path(recorded) if recorded and Path(recorded).is_file() else None


def _workload_of(problem_id: str, func: str, cache: dict) -> str | None:
    """The workload key of PrimFunc `func` in a suite problem's reference (None when unknown here)."""
    if problem_id not in cache:
        try:
            from ..ir.replay import workload_key
            from ..problems import get_problem
            from ..reference import build_reference

            funcs = build_reference(get_problem(problem_id)).primfuncs()
            cache[problem_id] = {name: workload_key(f) for name, f in funcs.items()}
        except EKBError as e:
            log.info("run problem %s: %s", problem_id, e)
            cache[problem_id] = {}
    return cache[problem_id].get(func)


def run_offers(run_dir: Path, backend: str) -> tuple[dict[str, list[Offer]], list[str]]:
    """workload key -> the run's offers for it (best candidate first), and notes on what was left out."""
    from ..store import DB_NAME, RunStore

    run_dir = Path(run_dir)
    if not (run_dir / DB_NAME).is_file():
        raise DeployError(f"--from {run_dir}: no run store ({DB_NAME}) there")
    with RunStore(run_dir) as store:
        results = store.results(backend=backend)
    correct = [r for r in results if r.correct and not r.implausible]
    notes: list[str] = []
    if not correct:
        notes.append(f"run {run_dir}: no correct candidate on {backend}")
    correct.sort(key=lambda r: -(r.speedups.get(TVM_DEFAULT) or 0.0))
    offers: dict[str, list[Offer]] = {}
    workloads: dict = {}
    for r in correct:
        path = _candidate_file(run_dir, r.problem, r.sample, r.candidate)
        where = f"{r.problem} sample {r.sample}"
        if path is None:
            notes.append(f"{where}: candidate file not found")
            continue
        try:
            spec = load_candidate(path, r.problem)
        except MalformedCandidate as e:
            notes.append(f"{where}: {e}")
            continue
        why = unusable(spec)
        if why:
            notes.append(f"{where}: {why}")
            continue
        if spec.decisions.target_attrs:  # e.g. LEKA's fast-math flags: its kernels' decisions stand alone
            attrs = spec.decisions.target_attrs
            notes.append(f"{where}: target attributes {attrs} not carried (built for the profile's target)")
        graph = bool(spec.decisions.graph.get("passes"))
        for func in spec.decisions.scheduled_funcs():
            # a candidate on another graph names its kernels' workloads itself (LEKA records them)
            wl = spec.decisions.workloads.get(func)
            if not wl and not graph:
                wl = _workload_of(r.problem, func, workloads)
            if not wl:
                notes.append(f"{where}: no workload key for {func}")
                continue
            layers = dict(spec.decisions.layer_traces(func))
            prov = {
                "run": str(run_dir),
                "problem": r.problem,
                "sample": r.sample,
                "method": r.method,
                "func": func,
                "candidate": str(path),
            }
            offers.setdefault(wl, []).append(Offer("run", layers, prov, r.speedups.get(TVM_DEFAULT)))
    return offers, notes


def unusable(spec: KernelSpec) -> str:
    """Why a judged candidate's decisions cannot serve a deployment ("" when they can)."""
    if spec.module is not None:
        return "given as module text (parsed only in the judge's sandbox): not used"
    if spec.schedule_code:
        return "given as schedule code (run only in the judge's sandbox): not used"
    return ""


def db_offers(db, workload: str, target: str) -> list[Offer]:
    return [
        Offer(
            "kerneldb",
            dict(e.layers),
            {"entry": e.id, "problem": e.problem, "method": e.method, "func": e.func, "created": e.created},
            e.speedup,
            e.tvm_version,
        )
        for e in db.lookup(workload, target)
    ]


def rule_offers(problem, profile, kernels: list[KernelChoice], reference=None) -> dict[str, Offer]:
    """kernel name -> its rule-based schedule (search/rules: one rule per operator class, no judging), on
    `reference` (default: the model's own)."""
    from ..search.rules import rule_schedules

    scheduled = rule_schedules(
        problem, profile.vector_lanes, profile.threads, reference=reference, verify_build=False
    )
    by_name = {fs.name: fs for fs in scheduled if fs.traces}
    out = {}
    for k in kernels:
        if k.name in by_name:
            fs = by_name[k.name]
            prov = {"problem": problem.id, "method": "rules", "strategy": f"{fs.op_class}/{fs.strategy}"}
            out[k.name] = Offer("rules", dict(fs.traces), prov)
    return out


def run_graph(run_dir: Path, backend: str, problem_id: str) -> tuple[list[dict], str] | None:
    """(graph passes, where from) of the run's best correct candidate of this very problem on `backend`,
    when that candidate changed the graph (LEKA kept channels-last or fast math); else None."""
    from ..store import RunStore

    with RunStore(Path(run_dir)) as store:
        results = [r for r in store.results(backend=backend) if r.problem == problem_id and r.correct]
    if not results:
        return None
    best = max(results, key=lambda r: r.speedups.get(TVM_DEFAULT) or 0.0)
    path = _candidate_file(Path(run_dir), best.problem, best.sample, best.candidate)
    try:
        spec = load_candidate(path, best.problem) if path is not None else None
    except MalformedCandidate:
        return None
    passes = spec.decisions.graph.get("passes") if spec is not None and not unusable(spec) else None
    return (list(passes), f"run {run_dir} ({best.problem} sample {best.sample})") if passes else None


def leka_offers(spec: KernelSpec, speedup: float | None, kernels: list[KernelChoice]) -> dict[str, Offer]:
    """kernel name -> the tuned candidate's decisions for it. Offered by name when the candidate kept the
    reference's graph, else only for kernels of the same workload (the deployment is on the candidate's
    graph, or its graph change left some kernels as they were)."""
    out = {}
    changed = bool(spec.decisions.graph.get("passes"))
    for k in kernels:
        layers = dict(spec.decisions.layer_traces(k.name))
        if changed and spec.decisions.workloads.get(k.name) != k.workload:
            continue
        if layers:
            out[k.name] = Offer("leka", layers, {"problem": spec.problem, "method": spec.method}, speedup)
    return out


# ------------------------------------------------------------------------------------------ applying
def schedule(func, name: str, layers: dict):
    """The PrimFunc with `layers` replayed in order (DecisionError when a step does not apply)."""
    from ..ir.replay import apply_trace, combine_layers

    trace, where = combine_layers([(layer, layers[layer]) for layer in SCHEDULE_LAYERS if layer in layers])
    return apply_trace(func, trace, name, where).mod["main"]


def builds(func, name: str, target) -> str:
    """ "" when the PrimFunc compiles for `target`, else why not (one line)."""
    import tvm

    try:
        tvm_compile(tvm.IRModule({name: func.with_attr("global_symbol", name)}), target)
    except Exception as e:  # noqa: BLE001 -- TVM raises many kinds
        return f"does not build for the target: {last_line(e, 300)}"
    return ""


def take(choice: KernelChoice, offers: list[Offer], ref_func, target, tvm_version: str) -> bool:
    """Uses the first offer that applies (recorded with this TVM version, replays, builds); the others
    tried go into choice.fallbacks with the reason. True when one was taken."""
    for offer in offers:
        if offer.tvm_version and offer.tvm_version != tvm_version:
            choice.fallbacks.append(
                f"{offer.label()} was recorded with TVM {offer.tvm_version}; this is TVM {tvm_version}: "
                "not applied"
            )
            continue
        try:
            func = schedule(ref_func, choice.name, offer.layers)
        except DecisionError as e:
            choice.fallbacks.append(f"{offer.label()} does not apply: {e.detail}")
            continue
        why = builds(func, choice.name, target)
        if why:
            choice.fallbacks.append(f"{offer.label()} {why}")
            continue
        choice.source, choice.layers, choice.func = offer.source, offer.layers, func
        choice.provenance = {**offer.provenance, "tvm_version": offer.tvm_version or tvm_version}
        choice.recorded_speedup = offer.speedup
        return True
    return False


def revert(choice: KernelChoice, why: str) -> None:
    """Back to tvm-default's version of the kernel, with the reason recorded."""
    src = choice.provenance.get("entry")
    label = f"{choice.source}" + (f" entry {src}" if src is not None else "")
    choice.fallbacks.append(f"{label}: {why}")
    choice.source, choice.layers, choice.func, choice.provenance = TVM_DEFAULT, None, None, {}
    choice.recorded_speedup = None
