"""Worker process entry point: `python -m edgekernelbench.harness.worker JOB.json OUT.json`.

Started by isolation.py with a clean environment, resource limits and a wall-clock timeout.
"""

from __future__ import annotations

import json
import sys
import traceback


def main(argv: list[str]) -> int:
    job_path, out_path = argv[1], argv[2]
    from .job import Job

    with open(job_path) as f:
        job = Job.from_json(f.read())
    from ..tvm_env import set_threads

    set_threads(job.threads)  # before TVM starts its thread pool
    from .evaluate import run_job
    from .result import Result

    try:
        res = run_job(job)
    except MemoryError:
        res = Result(job.problem, job.sample, job.backend).failure("memory", "MemoryError in the worker")
    except Exception as e:  # the harness's own failure, not the candidate's
        res = Result(job.problem, job.sample, job.backend).failure(
            "infra", f"{type(e).__name__}: {e}\n{traceback.format_exc()[-2000:]}"
        )
    with open(out_path + ".tmp", "w") as f:
        json.dump(res.to_dict(), f)
    import os

    os.replace(out_path + ".tmp", out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
