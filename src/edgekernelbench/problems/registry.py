"""The problem registry: look-ups by id, filters by level/domain/tag; loads the built-in suites (which
register their problems in suite.py), the user suite and EKB_PROBLEM_MODULES."""

from __future__ import annotations

import difflib
import importlib
import logging
import os

from ..errors import UnknownProblem
from .base import Problem
from .suite import _REGISTRY

log = logging.getLogger(__name__)
_LOADED = False


def _load_builtin() -> None:
    global _LOADED
    if not _LOADED:
        _LOADED = True
        from . import level1, level2, level3, zoo  # noqa: F401  (register on import)
        from .user import load_user_problems

        for p in load_user_problems():
            if p.id in _REGISTRY:
                log.warning("user problem %s shadows a built-in problem; skipped", p.id)
            else:
                _REGISTRY[p.id] = p
        # extra suites, e.g. EKB_PROBLEM_MODULES=my_suite (modules that call register() on import)
        for name in filter(None, os.environ.get("EKB_PROBLEM_MODULES", "").split(",")):
            try:
                importlib.import_module(name.strip())
            except ImportError as e:
                raise UnknownProblem(
                    f"EKB_PROBLEM_MODULES names '{name}', which cannot be imported: {e}"
                ) from e


def all_problems() -> list[Problem]:
    _load_builtin()
    return sorted(_REGISTRY.values(), key=lambda p: (p.level, p.id))


def get_problem(problem_id: str) -> Problem:
    _load_builtin()
    if problem_id in _REGISTRY:
        return _REGISTRY[problem_id]
    # accept the bare name when it is unambiguous ("dwconv3x3_kws" for "L1/dwconv3x3_kws")
    matches = [p for p in _REGISTRY.values() if p.name == problem_id]
    if len(matches) == 1:
        return matches[0]
    close = difflib.get_close_matches(problem_id, list(_REGISTRY), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else " (see `ekb list`)"
    raise UnknownProblem(f"unknown problem '{problem_id}'{hint}")


def tags_of(p: Problem) -> tuple[str, ...]:
    """A problem's tags, with the names of the subsets it belongs to (problems/subsets.py: "agent")."""
    from .subsets import SUBSETS

    return (*p.tags, *(name for name, members in SUBSETS.items() if p.id in members and name not in p.tags))


SUITES = ("suite", "zoo", "user")


def select(
    level: int | None = None,
    domain: str | None = None,
    tag: str | None = None,
    category: str | None = None,
    ids: list[str] | None = None,
    subset: str | None = None,
    suite: str | None = None,
) -> list[Problem]:
    """Problems by id, or those matching every filter given; `subset` names a fixed list (problems/subsets.py:
    "agent"), in that list's order. `suite`: only that suite's problems (SUITES); None: every problem but the
    held-out zoo's (problems/zoo.py), which only `suite="zoo"` (or its ids) selects."""
    if suite is not None and suite not in SUITES:
        raise UnknownProblem(f"unknown suite '{suite}' (suites: {', '.join(SUITES)})")
    pool = [p for p in all_problems() if (p.suite == suite if suite else p.suite != "zoo")]
    if subset is not None:
        from .subsets import SUBSETS

        if subset not in SUBSETS:
            raise UnknownProblem(f"unknown subset '{subset}' (subsets: {', '.join(sorted(SUBSETS))})")
        pool = [get_problem(i) for i in SUBSETS[subset]]
        if ids:
            wanted = {get_problem(i).id for i in ids}
            pool = [p for p in pool if p.id in wanted]
    elif ids:
        return [get_problem(i) for i in ids]
    out = []
    for p in pool:
        if level is not None and p.level != level:
            continue
        if domain and p.domain != domain:
            continue
        if category and p.category != category:
            continue
        if tag and tag not in tags_of(p):
            continue
        out.append(p)
    return out
