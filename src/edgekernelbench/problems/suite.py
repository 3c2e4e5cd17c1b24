"""Where the suites register their problems: `register` (one problem) and `suite` (a suite module's
helper). The look-ups (`get_problem`, `select`) live in registry.py, which loads the built-in suites."""

from __future__ import annotations

from .base import Problem

_REGISTRY: dict[str, Problem] = {}


def register(problem: Problem) -> Problem:
    if problem.id in _REGISTRY:
        raise ValueError(f"problem {problem.id} registered twice")
    if not problem.id.startswith(f"L{problem.level}/"):
        raise ValueError(f"problem id {problem.id} must start with L{problem.level}/")
    _REGISTRY[problem.id] = problem
    return problem


def suite(level: int, problems: list[Problem]):
    """For a suite module: returns add(name, domain, category, source, graph, tags=(), **kw), which
    registers Problem "L<level>/<name>" and appends it to `problems` (the module's list, in order)."""

    def add(name, domain, category, source, graph, tags=(), **kw) -> Problem:
        problem = register(
            Problem(
                id=f"L{level}/{name}",
                level=level,
                domain=domain,
                category=category,
                source=source,
                graph=graph,
                tags=tuple(tags),
                **kw,
            )
        )
        problems.append(problem)
        return problem

    return add
