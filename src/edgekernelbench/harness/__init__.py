"""The judge: a candidate compiled, checked against an independent oracle and timed against the baselines,
in sandboxed processes. Producers of candidates (agents, generators) use only `harness.api`; the names below
are that public API (`evaluate` itself: `edgekernelbench.harness.api.evaluate`, as `harness.evaluate` is the
judge's own module)."""

from ..exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "JudgeConfig": ".api",
        "Limits": ".api",
        "TimingConfig": ".api",
        "time_floors": ".api",
        "DEFAULT_BASELINES": ".api",
    },
)
