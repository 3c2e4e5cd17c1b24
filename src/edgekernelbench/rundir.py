"""The run directory's layout, in one place: every producer of candidates (generators, the LLM generator,
the agents), the judge's driver (runs/), the report and `ekb deploy --from` use it.

    RUN_DIR/candidates/<problem id>/sample<k>.py     a TVMScript IRModule (one-shot output)
    RUN_DIR/candidates/<problem id>/sample<k>.json   a KernelSpec (decisions, optional module)
    RUN_DIR/results.db                               the run store (store.py; its rows authenticated)
    RUN_DIR/responses.jsonl                          an LLM's answers, for `--model replay:...`
    RUN_DIR/profiles.toml                            backend profiles this run adds (backends/profiles.py)

e.g. RUN_DIR/candidates/L1/dwconv3x3_kws/sample0.py. Everything in it may have been written by an agent:
a candidate file is read as untrusted (ir/spec.read_candidate), the store's rows are authenticated.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

CANDIDATES = "candidates"
DB_NAME = "results.db"
RESPONSES = "responses.jsonl"
PROFILES = "profiles.toml"
SUFFIXES = (".py", ".json", ".tvmscript")  # what a candidate file may be
SAMPLE_RE = re.compile(r"^sample(\d+)\.(py|json|tvmscript)$")


def candidates_dir(run_dir: Path | str) -> Path:
    return Path(run_dir) / CANDIDATES


def problem_dir(run_dir: Path | str, problem: str) -> Path:
    """Where the candidates of `problem` (an id such as "L1/dwconv3x3_kws") go."""
    return candidates_dir(run_dir) / problem


def candidate_path(run_dir: Path | str, problem: str, sample: int, suffix: str) -> Path:
    return problem_dir(run_dir, problem) / f"sample{int(sample)}{suffix}"


def existing_candidate(run_dir: Path | str, problem: str, sample: int, order=SUFFIXES) -> Path | None:
    """The file of sample `sample` of `problem`, whichever suffix it has (the first of `order` present)."""
    for suffix in order:
        p = candidate_path(run_dir, problem, sample, suffix)
        if p.is_file():
            return p
    return None


def write_candidate(run_dir: Path | str, problem: str, sample: int, suffix: str, text: str) -> Path:
    """Writes a candidate file whole or not at all (a temporary file, then a rename): a run killed mid-write
    leaves no half file for the judge."""
    path = candidate_path(run_dir, problem, sample, suffix)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path
