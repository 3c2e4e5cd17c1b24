"""flat: one conversation that writes a whole candidate each turn and gets the judge's feedback (verdict,
what failed and where, speedups, time per kernel), for up to B turns. Offline: a hill climb over whole
candidates, one kernel's builtin variant changed per turn (largest time share first), kept when faster."""

from __future__ import annotations

from ..llm.prompts import build_prompt, render_prompt
from ..search.kernels import kernels
from ..search.variants import rule_variants
from .budget import BudgetExhausted
from .direct import model_spec, whole_variant
from .episode import Episode, profile_rows, score, verdict_text
from .leka import MIN_GAIN, build_spec
from .model import ModelClient, ModelError


def run_flat(ep: Episode, model: ModelClient | None) -> None:
    try:
        if model is None:
            _hill_climb(ep)
        else:
            _conversation(ep, model)
    except BudgetExhausted as e:
        ep.record(kind="stop", why=str(e))


def _conversation(ep: Episode, model: ModelClient) -> None:
    prompt = build_prompt(ep.problem, ep.cfg.backend, "schedule")
    system, user, history = prompt.system, prompt.user, []
    turns = ep.cfg.budget.evals
    for turn in range(turns):
        try:
            text = model.ask(system, user, history)
        except ModelError as e:
            text = None
            spec = model_spec(ep, None, f"the model call failed: {e}")
        else:
            spec = model_spec(ep, text)
        res = ep.judge(spec, label=f"turn {turn}")
        history += [{"role": "user", "content": user}, {"role": "assistant", "content": text or ""}]
        user = render_prompt(
            "flat_feedback",
            ep.problem,
            ep.cfg.backend,
            verdict=verdict_text(res),
            detail=(res.detail or "")[-1500:] if not res.correct else "",
            speedups=res.speedups,
            profile_rows=profile_rows(res),
            turns_left=turns - turn - 1,
        ).user


def _hill_climb(ep: Episode) -> None:
    lanes = int(getattr(ep.cfg.backend, "vector_lanes", 0) or 8)
    ks = kernels(ep.problem.id)
    workloads = {k.name: k.workload for k in ks}
    spec = whole_variant(ep, 0)
    state = {}
    for k in ks:
        vs = rule_variants(ep.problem.id, k.name, lanes, ep.cfg.threads)
        if vs:
            state[k.name] = dict(vs[0].layers)
    res = ep.judge(spec, label="rules")
    best = score(res) or 0.0
    rows = profile_rows(res)
    tried = {k.name: 1 for k in ks}  # next variant index per kernel
    order = [r.kernel for r in rows if r.kernel in tried] or [k.name for k in ks]
    while True:
        progressed = False
        for name in order:
            vs = rule_variants(ep.problem.id, name, lanes, ep.cfg.threads)
            if tried[name] >= len(vs):
                continue
            v = vs[tried[name]]
            tried[name] += 1
            progressed = True
            trial = {**state, name: dict(v.layers)}
            res = ep.judge(
                build_spec(ep.problem, trial, ep.method, workloads=workloads), kernel=name, label=v.label
            )
            s = score(res)
            if s is not None and s > best * MIN_GAIN:
                state, best = trial, s
        if not progressed:
            return
