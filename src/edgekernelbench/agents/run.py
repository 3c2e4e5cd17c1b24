"""`ekb agent`: every method on every problem of a run, under one budget, resumable.

For each (problem, method) not done yet: an Episode (budget, trajectory), the method's loop, then its final
candidate written as RUN_DIR/candidates/<problem>/sample<k>.json (k fixed per method: METHOD_SAMPLES) and its
Result -- from the same judge as `ekb eval`, made during the run -- stored in results.db as that sample, with
the method's budget use in agent_runs. A (problem, method) interrupted midway starts over."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import metrics
from ..harness.api import node_here, warm_judge
from ..ir.spec import KernelSpec
from ..problems import get_problem
from ..records import Result
from ..rundir import write_candidate
from ..store import RunStore
from .budget import BudgetExhausted
from .cli_agent import run_cli
from .direct import run_direct
from .episode import AgentConfig, Episode, score
from .flat import run_flat
from .leka import run_leka
from .metaschedule import run_metaschedule
from .model import ModelClient
from .proposers import BuiltinProposer, LLMProposer

log = logging.getLogger(__name__)
METHODS = ("direct", "flat", "cli", "leka", "metaschedule")
# the sample number of each method's final candidate in the run directory
METHOD_SAMPLES = {"direct": 0, "direct@B": 1, "flat": 2, "cli": 3, "leka": 4, "metaschedule": 5}
NO_MODEL = {"metaschedule"}  # methods that never call a model


def _finals(ep: Episode, method: str, model: ModelClient | None) -> list[tuple[str, object, object]]:
    """Runs `method`; returns its final candidates [(label, spec, result)]."""
    if method == "direct":
        samples = run_direct(ep, model)
        if not samples:
            return []
        scored = [(score(r) or -1.0, i) for i, (_, r) in enumerate(samples)]
        best = samples[max(scored)[1]]
        return [("direct", *samples[0]), ("direct@B", *best)]
    if method == "flat":
        run_flat(ep, model)
    elif method == "leka":
        proposer = LLMProposer(ep, model) if model is not None else BuiltinProposer(ep)
        run_leka(ep, proposer)
    elif method == "metaschedule":
        run_metaschedule(ep)
    elif method == "cli":
        run_cli(ep)
        return [("cli", *ep.final)] if ep.final else []
    else:
        raise ValueError(f"unknown method {method!r}; methods: {', '.join(METHODS)}")
    if ep.best:
        return [(method, ep.best[0], ep.best[1])]
    return [(method, ep.last_spec, ep.last)] if ep.last is not None else []


def _proposer(method: str, cfg: AgentConfig) -> str:
    """Who proposed the method's candidates: TVM's tuner, the model, or the offline (builtin) proposer."""
    return "tvm-metaschedule" if method in NO_MODEL else cfg.model or "builtin"


@dataclass
class Final:
    """A method's final candidate and its fresh judgment."""

    label: str  # the method's name for it ("direct", "direct@B", "leka", ...): its sample (METHOD_SAMPLES)
    spec: KernelSpec
    result: Result


@dataclass
class EpisodeOutcome:
    """What one (problem, method) episode produced, before anything of it is stored: its run record, its
    final candidates, and the peaks its judgments used (for the roofline)."""

    problem: str
    method: str
    record: dict  # agent_runs' record
    finals: list[Final] = field(default_factory=list)
    peak: dict | None = None


def _store_final(store, run_dir: Path, outcome: EpisodeOutcome, final: Final, cfg: AgentConfig) -> None:
    k = METHOD_SAMPLES[final.label]
    spec = copy.deepcopy(final.spec)
    spec.method = f"agent:{final.label}"
    spec.metadata = {
        **(spec.metadata or {}),
        "agent": final.label,
        "proposer": _proposer(outcome.method, cfg),
        "budget": asdict(cfg.budget),
    }
    path = write_candidate(run_dir, outcome.problem, k, ".json", spec.to_json() + "\n")
    res = copy.deepcopy(final.result)
    res.sample, res.method, res.candidate, res.spec_hash = k, spec.method, str(path), spec.hash()
    if res.node is None and getattr(cfg.backend, "run", "local") == "local":  # judged on this machine
        res.node = node_here()
    problem = get_problem(res.problem)
    res.roofline = metrics.result_roofline(res, outcome.peak, problem.cost.bytes_written, problem.integer)
    store.put(res)


