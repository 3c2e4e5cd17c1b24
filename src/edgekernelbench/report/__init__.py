"""Reports of run directories: the summary tables (terminal, JSON, CSV), the agents' comparison and the HTML
page."""

from ..exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "summarize": ".summary",
        "per_problem_rows": ".summary",
        "summaries_by_method": ".summary",
    },
)
