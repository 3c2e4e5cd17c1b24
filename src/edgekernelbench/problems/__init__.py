"""Problems: the benchmark's workloads and the registry that holds them."""

from .base import Problem
from .graph import InputSpec
from .registry import all_problems, get_problem, select
from .suite import register

__all__ = ["InputSpec", "Problem", "all_problems", "get_problem", "register", "select"]
