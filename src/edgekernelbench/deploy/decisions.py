"""Where each kernel of a deployed model gets its schedule from.

The kernels are the PrimFuncs the reference's `main` calls, each with its workload key
(ir.replay.workload_key: the same workload in any model has the same key).

`--from RUN` deploys the run's best candidate of the model whole (`best_candidate`: the correct, plausible
result of that model on the backend with the highest judged speedup over tvm-default, among those given as
decisions): its graph passes, every kernel's decisions by name, and its target attributes (LEKA's fast-math
flags); a kernel it left unscheduled stays as the reference has it, as it was judged. Each part that cannot be
applied (a pass, a trace, an attribute off the judge's allow-list) is recorded with its reason (`Carryover`,
the manifest's "carryover"), and the deploy goes on without it. Candidates given as module text or schedule
code are not used: that text runs only in the judge's sandbox, never here.

Without such a candidate, decisions are offered, in this order, by

1. the run's other correct candidates on the backend (`--from RUN`), best speedup over tvm-default first; a
   candidate's layered decisions for a PrimFunc serve every kernel of the same workload;
2. the kernel database (kerneldb.py), by workload key and target key, best speedup first;
3. a fresh LEKA tuning of the model (offline proposer, `--trials N` judge evaluations: deploy/tune.py), for
   the kernels still without a decision (its graph and decisions, as for a run's candidate);
4. with `--rules`, the rule-based schedule (search/rules) of each kernel still without one: not judged, so
   on the host every decided kernel is timed against tvm-default's version before it is kept (build.py).

A decision is used when it was recorded with this TVM version, replays on the kernel (its layers, in order)
and the kernel then builds for the target; otherwise the next offer is tried and the reason is kept. A kernel
left without a decision gets tvm-default's version of it (TVM's default pipeline as tvm.compile gives it:
on a CPU, unscheduled), and its manifest entry says so, with the reasons.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field, fields
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
    # decided by the run's best candidate of this model, taken whole (its decision, or its leaving the kernel
    # as the reference has it): no other source is asked and it is never reverted
    pinned: bool = False
    flops: float | None = None  # per call, TVM's estimate (the deployed kernel's)
    bytes: int = 0  # its buffers, per call
    bytes_written: int = 0  # its outputs'
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


def judged_candidates(run_dir: Path, backend: str, problems: list[str] | None, notes: list[str]):
    """(result, spec, file) of the run's correct, plausible candidates on `backend` (of `problems`, or all)
    whose decisions can be deployed, best speedup over tvm-default first; why the others cannot goes into
    `notes`."""
    from ..store import DB_NAME, RunStore

    run_dir = Path(run_dir)
    if not (run_dir / DB_NAME).is_file():
        raise DeployError(f"--from {run_dir}: no run store ({DB_NAME}) there")
    with RunStore(run_dir) as store:
        results = store.results(backend=backend, problems=problems)
    correct = [r for r in results if r.correct and not r.implausible]
    if not correct:
        notes.append(f"run {run_dir}: no correct candidate on {backend}")
    for r in sorted(correct, key=lambda r: -(r.speedups.get(TVM_DEFAULT) or 0.0)):
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
        yield r, spec, path


def run_offers(run_dir: Path, backend: str) -> tuple[dict[str, list[Offer]], list[str]]:
    """workload key -> the run's offers for it (best candidate first), and notes on what was left out."""
    notes: list[str] = []
    offers: dict[str, list[Offer]] = {}
    workloads: dict = {}
    for r, spec, path in judged_candidates(run_dir, backend, None, notes):
        where = f"{r.problem} sample {r.sample}"
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


@dataclass
class KernelCarry:
    """One kernel the run's candidate scheduled: whether the artifact has its decision, and why not."""

    name: str
    carried: bool
    why: str = ""


@dataclass
class Carryover:
    """What of the run's best candidate (`--from RUN`) the artifact holds, part by part, and the judge's
    figures it should reproduce."""

    candidate: str  # RunCandidate.label()
    judged_speedup: float | None  # over tvm-default
    judged_ci: list[float] | None
    judged_vs_onnxruntime: float | None
    judged: dict  # RunCandidate.judged
    graph: list[str]  # the candidate's graph passes, by name
    graph_carried: bool = True
    graph_why: str = ""
    target_attrs: dict = field(default_factory=dict)
    target_attrs_carried: bool = True
    target_attrs_why: str = ""
    kernels: list[KernelCarry] = field(default_factory=list)
    left_as_reference: list[str] = field(default_factory=list)  # kernels the candidate did not schedule

    def missing(self) -> list[str]:
        """One line per part that did not carry over, with its reason ([] when the candidate is whole)."""
        out = []
        if not self.graph_carried:
            out.append(f"graph passes {self.graph}: {self.graph_why}")
        if not self.target_attrs_carried:
            out.append(f"target attributes {self.target_attrs}: {self.target_attrs_why}")
        out += [f"kernel {k.name}: {k.why}" for k in self.kernels if not k.carried]
        return out

    def to_dict(self) -> dict:
        d = json.loads(json.dumps(asdict(self)))
        d["whole"] = not self.missing()
        d["not_carried"] = self.missing()
        return d


