"""Producers of candidates that need no model: the reference (unscheduled) and the rule-based schedules."""

from ..exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "reference_spec": ".reference_candidates",
        "write_reference_candidates": ".reference_candidates",
    },
)
