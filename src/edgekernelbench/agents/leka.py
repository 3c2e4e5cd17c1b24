"""LEKA, the Layered Edge Kernel Agent: one problem, layer by layer, kernel by kernel.

1. Start: every kernel's workload key is looked up in the kernel database for this target; stored
   decisions are replayed before any budget is spent on that kernel; the other kernels start from the
   proposer's starting point (builtin: the rule-based schedule; a model: the reference). One evaluation
   checks them all; if they no longer apply, LEKA starts from the reference. Starting points that the
   judge's profile shows slower than tvm-default's version of the kernel (by SLOWER_BY) are dropped, and
   that start is judged and kept when it improves.
2. The graph layer (proposers that offer graphs: the builtin one): each graph change (convolutions in
   NHWC with the weights re-laid out once in main_transform_params, fast math; search/graph.py), on top of
   those already kept, its kernels at their stored decisions or the proposer's starting point, is judged
   and kept when correct and faster by MIN_GAIN; the kernels below are the kept graph's. Then the
   whole-module target decisions the proposer offers (builtin, on an LLVM target: fast-math flags for
   every kernel), judged and kept the same way.
   A target decision dropped here is judged again with each graph change `_graph_retry` judges (below).
   Then profile the current best (the judge's time share of every kernel) and take the kernels that
   matter (down to MIN_SHARE), the most time above the compute roof first (`_kernels_that_matter`).
3. For each kernel, for each layer in order (loop, memory, target): ask the proposer for that layer's
   decisions only, with the kernel's current IR, the earlier layers' decisions and the judge's feedback;
   judge the candidate, with the judge's profile of that kernel; keep the decision only when it is correct
   and faster (`improves_kernel`: the kernel's own time below the best's by KERNEL_GAIN, the whole model's
   speedup not below the best's by more than WHOLE_SLACK; a model's time varies far more from judge to
   judge than one kernel's); otherwise feed the verdict back (the judge names the failing layer, step
   and instruction, or where the output is wrong) and ask again, up to ATTEMPTS times.
   After the first pass (or when the patience ends it), the correct graph changes the graph layer dropped
   are judged again on the tuned kernels, their decisions carried to the changed graph's kernels by call
   order, or, where the change calls other kernels, its kernels at the proposer's first points
   (`_graph_retry`); one not kept alone is judged once more with the target decisions the target layer
   dropped, and one kept alone has them judged again on top: fast math paid on zoo_resnet18_bn only on
   top of channels last (26.8x over tvm-default against 10.3x on NCHW), and the greedy order never judged
   the two together once channels last fell within the judge's noise (kept in one run, dropped in the
   next). A change kept there after the patience ended the search resumes it on the new graph's kernels
   with what is left of the budget.
4. Revisit the kernels while budget remains (up to MAX_PASSES passes; the builtin proposer offers only
   points not tried yet, so a pass in which it offered nothing ends the search before the budget does).
The search's judgments time the candidate against tvm-default only and profile its kernels once per pass
(AgentConfig.search_baselines; the final judgment times every baseline).
The result is one KernelSpec with the kept layers of every kernel; each accepted kernel decision goes into
the kernel database with its provenance."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ..errors import EKBError
from ..generators.reference_candidates import reference_spec
from ..harness.api import TimingConfig
from ..ir.spec import SCHEDULE_LAYERS, Decisions, KernelDecisions, KernelLayers, KernelSpec, Trace
from ..kerneldb import Entry, KernelDB
from ..search.graph import graph_key, same_graph
from ..search.kernels import KernelInfo, backend_target_key, concat_traces, kernels, tvm_version
from .budget import BudgetExhausted
from .episode import OBJECTIVE, Episode, ProfileRow, profile_rows, score, verdict_text
from .proposers import LayerRequest, Proposal

log = logging.getLogger(__name__)
MIN_SHARE = 0.02  # kernels below this share of the time are left as they are
MIN_GAIN = 1.02  # a decision is kept when the speedup beats the best's by 2% (the judge's run-to-run noise)
KERNEL_GAIN = 1.03  # a kernel's decision is kept when that kernel's own time drops by 3%
WHOLE_SLACK = 1.15  # ... and the whole model's speedup is not below the best's by more than this
ATTEMPTS = 3  # proposals per kernel and layer in one pass
MAX_PASSES = 8


@dataclass
class Whole:
    """LEKA's decisions for the whole module: graph passes (search/graph.py) and target attributes (LLVM's
    fast-math flags: search/graph.target_alternatives)."""

    passes: list[dict] = field(default_factory=list)  # [{"name": ..., "args": {...}}]
    target_attrs: dict[str, object] = field(default_factory=dict)


def build_spec(
    problem,
    state: KernelDecisions,
    method: str,
    code: str | None = None,
    workloads: dict[str, str] | None = None,
    whole: Whole | None = None,
):
    """A candidate: the reference (after the graph passes of `whole`, if any) with `state` (kernel -> layer
    traces) replayed, then `code` (if any), built with the target attributes of `whole`."""
    dec = Decisions()
    if whole and whole.passes:
        dec.graph = {"passes": list(whole.passes)}
    if whole and whole.target_attrs:
        dec.target_attrs = dict(whole.target_attrs)
    for name, layers in state.items():
        for layer, trace in layers.items():
            getattr(dec, layer)[name] = trace
        if workloads and name in workloads:
            dec.workloads[name] = workloads[name]
    spec = KernelSpec(problem=problem.id, decisions=dec, method=f"agent:{method}", schedule_code=code)
    if dec.is_empty() and not code:
        spec.module = reference_spec(problem).module
    return spec


def with_code_trace(layers: KernelLayers, layer: str, trace: Trace) -> KernelLayers:
    """A kernel's layers after appending the trace that a layer's schedule code made: it was recorded on
    the kernel after all its kept layers, so it goes last (in `layer`, or the last layer present)."""
    out = dict(layers)
    last = max([SCHEDULE_LAYERS.index(k) for k in out] + [SCHEDULE_LAYERS.index(layer)])
    slot = SCHEDULE_LAYERS[last]
    out[slot] = concat_traces(out[slot], trace) if slot in out else trace
    return out


def run_leka(ep: Episode, proposer) -> None:
    problem = ep.problem
    ep.usage.patience = ep.cfg.patience  # a run of non-improving judgments ends the search
    machine = getattr(proposer, "machine", None)  # the builtin proposer's: the vectors its points are for
    if machine is not None:
        ep.run_info["machine_lanes"] = machine.lanes  # the report counts points wider than these
    ks = {k.name: k for k in kernels(problem.id)}
    workloads = {k.name: k.workload for k in ks.values()}
    target = backend_target_key(ep.cfg.backend)
    state: KernelDecisions = {}
    db = KernelDB(ep.cfg.kernel_db)
    try:
        reused = _reuse(ep, db, ks, target, state)
        started = _starting_points(proposer, ks, state)
        label = f"start ({len(started)} kernel(s) at the proposer's starting point)" if started else "start"
        res = ep.judge(build_spec(problem, state, ep.method, workloads=workloads), label=label)
        if (reused or started) and not res.correct:  # decisions that no longer apply: from the reference
            ep.record(kind="start-dropped", why=verdict_text(res))
            state, reused = {}, set()
            res = ep.judge(build_spec(problem, state, ep.method), label="reference")
        t = _Tuning(ks, state, reused, workloads, score(res) or 0.0, profile_rows(res))
        whole = Whole()
        rejected: list = []  # graph changes dropped at the starting points (judged again once: _graph_retry)
        try:
            t.state, t.best, t.rows = _drop_slower_starts(
                ep, t.state, started, res, t.best, t.rows, t.workloads
            )
            if res.correct and hasattr(proposer, "graphs"):
                kept = _graph_layer(ep, db, proposer, target, t.best, t.rows, t.workloads, rejected)
                if kept is not None:
                    t.ks, t.state, t.reused, whole.passes, t.best, t.rows = kept
                    t.workloads = {k.name: k.workload for k in t.ks.values()}
            if res.correct and hasattr(proposer, "target_options"):
                t.best, t.rows = _target_layer(
                    ep, t.state, t.workloads, whole, t.best, t.rows, proposer.target_options(), t.targets
                )
            _search(ep, proposer, t, whole, rejected)
        except BudgetExhausted as e:
            ep.record(kind="stop", why=str(e))
        _remember(ep, db, t.state, t.reused, t.ks, target)
    finally:
        db.close()


@dataclass
class _Tuning:
    """The search's state between judgments: the current graph's kernels, their kept decisions, those
    reused from the kernel database, their workloads, the best speedup and its profile."""

    ks: dict[str, KernelInfo]
    state: KernelDecisions
    reused: set[str]
    workloads: dict[str, str]
    best: float
    rows: list[ProfileRow]
    targets: list[tuple[str, dict]] = field(default_factory=list)  # target decisions the target layer dropped


def _search(ep: Episode, proposer, t: _Tuning, whole: Whole, rejected: list) -> None:
    """The kernel passes (`_passes`). When the patience ends them before the graph changes the graph layer
    dropped were judged again, those are judged then (the patience's count reset for them, the evaluation
    budget as it is); one kept resumes the passes on the new graph's kernels (its first points are a start,
    not a search: conv2d_resnet8_32ch_s2's patience ended after 9 of its 32 evaluations, its channels-last
    graph unjudged on tuned kernels); else the search stops on the patience. A BudgetExhausted that ends it
    propagates (run_leka records why)."""
    while True:
        try:
            _passes(ep, proposer, t, whole, rejected)
            return
        except BudgetExhausted as e:
            if ep.usage.stopped != "patience" or not rejected:
                raise
            why = str(e)
        ep.usage.since_improved = 0
        passes = list(whole.passes)
        with contextlib.suppress(BudgetExhausted):  # the budget spent on them: the best stays
            _retry(ep, proposer, t, whole, rejected)
        if whole.passes == passes:
            ep.usage.stopped = "patience"
            raise BudgetExhausted(why)
        ep.usage.stopped = ""
        ep.record(kind="resume", why="a graph change judged again was kept: the search goes on")


def _passes(ep: Episode, proposer, t: _Tuning, whole: Whole, rejected: list) -> None:
    """Up to MAX_PASSES passes over the kernels that matter, layer by layer (`_layer`); after the first, the
    dropped graph changes judged again (`_retry`). Stops early when the proposer had nothing to offer."""
    tally = Progress()  # the keeps since the last progress (patience)
    for pass_ in range(MAX_PASSES):
        spent = (ep.usage.evals, ep.usage.calls)
        # one judgment per pass profiles every kernel of the candidate (their shares for the next pass;
        # tvm-default's are not needed after the start: seconds on an L3 model), the others only the kernel
        # they change
        profile = {"next": list(t.ks) if pass_ > 0 and len(t.ks) > 1 else None}
        for name in _kernels_that_matter(t.rows, t.ks, ep.cfg.peak):
            if pass_ == 0 and name in t.reused:
                continue
            for layer in SCHEDULE_LAYERS:
                t.best, t.rows = _layer(
                    ep,
                    proposer,
                    t.ks[name],
                    layer,
                    t.state,
                    t.best,
                    t.rows,
                    t.workloads,
                    whole,
                    profile,
                    tally,
                )
        if pass_ == 0 and rejected:
            _retry(ep, proposer, t, whole, rejected)
        if (ep.usage.evals, ep.usage.calls) == spent:  # the proposer had nothing left to offer
            ep.record(kind="stop", why=f"no proposal left after {pass_ + 1} pass(es)")
            return


def _retry(ep: Episode, proposer, t: _Tuning, whole: Whole, rejected: list) -> None:
    t.ks, t.state, t.reused, t.workloads, t.best, t.rows = _graph_retry(
        ep, proposer, t.ks, t.state, t.reused, t.workloads, whole, t.best, t.rows, rejected, t.targets
    )


def _reuse(
    ep: Episode, db: KernelDB, ks: dict[str, KernelInfo], target: str, state: KernelDecisions
) -> set[str]:
    """Kernels whose workload the kernel database holds for this target start from the stored decisions
    (into `state`); returns their names."""
    reused: set[str] = set()
    if not ep.cfg.reuse:
        return reused
    for k in ks.values():
        found = db.lookup(k.workload, target)
        if found:
            state[k.name] = dict(found[0].layers)
            reused.add(k.name)
    if reused:
        ep.record(kind="reuse", kernels=sorted(reused))
    return reused


def _graph_layer(
    ep: Episode,
    db: KernelDB,
    proposer,
    target: str,
    best: float,
    rows: list[ProfileRow] | None = None,
    base: dict[str, str] | None = None,
    rejected: list[tuple[str, list[dict]]] | None = None,
):
    """Judges each graph change the proposer offers, on top of those already kept, its kernels at their
    stored decisions or the proposer's starting point; a change is kept when the candidate is correct and
    faster than the best (`improves_whole`: by the whole model's time, or by the total in the judge's
    profile of the kernels it changed: those not in `base`, the kernel name -> workload of the graph the
    best was measured on). Returns (kernels, state, reused, passes, speedup, profile) of the last kept
    graph, or None (the proposer is left on the reference's graph); the correct changes it dropped,
    (label, passes), go into `rejected` (judged again on the tuned kernels: `_graph_retry`), and so do
    those that rewrote nothing: BlockTranspose has no transposes to rewrite in a graph whose channels last
    was dropped, and does once the retry keeps channels last."""
    kept, passes_kept, base = None, [], dict(base or {})
    for label, passes in proposer.graphs():
        trial = passes_kept + passes
        proposer.graph = graph_key(trial)
        try:
            ks = {k.name: k for k in kernels(ep.problem.id, proposer.graph)}
        except EKBError as e:  # the passes do not apply to this graph: not an alternative
            ep.record(kind="proposal", layer="graph", proposal=label, error=str(e))
            continue
        if same_graph(ep.problem.id, graph_key(passes_kept), proposer.graph):
            ep.record(kind="proposal", layer="graph", proposal=label, error="changes nothing in this graph")
            if rejected is not None:  # a change kept later may give it something to rewrite (_graph_retry)
                rejected.append((label, passes))
            continue
        state: KernelDecisions = {}
        reused = _reuse(ep, db, ks, target, state)
        _starting_points(proposer, ks, state)
        workloads = {k.name: k.workload for k in ks.values()}
        same = frozenset(n for n, w in workloads.items() if base.get(n) == w)  # kernels it left as they were
        spec = build_spec(ep.problem, state, ep.method, workloads=workloads, whole=Whole(trial))
        res = ep.judge(
            spec,
            layer="graph",
            label=label,
            profile=list(ks),
            accept=lambda r, best=best, rows=rows, same=same: improves_whole(r, best, rows, same),
        )
        if improves_whole(res, best, rows, same):
            s = max(score(res), best)  # never lowered by a keep (see _layer)
            ep.record(kind="accept", layer="graph", proposal=label, speedup=s)
            rows = profile_rows(res) or rows
            kept, passes_kept, best, base = (ks, state, reused, trial, s, rows), trial, s, workloads
        elif rejected is not None and res.correct:
            rejected.append((label, passes))
    proposer.graph = graph_key(passes_kept)
    return kept


def _graph_retry(
    ep: Episode,
    proposer,
    ks: dict[str, KernelInfo],
    state: KernelDecisions,
    reused: set[str],
    workloads: dict[str, str],
    whole: Whole,
    best: float,
    rows: list[ProfileRow],
    rejected: list[tuple[str, list[dict]]],
    targets: list[tuple[str, dict]] | None = None,
):
    """The graph changes the graph layer dropped, judged again after the first kernel pass, on the tuned
    kernels. The graph layer judges a change with every kernel at its starting point, where a change that
    rewrites epilogues weighs least: QuantizeRint made dscnn_kws_int8's kernels 2% faster at their starting
    points (0.981x, in the noise between two judgments: dropped) and 7% once tiled (0.931x). A change whose
    graph calls as many kernels, of the same operator classes, in the same order, takes the kept decisions
    along, kernel i of one graph to kernel i of the other (the renamed kernels of a rewritten epilogue; a
    decision that does not apply to its kernel fails in the judge, which drops the candidate); a change that
    calls other kernels starts them from the proposer's first points (`_first_points`); kept by
    `improves_whole` as in the graph layer. `targets`, the target decisions the target layer dropped: a
    change not kept alone is judged once more with them (kept together when that improves), and once a
    change is kept they are judged again on top of it (`_target_layer`); those kept leave `targets`. Each
    change leaves `rejected` once judged (or found not to fit): the patience may stop the search in the
    middle, and the rest are judged then (run_leka). Returns (kernels, state, reused, workloads, speedup,
    profile)."""
    targets = targets if targets is not None else []
    while rejected:
        label, passes = rejected[0]
        trial = list(whole.passes) + list(passes)
        # None when the change does not fit; a BudgetExhausted before its judgment leaves it in `rejected`
        out = _retry_one(ep, label, trial, ks, state, workloads, whole, best, rows, proposer, targets)
        rejected.pop(0)
        if out is None:
            continue
        names, ks2, state2, workloads2, res, attrs = out
        best = max(score(res), best)  # never lowered by a keep (see _layer)
        ep.record(kind="accept", layer="graph", proposal=label, speedup=best)
        carry = getattr(proposer, "carry", None)
        if carry is not None:  # what it tried on the kernels counts as tried on their counterparts
            carry(graph_key(whole.passes), graph_key(trial), names)
        proposer.graph = graph_key(trial)
        ks, state, workloads, whole.passes = ks2, state2, workloads2, trial
        reused, rows = {names[n] for n in reused if n in names}, profile_rows(res) or rows
        if attrs != whole.target_attrs:  # kept together with the dropped target decisions
            for t_label, _ in targets:
                ep.record(kind="accept", layer="target", proposal=t_label, speedup=best)
            whole.target_attrs = attrs
            targets.clear()
        elif targets:  # kept alone: the dropped target decisions judged again on top of it
            options, dropped = list(targets), []
            best, rows = _target_layer(ep, state, workloads, whole, best, rows, options, dropped)
            targets[:] = dropped
    return ks, state, reused, workloads, best, rows


def _retry_one(
    ep: Episode,
    label: str,
    trial: list[dict],
    ks: dict[str, KernelInfo],
    state: KernelDecisions,
    workloads: dict[str, str],
    whole: Whole,
    best: float,
    rows: list[ProfileRow],
    proposer=None,
    targets: Sequence[tuple[str, dict]] = (),
):
    """One dropped graph change (`trial`: the kept passes and it) judged again; (names, kernels, state,
    workloads, result, target attributes) when kept (names: each tuned kernel -> the kernel that took its
    decisions), None when it does not fit or is not kept. Not kept with the kept target attributes, it is
    judged once more with the dropped `targets` added too. Where the change calls as many kernels of the
    same operator classes in the same order, the decisions are carried by call order; a kernel whose
    decisions do not replay on its counterpart (the change rewrote its blocks: BiasInit's depthwise
    convolutions lose their add, and a trace inlining that add no longer applies) gets the same point of
    the schedule space recorded on the counterpart (`proposer.translate`), where the proposer has one; a
    change with a kernel that neither replays nor translates is not judged (None). Where it calls other
    kernels (channels last adds layout transposes), the kernels start from the proposer's first points
    instead (`_first_points`)."""
    try:
        new = list(kernels(ep.problem.id, graph_key(trial)))
    except EKBError as e:
        ep.record(kind="proposal", layer="graph", proposal=label, error=str(e))
        return None
    if same_graph(ep.problem.id, graph_key(whole.passes), graph_key(trial)):
        return None  # the change rewrites nothing in this graph (see _graph_layer)
    ks2 = {k.name: k for k in new}
    if [k.op_class for k in new] == [k.op_class for k in ks.values()]:
        names = dict(zip(ks, (k.name for k in new), strict=True))  # this graph's kernel -> the change's
        state2 = {names[n]: dict(layers) for n, layers in state.items() if n in names}
        translate = getattr(proposer, "translate", None)
        if translate is not None and not _translate_unfit(
            ep, translate, graph_key(whole.passes), graph_key(trial), names, state, state2
        ):
            return None  # a kernel's decisions neither replay there nor translate: the judge refuses them
        how = "again, on the tuned kernels"
    else:
        fresh = _first_points(proposer, graph_key(trial), new, ks, state)
        if fresh is None:
            return None  # another set of kernels and no points to start them from
        names, state2 = fresh
        how = "again, its kernels at the cost model's first points"
    workloads2 = {k.name: k.workload for k in new}
    same = frozenset(n for n, w in workloads2.items() if workloads.get(n) == w)
    tries = [(f"{label} ({how})", dict(whole.target_attrs))]
    if targets:
        both = {**whole.target_attrs, **{k: v for _, attrs in targets for k, v in attrs.items()}}
        tries.append((f"{label} ({how}), with {'; '.join(t for t, _ in targets)}", both))
    for text, attrs in tries:
        spec = build_spec(ep.problem, state2, ep.method, workloads=workloads2, whole=Whole(trial, attrs))
        alike = same if attrs == whole.target_attrs else frozenset()  # new target attributes: every kernel
        res = ep.judge(
            spec,
            layer="graph",
            label=text,
            profile=list(ks2),
            accept=lambda r, alike=alike: improves_whole(r, best, rows, alike),
        )
        if improves_whole(res, best, rows, alike):
            return names, ks2, state2, workloads2, res, attrs
        if not res.correct:
            return None  # wrong alone: not judged with more on top
    return None


def _first_points(
    proposer, graph: str, new: list[KernelInfo], ks: dict[str, KernelInfo], state: KernelDecisions
):
    """Decisions for the kernels of `graph` (`new`), which are not those of the tuned graph (`ks`, with
    their decisions in `state`): a kernel with a tuned kernel's workload takes its decisions (the same
    function); every other one the proposer's first point of its space there (`proposer.first_point`: the
    cost model's cheapest point that builds, or the rules' start for a kernel the model does not tile, such
    as a layout transpose). Judged at the graph layer with every kernel at the rules' start, channels last
    tied with conv2d_resnet8_32ch_s2's reference graph (30.38x vs 30.35x over tvm-default) and was dropped;
    its NCHW kernel, tuned, stayed at 0.45x of ONNX Runtime. (names: tuned kernel -> the kernel that took
    its decisions, state), or None when the proposer offers no first points."""
    first = getattr(proposer, "first_point", None)
    if first is None:
        return None
    by_workload = {k.workload: n for n, k in ks.items() if n in state}
    names, state2 = {}, {}
    old, proposer.graph = proposer.graph, graph
    try:
        for k in new:
            src = by_workload.get(k.workload)
            layers = dict(state[src]) if src is not None else first(k.name)
            if src is not None:
                names[src] = k.name
            if layers:
                state2[k.name] = layers
    finally:
        proposer.graph = old
    return names, state2


def _translate_unfit(
    ep: Episode,
    translate,
    old: str,
    new: str,
    names: dict[str, str],
    state: KernelDecisions,
    state2: KernelDecisions,
):
    """In `state2` (the decisions carried to graph `new` by call order), the kernels whose decisions do not
    replay on their counterpart get `translate`'s (the same point of the space). False when one cannot be
    translated (the change is then not judged: its candidate would not build)."""
    from ..search.variants import replays

    for n, layers in state.items():
        if n not in names or replays(ep.problem.id, new, names[n], layers):
            continue
        moved = translate(old, n, new, names[n], layers)
        ep.record(kind="translate", kernel=names[n], layer="graph", ok=moved is not None)
        if moved is None:
            return False
        state2[names[n]] = moved
    return True


def _target_layer(
    ep: Episode,
    state: KernelDecisions,
    workloads: dict[str, str],
    whole: Whole,
    best: float,
    rows: list[ProfileRow],
    options: list[tuple[str, dict]],
    dropped: list[tuple[str, dict]] | None = None,
):
    """Judges each whole-module target decision of `options` (the proposer's: LLVM's fast-math flags) on
    top of the kept graph and starting points; kept (into `whole`) when correct and faster
    (`improves_whole`: a module-wide decision judged once, like a graph change); the correct ones not kept
    go into `dropped` (judged again with the dropped graph changes: `_graph_retry`). Returns (best, profile
    rows)."""
    for label, attrs in options:
        trial = Whole(whole.passes, {**whole.target_attrs, **attrs})
        spec = build_spec(ep.problem, state, ep.method, workloads=workloads, whole=trial)
        res = ep.judge(
            spec,
            layer="target",
            label=label,
            profile=list(workloads) or True,  # the candidate's kernels
            accept=lambda r, best=best, rows=rows: improves_whole(r, best, rows),
        )
        if improves_whole(res, best, rows):
            best = max(score(res), best)  # never lowered by a keep (see _layer)
            ep.record(kind="accept", layer="target", proposal=label, speedup=best)
            whole.target_attrs, rows = trial.target_attrs, profile_rows(res) or rows
        elif dropped is not None and res.correct:
            dropped.append((label, attrs))
    return best, rows


def improves(res, best: float) -> bool:
    """LEKA's acceptance: correct, the speedup over tvm-default above the best's by MIN_GAIN, and the lower
    end of its paired confidence interval above the best (with a short protocol's few rounds, a point
    estimate 2% ahead is often one lucky round: a change measured at 80x in the search was 34.8x when
    judged afresh). A result without an interval (the rounds were not paired) is held to its estimate."""
    s = score(res)
    if s is None or s <= best * MIN_GAIN:
        return False
    ci = res.speedup_ci.get(OBJECTIVE) or [s, s]
    return ci[0] > best


def improves_whole(res, best: float, rows: list[ProfileRow] | None, same: frozenset = frozenset()) -> bool:
    """The acceptance of a whole-model decision (a graph change): `improves`, or, with a profile of every
    kernel in both, the kernels' total time per run below the best's by MIN_GAIN and the whole model's
    speedup within WHOLE_SLACK of the best's. A graph change is judged once, and the whole model's time
    moves 10-20% from one judge to the next: resnet8_ic's channels-last graph measured 66-67x over
    tvm-default in two runs and 55.7x in a third, against the start's 55.0x, and was dropped there (its
    NCHW convolutions then ran at 45-58% of the peak instead of 95%). The kernels named in `same` (the
    change left them as they were: the same code in both) are left out of both totals, where they only
    add noise: FastLog changes one of logmel_frontend_yamnet's four kernels, 28% faster, 2% of the model.
    A change that makes main call more kernels is held to `improves`: each call costs main time outside
    the kernels (the VM's call, the intermediate's allocation) that no kernel total holds (BlockTranspose
    split uint8_ds_block_s2_vww's dequantize and requantize from their transposes: 4 kernel calls -> 7,
    the kernels' total 4.5 -> 3.8 us, the block 27x -> 25x over tvm-default)."""
    if improves(res, best):
        return True
    s, new_rows = score(res), profile_rows(res)
    if sum(r.calls for r in new_rows) > sum(r.calls for r in rows or []):
        return False
    changed = [r for r in new_rows if r.kernel not in same]
    after, before = total_us(changed), total_us([r for r in rows or [] if r.kernel not in same])
    return s is not None and after > 0 and before > 0 and after * MIN_GAIN < before and s * WHOLE_SLACK > best


def guard_timing(cfg: TimingConfig) -> TimingConfig:
    """The protocol of a kernel decision's judgment: the search's, without its extra rounds. Those rounds
    narrow the whole model's confidence interval, which `improves` needs; a kernel decision is kept by its
    kernel's own time (`improves_kernel`), the whole model's speedup only a guard 15% wide."""
    return replace(cfg, max_rounds=0)


def kernel_us(rows: list[ProfileRow], kernel: str) -> float | None:
    """Microseconds per run of main spent in `kernel` (its calls summed) in profile rows; None when the
    profile did not time it."""
    us = [r.us for r in rows if r.kernel == kernel]
    return sum(us) if us else None


def total_us(rows: list[ProfileRow]) -> float:
    """Microseconds per run of main in all the kernels of profile rows."""
    return sum(r.us for r in rows)


def improves_kernel(res, best: float, before: float | None, kernel: str) -> bool:
    """LEKA's acceptance of one kernel's decision: correct, `kernel`'s own time in the judge's profile of the
    candidate below `before` (its time in the best so far) by KERNEL_GAIN, and the whole model's speedup not
    below the best's by more than WHOLE_SLACK. A kernel's time, each call timed in a loop, varies by about
    2% from one judge to the next; the whole model's by 10-20% (one ds_block_kws candidate: 18.97x and
    15.78x over tvm-default in two judges whose confidence intervals did not overlap), so a best measured in
    a lucky judge held off every later improvement of its kernels. Without a profile of the kernel (none
    before, or none now): `improves`."""
    after = kernel_us(profile_rows(res), kernel)
    if before is None or after is None:
        return improves(res, best)
    s = score(res)
    return s is not None and after * KERNEL_GAIN < before and s * WHOLE_SLACK > best


def model_gain(rows: list[ProfileRow], res, kernel: str, before: float | None) -> float | None:
    """The whole model's speedup that `kernel`'s new time in `res` gives, estimated from the profile: the
    kernels' total time in the best (`rows`) over that total with `kernel` at its new time; None without
    both times (the decision was then kept by the whole-model rule, which is progress)."""
    after = kernel_us(profile_rows(res), kernel)
    total = total_us(rows)
    if before is None or after is None or total <= 0 or total - before + after <= 0:
        return None
    return total / (total - before + after)


class Progress:
    """LEKA's patience counts a kept kernel decision as progress when the whole model has moved: the keep's
    `model_gain` is multiplied into those of the keeps since the last progress, and progress is when that
    product reaches MIN_GAIN (what the whole-model rule asks of one decision). A kernel 3% faster at a 5%
    share keeps its decision but does not alone extend the search by another `patience` judgments; on a
    model of many kernels, each a few percent of its time, several such keeps together do (counted one by
    one, none did: the patience stopped yamnet's search, 27 kernels, after 18 of its 32 evaluations). A
    decision kept by the whole-model rule (gain None) is progress."""

    def __init__(self):
        self.pending = 1.0

    def __call__(self, gain: float | None) -> bool:
        self.pending = 1.0 if gain is None else self.pending * gain
        if gain is None or self.pending >= MIN_GAIN:
            self.pending = 1.0
            return True
        return False


def with_kernel_times(rows: list[ProfileRow], res, kernel: str) -> list[ProfileRow]:
    """The profile rows after `res` was kept: its own when it profiled every kernel, else `rows` with
    `kernel`'s calls as `res` timed them (the shares recomputed)."""
    new = profile_rows(res)
    if not new or {r.kernel for r in new} != {kernel}:
        return new or rows
    out = [r for r in rows if r.kernel != kernel] + new
    total = total_us(out) or 1.0
    return sorted((r.with_share(total) for r in out), key=lambda r: -r.share)


SLOWER_BY = 1.1  # a starting point is dropped when its profile is this much slower than tvm-default's


def _drop_slower_starts(
    ep: Episode,
    state: KernelDecisions,
    started: list[str],
    res,
    best: float,
    rows: list[ProfileRow],
    workloads: dict[str, str],
):
    """The start without the kernels whose starting point the judge's profile found slower than
    tvm-default's version of them (`_slower_than_default`), judged and kept when it improves on the start.
    Returns (state, best, rows)."""
    slower = _slower_than_default(res, [k for k in started if k in state])
    if not slower or best <= 0:
        return state, best, rows
    trial = {k: v for k, v in state.items() if k not in slower}
    res2 = ep.judge(
        build_spec(ep.problem, trial, ep.method, workloads=workloads),
        label=f"start without {len(slower)} kernel schedule(s) slower than tvm-default's",
        accept=lambda r: improves(r, best),
    )
    if not improves(res2, best):
        return state, best, rows
    ep.record(kind="accept", layer="start", proposal=f"dropped {sorted(slower)}", speedup=score(res2))
    return trial, score(res2), profile_rows(res2) or rows


def _slower_than_default(res, started: list[str]) -> set[str]:
    """Kernels started at the proposer's starting point whose time per call, in the judge's profile, is
    SLOWER_BY above tvm-default's version of them (the rules' schedule is not always better)."""

    def per_kernel(rows) -> dict[str, float]:
        out: dict[str, float] = {}
        for r in rows:
            out[r.kernel] = out.get(r.kernel, 0.0) + r.per_run
        return out

    mine, default = per_kernel(res.kernels), per_kernel(res.baseline_kernels.get("tvm-default", []))
    return {k for k in started if k in mine and default.get(k, 0.0) > 0 and mine[k] > SLOWER_BY * default[k]}


def _starting_points(proposer, ks: dict[str, KernelInfo], state: KernelDecisions) -> list[str]:
    """Kernels without a stored decision start from the proposer's starting point, when it has one (the
    builtin proposer: the rule-based schedule; a model starts from the reference); returns their names."""
    start = getattr(proposer, "start", None)
    out = []
    for name in ks:
        if name in state or start is None:
            continue
        layers = start(name)
        if layers:
            state[name] = dict(layers)
            out.append(name)
    return out


def _kernels_that_matter(
    rows: list[ProfileRow], ks: dict[str, KernelInfo], peak: dict | None = None
) -> list[str]:
    """The kernels with at least MIN_SHARE of the time, the most time above the compute roof first: a
    kernel's time less what it would take at the peak FLOP/s of `peak` (the backend's peak record; a kernel
    without a FLOP count, or without a peak, keeps its whole time). A kernel already near the roof is tuned
    last: resnet8_ic_int8's two 3x3 convolutions at 100% of the peak (27% of the time) came first by share,
    their trials improved nothing and the patience ended the search before its 17% convolution at 39%,
    2.7x slower than its space's best point."""
    flops = float((peak or {}).get("flops") or 0.0)

    def above_roof(r: ProfileRow) -> float:
        g = r.gflops
        return r.us * (1.0 - min(1.0, g * 1e9 / flops)) if g and flops > 0 else r.us

    share: dict[str, float] = {}
    above: dict[str, float] = {}
    for r in rows:  # a kernel's calls summed (a profile of every call has one row per call)
        if r.kernel in ks:
            share[r.kernel] = share.get(r.kernel, 0.0) + r.share
            above[r.kernel] = above.get(r.kernel, 0.0) + above_roof(r)
    seen = sorted((k for k in share if share[k] >= MIN_SHARE), key=lambda k: -above[k])
    return seen or list(ks)  # no profile (nothing timed): every kernel, in call order


def _traced(res, kernel: str) -> bool:
    """Whether a candidate's schedule code made a decision in `kernel` (the judge returns the traces)."""
    return bool((res.extra.get("schedule_traces") or {}).get(kernel))


def _layer(
    ep: Episode,
    proposer,
    kernel,
    layer: str,
    state: KernelDecisions,
    best: float,
    rows: list[ProfileRow],
    workloads: dict[str, str],
    whole: Whole,
    profile: dict,
    tally: Progress | None = None,
):
    tally = tally or Progress()
    feedback: list[str] = []
    for _ in range(ATTEMPTS):
        accepted = dict(state.get(kernel.name, {}))
        prop: Proposal | None = proposer.propose(LayerRequest(kernel, layer, accepted, list(feedback), rows))
        if prop is None:
            return best, rows
        if prop.error:
            feedback.append(prop.error)
            ep.record(kind="proposal", kernel=kernel.name, layer=layer, proposal=prop.label, error=prop.error)
            continue
        trial = dict(state)
        if prop.layers is not None:
            trial[kernel.name] = prop.layers
        spec = build_spec(ep.problem, trial, ep.method, prop.code, workloads, whole)
        before = kernel_us(rows, kernel.name)
        res = ep.judge(
            spec,
            timing=guard_timing(ep.cfg.timing),
            progress=lambda r, before=before: tally(model_gain(rows, r, kernel.name, before)),
            kernel=kernel.name,
            layer=layer,
            label=prop.label,
            # every kernel of the candidate once per pass, for the next pass's order; else this kernel
            profile=profile.pop("next", None) or [kernel.name],
            accept=lambda r, code=prop.code, before=before: (
                improves_kernel(r, best, before, kernel.name) and (code is None or _traced(r, kernel.name))
            ),
        )
        s = score(res)
        if improves_kernel(res, best, before, kernel.name):
            if prop.code is not None:
                if not _traced(res, kernel.name):  # the code changed nothing in this kernel
                    feedback.append("correct, but your code made no schedule decision for this kernel")
                    continue
                trial[kernel.name] = with_code_trace(
                    accepted, layer, res.extra["schedule_traces"][kernel.name]
                )
            state.clear()
            state.update(trial)
            if prop.code is not None and ep.best is not None and ep.best[1] is res:
                # the kept layer as data: the trace that code made, replayed in place of the code
                kept = build_spec(ep.problem, state, ep.method, workloads=workloads, whole=whole)
                kept.notes = f"{prop.label}: the trace its schedule code made, as that kernel's {layer} layer"
                ep.best = (kept, res, s)
            ep.record(kind="accept", kernel=kernel.name, layer=layer, proposal=prop.label, speedup=s)
            # the whole model's reference for later guards: never lowered by a keep (a keep whose model
            # measured lower, within the slack, would otherwise let the next one sink another 15%)
            return max(s, best), with_kernel_times(rows, res, kernel.name)
        why = verdict_text(res)
        after = kernel_us(profile_rows(res), kernel.name)
        if s is not None and before is not None and after is not None:
            why += (
                f" -- {kernel.name} took {after:.2f} us per run against {before:.2f} us in the best so far"
                + ("" if after * KERNEL_GAIN < before else f" (not faster by {KERNEL_GAIN - 1:.0%})")
            )
            if s * WHOLE_SLACK <= best:
                why += f"; the whole model's speedup {s:.3f}x is below the best's {best:.3f}x"
        elif s is not None and s > best * MIN_GAIN:
            lo = (res.speedup_ci.get(OBJECTIVE) or [s])[0]
            why += (
                f" -- not surely faster than the best so far ({best:.3f}x over tvm-default): the lower end"
                f" of its confidence interval is {lo:.3f}x"
            )
        elif s is not None:
            why += f" -- not faster than the best so far ({best:.3f}x over tvm-default)"
        feedback.append(why)
    return best, rows


def _remember(
    ep: Episode,
    db: KernelDB,
    state: KernelDecisions,
    reused: set[str],
    ks: dict[str, KernelInfo],
    target: str,
) -> None:
    """Every kernel decision of the best candidate that LEKA found itself goes into the kernel database."""
    if ep.best is None or not state:
        return
    spec, res, s = ep.best
    if s <= 1.0:
        return
    for name, layers in state.items():
        if name in reused or not layers or name not in ks:
            continue
        if any(getattr(spec.decisions, layer).get(name) != t for layer, t in layers.items()):
            continue  # the best candidate holds other decisions for it
        db.put(
            Entry(
                workload=ks[name].workload,
                target=target,
                func=name,
                layers=layers,
                problem=ep.problem.id,
                method=ep.method,
                speedup=s,
                tvm_version=tvm_version(),
            )
        )