def record_outcome(store, run_dir: Path, outcome: EpisodeOutcome, cfg: AgentConfig) -> dict:
    """Stores an episode's outcome: its final candidates (files in the run directory, results in the store)
    and its run record (agent_runs), last: a (problem, method) counts as done once that is written."""
    for final in outcome.finals:
        _store_final(store, Path(run_dir), outcome, final, cfg)
    store.put_agent_run(outcome.problem, outcome.method, outcome.record)
    return outcome.record


def start_run(store, methods: list[str], cfg: AgentConfig) -> dict:
    """What every `ekb agent` records first (its configuration, the machine); returns the (problem,
    method) records already in the store."""
    store.set_meta(
        "agent_config",
        {
            "methods": list(methods),
            "model": cfg.model or "builtin",
            "budget": asdict(cfg.budget),
            "backend": getattr(cfg.backend, "name", str(cfg.backend)),
            "threads": cfg.threads,
            "trials": cfg.trials,
            "tune_trials": cfg.tune_trials,
            "timing": asdict(cfg.timing),
            "agent_cmd": cfg.agent_cmd,
            "reuse": cfg.reuse,
            "patience": cfg.patience,
        },
    )
    store.record_environment()  # the machine and software versions, for the report
    return store.agent_runs()


def finished(done: dict, problem: str, method: str) -> bool:
    return done.get((problem, method), {}).get("status") in ("done", "skipped")


def run_agents(
    run_dir: Path,
    problems: list,
    methods: list[str],
    cfg: AgentConfig,
    on_done: Callable[[str, str, dict], None] | None = None,
) -> dict[str, int]:
    """Runs the methods on the problems, one episode after the other; returns counts (done, skipped)."""
    run_dir = Path(run_dir)
    counts = {"done": 0, "skipped": 0}
    with RunStore(run_dir) as store:
        done = start_run(store, methods, cfg)
        for problem in problems:
            with warm_judge():  # one per problem: its methods' episodes are judged by children of one zygote
                for method in methods:
                    if finished(done, problem.id, method):
                        counts["skipped"] += 1
                        continue
                    if method == "cli" and not cfg.agent_cmd:
                        record = skip_cli(store, problem.id)
                    else:
                        outcome = run_episode(problem, method, cfg, store, run_dir)
                        record = record_outcome(store, run_dir, outcome, cfg)
                    counts["done"] += 1
                    if on_done:
                        on_done(problem.id, method, record)
    return counts


def skip_cli(store, problem: str) -> dict:
    record = {"status": "skipped", "why": "no --agent-cmd: the external agent's command line is not given"}
    store.put_agent_run(problem, "cli", record)
    return record


def run_episode(problem, method: str, cfg: AgentConfig, store, run_dir: Path, service=None) -> EpisodeOutcome:
    """One (problem, method) episode: the method's loop, then a fresh judgment of each final candidate.
    Its trajectory goes to `store` step by step (the RunStore, or a StepLog on a cluster's worker); nothing
    else is stored here (record_outcome). `service`: who makes its model calls (agents.model.ModelService;
    None: its own)."""
    ep = Episode(problem, method, cfg, store, run_dir)
    model = ModelClient(cfg.model, ep, service) if cfg.model and method not in NO_MODEL else None
    with warm_judge():  # the episode's judges are forked from one process (harness/zygote.py)
        try:
            finals = _finals(ep, method, model)
        except BudgetExhausted as e:  # a limit reached where the method did not catch it itself
            ep.record(kind="stop", why=str(e))
            finals = [(method, ep.best[0], ep.best[1])] if ep.best else []
        finally:
            if model is not None:
                model.close()
        usage = ep.usage.to_dict()  # what the method spent; the final judgments below are not charged
        samples, judged, out = {}, {}, []
        for label, spec, searched in finals:
            # a fresh judgment of each final candidate: the best of several noisy measurements is biased
            # upwards (the winner's curse), so the stored result is not the one the method selected on
            key = spec.hash()
            if key not in judged:
                judged[key] = ep.final_judgment(spec, label)
            res = judged[key]
            out.append(Final(label, spec, res))
            samples[label] = {
                "sample": METHOD_SAMPLES[label],
                "correct": res.correct,
                "speedup": score(res),
                "search_speedup": score(searched) if searched is not None else None,
            }
    record = {
        "status": "done",
        "proposer": _proposer(method, cfg),
        "usage": usage,
        "steps": ep.steps,
        "best_speedup": ep.best_speedup,  # as measured during the search
        "final_speedup": max((v["speedup"] or 0.0 for v in samples.values()), default=None) or None,
        "samples": samples,
        **ep.run_info,
    }
    if method == "cli":
        record["usage"]["calls"] = None  # made inside the external agent: not counted here
    return EpisodeOutcome(problem.id, method, record, out, cfg.peak)