def carryover(cand: RunCandidate, kernels: list[KernelChoice], graph_why: str, attrs_why: str) -> Carryover:
    """The Carryover of `cand` into `kernels` (the deployed graph's, decided); `graph_why` / `attrs_why`: why
    its graph passes / target attributes were not applied ("" when they were)."""
    dec = cand.spec.decisions
    by_name = {k.name: k for k in kernels}
    carried = []
    for func in dec.scheduled_funcs():
        k = by_name.get(func)
        if k is None:
            why = "no kernel of that name in the deployed graph"
            carried.append(
                KernelCarry(func, False, why + (" (its graph was not applied)" if graph_why else ""))
            )
        elif k.source == "run" and k.provenance.get("sample") == cand.sample and k.pinned:
            carried.append(KernelCarry(func, True))
        else:
            why = "; ".join(k.fallbacks) or f"took {k.source} instead"
            carried.append(KernelCarry(func, False, why))
    scheduled = set(dec.scheduled_funcs())
    return Carryover(
        candidate=cand.label(),
        judged_speedup=cand.speedup,
        judged_ci=cand.ci,
        judged_vs_onnxruntime=cand.vs_onnxruntime,
        judged=cand.judged,
        graph=[p.get("name", "?") for p in dec.graph.get("passes") or []],
        graph_carried=not graph_why,
        graph_why=graph_why,
        target_attrs=dict(dec.target_attrs),
        target_attrs_carried=not attrs_why,
        target_attrs_why=attrs_why,
        kernels=carried,
        left_as_reference=[k.name for k in kernels if k.name not in scheduled],
    )


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


def leka_offers(
    spec: KernelSpec,
    speedup: float | None,
    kernels: list[KernelChoice],
    source: str = "leka",
    provenance: dict | None = None,
) -> dict[str, Offer]:
    """kernel name -> a candidate's decisions for it (LEKA's tuned one, or the run's best of this model with
    `source` "run"). Offered by name when the candidate kept the reference's graph, else only for kernels of
    the same workload (the deployment is on the candidate's graph, or its graph change left some kernels as
    they were)."""
    out = {}
    changed = bool(spec.decisions.graph.get("passes"))
    prov = provenance or {"problem": spec.problem, "method": spec.method}
    for k in kernels:
        layers = dict(spec.decisions.layer_traces(k.name))
        if changed and spec.decisions.workloads.get(k.name) != k.workload:
            continue
        if layers:
            out[k.name] = Offer(source, layers, dict(prov), speedup)
    return out


@dataclass
class RunCandidate:
    """The best judged candidate of one model in a run directory, on one backend: what `--from RUN` deploys
    whole (its graph passes, its kernels' decisions, its target attributes)."""

    run: str
    problem: str
    sample: int
    method: str
    path: str
    spec: KernelSpec
    speedup: float | None  # judged over tvm-default
    ci: list[float] | None  # the judge's paired 95% interval of it
    vs_onnxruntime: float | None
    judged: dict  # the judge's medians (s): deployed candidate, tvm-default; its per-kernel profile

    def label(self) -> str:
        return f"run {self.run} ({self.problem} sample {self.sample})"

    def provenance(self) -> dict:
        return {
            "run": self.run,
            "problem": self.problem,
            "sample": self.sample,
            "method": self.method,
            "candidate": self.path,
        }


def best_candidate(run_dir: Path, backend: str, problem_id: str) -> tuple[RunCandidate | None, list[str]]:
    """The run's best correct, plausible candidate of `problem_id` on `backend` whose decisions can be
    deployed (highest judged speedup over tvm-default), and notes on better ones that cannot (and why)."""
    notes: list[str] = []
    for r, spec, path in judged_candidates(run_dir, backend, [problem_id], notes):
        judged = {
            "candidate_s": r.runtime.median if r.runtime else None,
            "tvm_default_s": r.baselines[TVM_DEFAULT].median if TVM_DEFAULT in r.baselines else None,
            "kernels": [asdict(k) for k in r.kernels],
            "disturbed": r.timing_env.disturbed if r.timing_env else None,
        }
        cand = RunCandidate(
            str(run_dir),
            r.problem,
            r.sample,
            r.method,
            str(path),
            spec,
            r.speedups.get(TVM_DEFAULT),
            r.speedup_ci.get(TVM_DEFAULT),
            r.speedups.get("onnxruntime"),
            judged,
        )
        return cand, notes
    return None, notes


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
