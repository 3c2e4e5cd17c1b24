"""direct: one-shot generation. With a model, B independent samples of the `schedule` track prompt (the
same prompt `ekb generate` sends), each judged; "direct" is the first sample, "direct@B" the best of B.
Offline, the samples are whole-problem schedules from the builtin proposer's variants (sample i takes
every kernel's i-th variant; sample 0 is the rule-based candidate)."""

from __future__ import annotations

from ..ir.spec import KernelSpec
from ..llm.prompts import build_prompt
from ..search.kernels import kernels
from ..search.variants import rule_variants
from .budget import BudgetExhausted
from .episode import Episode
from .leka import build_spec
from .model import ModelClient, ModelError, ParseError, schedule_code


def model_spec(ep: Episode, text: str | None, error: str = "") -> KernelSpec:
    """A candidate from a model's answer: its schedule code, or (no usable code) a spec that the judge
    records as the candidate's parse error."""
    spec = KernelSpec(problem=ep.problem.id, method=f"agent:{ep.method}")
    try:
        if text is None:
            raise ParseError(error)
        spec.schedule_code = schedule_code(text)
    except ParseError as e:
        spec.metadata = {"parse_error": str(e), "response": (text or "")[:4000]}
    return spec


def whole_variant(ep: Episode, i: int) -> KernelSpec:
    """Offline sample i: every kernel's i-th builtin variant (cyclically)."""
    lanes = int(getattr(ep.cfg.backend, "vector_lanes", 0) or 8)
    state = {}
    for k in kernels(ep.problem.id):
        vs = rule_variants(ep.problem.id, k.name, lanes, ep.cfg.threads)
        if vs:
            state[k.name] = dict(vs[i % len(vs)].layers)
    return build_spec(
        ep.problem, state, ep.method, workloads={k.name: k.workload for k in kernels(ep.problem.id)}
    )


def run_direct(ep: Episode, model: ModelClient | None) -> list:
    """Judges up to B one-shot samples; returns [(spec, result)] in sample order."""
    out = []
    try:
        for i in range(ep.cfg.budget.evals):
            if model is None:
                spec = whole_variant(ep, i)
            else:
                prompt = build_prompt(ep.problem, ep.cfg.backend, "schedule")
                try:
                    spec = model_spec(ep, model.ask(prompt.system, prompt.user))
                except ModelError as e:
                    spec = model_spec(ep, None, f"the model call failed: {e}")
            out.append((spec, ep.judge(spec, label=f"sample {i}")))
    except BudgetExhausted as e:
        ep.record(kind="stop", why=str(e))
    return out
