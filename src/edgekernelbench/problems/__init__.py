"""Problems: the benchmark's workloads and the registry that holds them."""

from .base import InputSpec, Problem
from .registry import all_problems, get_problem, register, select

__all__ = ["InputSpec", "Problem", "all_problems", "get_problem", "register", "select"]
