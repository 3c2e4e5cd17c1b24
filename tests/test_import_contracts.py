"""The import contracts of pyproject.toml ([tool.importlinter], docs/architecture.md): they hold on this
tree, each of them fails the run when an import breaks it (in a copy of the package), and every module
has its place in them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "edgekernelbench"
CONTRACTS = {
    c["id"]: c
    for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
}


def lint_imports(cwd: Path, src: Path, *args: str) -> subprocess.CompletedProcess:
    """`lint-imports` on the pyproject.toml in `cwd`, with `src` first on the path (the package it checks)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [
        sys.executable,
        "-c",
        "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())",
    ]
    return subprocess.run(
        [*cmd, "--no-cache", "--no-logo", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_contracts_hold_on_this_tree():
    p = lint_imports(ROOT, ROOT / "src")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 broken" in p.stdout and f"{len(CONTRACTS)} kept" in p.stdout, p.stdout


@pytest.fixture
def package_copy(tmp_path):
    """A copy of the package and of pyproject.toml: the contracts hold on it as on the tree."""
    shutil.copytree(
        PACKAGE, tmp_path / "src" / "edgekernelbench", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_copy_keeps_every_contract(package_copy):
    p = lint_imports(package_copy, package_copy / "src")
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.parametrize(
    ("contract", "module", "line"),
    [
        # the IR layer reaching up into the judge (reference.py used harness/executor.py's graph_steps)
        ("layers", "reference.py", "from .harness import evaluate"),
        # a backend reaching up into the baselines (backends/gpu.py used baselines/tvm_default.py)
        ("layers", "backends/gpu.py", "from ..baselines import tvm_default"),
        # the suite depending on what is built on it (problems/user.py used the oracle)
        ("layers", "problems/user.py", "from .. import oracle"),
        # an agent past the judge's public entry point
        ("agents", "agents/__init__.py", "from edgekernelbench.harness import evaluate"),
        ("agents", "agents/__init__.py", "from edgekernelbench import reference"),
        # the circle problems/base.py <-> problems/graph.py
        ("acyclic", "problems/graph.py", "from . import base"),
        # the board's single file importing the package
        ("farm-server-standalone", "backends/farm_server.py", "from edgekernelbench import errors"),
        ("no-tvm-below-the-reference", "problems/base.py", "import tvm"),
    ],
)
def test_an_import_that_breaks_a_contract_fails_the_run(package_copy, contract, module, line):
    path = package_copy / "src" / "edgekernelbench" / module
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")
    p = lint_imports(package_copy, package_copy / "src")
    assert p.returncode != 0, p.stdout + p.stderr
    alone = lint_imports(package_copy, package_copy / "src", "--contract", contract)
    assert alone.returncode != 0 and "0 kept, 1 broken" in alone.stdout, alone.stdout + alone.stderr


def _modules() -> list[str]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def _under(module: str, names) -> bool:
    return any(module == n or module.startswith(n + ".") for n in names)


def test_every_module_is_allowed_to_agents_or_forbidden():
    """A new module is forbidden to the agents unless it is named as part of the judge's public API."""
    allowed = [
        "edgekernelbench.agents",
        "edgekernelbench.harness.api",
        "edgekernelbench.records",
        "edgekernelbench.errors",
        "edgekernelbench.problems",
        "edgekernelbench.ir.spec",
        "edgekernelbench.llm",
        "edgekernelbench.search",
        "edgekernelbench.generators",
        "edgekernelbench.store",
        "edgekernelbench.kerneldb",
        "edgekernelbench.metrics",
        "edgekernelbench.rundir",
        "edgekernelbench.exports",
    ]
    forbidden = CONTRACTS["agents"]["forbidden_modules"]
    packages = {"edgekernelbench", "edgekernelbench.harness", "edgekernelbench.ir"}  # docstrings only
    unplaced = [
        m for m in _modules() if m not in packages and not _under(m, allowed) and not _under(m, forbidden)
    ]
    assert not unplaced, f"name these in the agents contract's forbidden_modules (or allow them): {unplaced}"
    assert not [m for m in forbidden if _under(m, allowed)]


def test_every_module_has_a_layer():
    layers = [t.strip() for layer in CONTRACTS["layers"]["layers"] for t in layer.split("|")]
    named = ["edgekernelbench." + t for t in layers]
    missing = [
        m for m in _modules() if m not in ("edgekernelbench", "edgekernelbench.ir") and not _under(m, named)
    ]
    assert not missing, f"place these in the layers contract: {missing}"
