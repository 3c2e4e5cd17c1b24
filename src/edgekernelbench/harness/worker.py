"""Worker process entry point: `python -m edgekernelbench.harness.worker JOB.json OUT.json`.

Started by isolation.py inside its sandbox's namespaces, with a clean environment, resource limits and a
wall-clock timeout. Before it reads anything a candidate controls, the worker applies the job's Landlock
rules to itself (harness/sandbox.py): from then on its job directory is the only place it can write.

Tasks: "build" (the builder: harness/builder.py), "evaluate" (the judge: harness/evaluate.py; with
`handoff`, the candidate module arrives as IRModule JSON, named on stdin by the parent), "floors".
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
from pathlib import Path


def enter_sandbox(job, job_dir: Path) -> None:
    """Landlock as the job says (when it says), and temporary files in the job directory only."""
    os.environ["TMPDIR"] = str(job_dir)
    tempfile.tempdir = str(job_dir)  # tempfile caches its directory at first use (TVM's export uses it)
    if job.sandbox:
        from .sandbox import restrict_self

        restrict_self(job.sandbox["read"], job.sandbox["write"], job.sandbox.get("landlock_abi"))


def module_from_parent(job_dir: Path):
    """The judge's candidate: the IRModule JSON file the parent names on stdin (copied there from the
    builder's output), loaded as data -- no candidate text is parsed or run here."""

    def load():
        from ..errors import MalformedCandidate
        from ..tvm_env import load_json

        name = sys.stdin.readline().strip()
        path = (job_dir / name).resolve()
        if not name or path.parent != job_dir.resolve() or not path.is_file():
            raise MalformedCandidate("no candidate module was handed to the judge")
        try:
            return load_json(path.read_text())
        except Exception as e:
            raise MalformedCandidate(f"the builder's module does not load as IRModule JSON: {e}") from None

    return load


def main(argv: list[str]) -> int:
    job_path, out_path = argv[1], argv[2]
    from .job import Job

    with open(job_path) as f:
        job = Job.from_json(f.read())
    job_dir = Path(job_path).parent
    from ..tvm_env import set_threads

    set_threads(job.threads)  # before TVM starts its thread pool
    if job.task != "build":  # the judge: ONNX Runtime held to the profile's ISA, before it is loaded
        from ..baselines.ort_isa import apply_pin

        apply_pin(job.ort_isa, job.ort_isa_unavailable)
    enter_sandbox(job, job_dir)
    if job.task in ("build", "evaluate"):  # the problem's graph as the parent built it (isolation._start)
        from ..problems import get_problem

        get_problem(job.problem).adopt_graph(job_dir)
    if job.task == "build":  # writes its files into job_dir; it has no result to return
        from .builder import build_candidate

        build_candidate(job.problem, job.spec, job.candidate, job_dir)
        return 0
    from ..records import Result
    from .evaluate import run_job

    try:
        if job.task == "floors":  # the timers' own cost (harness/floors.py): no candidate
            from .floors import run_floors

            res = run_floors(job)
        else:
            res = run_job(job, module_from_parent(job_dir) if job.handoff else None)
    except MemoryError:
        res = Result(job.problem, job.sample, job.backend).failure("memory", "MemoryError in the worker")
    except Exception as e:  # the harness's own failure, not the candidate's
        res = Result(job.problem, job.sample, job.backend).failure(
            "infra", f"{type(e).__name__}: {e}\n{traceback.format_exc()[-2000:]}"
        )
    with open(out_path + ".tmp", "w") as f:
        json.dump(res.to_dict(), f)
    os.replace(out_path + ".tmp", out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
