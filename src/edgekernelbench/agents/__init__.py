"""Agents: producers of candidates that see only the judge's public entry point.

An agent may import `edgekernelbench.harness.api` (evaluate, time_floors, TimingConfig, Limits), the
shared records (`records`, `errors`), the problems, `ir.spec` (KernelSpec, Decisions) and `llm`; an
import contract in pyproject.toml ([tool.importlinter]) holds it to that (docs/architecture.md).
"""

from ..exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "AgentConfig": ".episode",
        "Budget": ".budget",
        "BudgetExhausted": ".budget",
        "METHODS": ".run",
        "run_agents": ".run",
    },
)
