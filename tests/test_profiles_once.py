"""A command resolves each backend's profile once and passes the BackendProfile down: the parent of
`ekb eval` looks it up once, and its workers get it in their Job instead of looking it up again."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_cli import TINY, write_candidates
from test_harness import CORRECT

from edgekernelbench.errors import UnknownBackend


def test_ekb_eval_looks_each_backend_profile_up_once(tmp_path, monkeypatch):
    import edgekernelbench.backends.registry as registry
    import edgekernelbench.harness.isolation as isolation
    from edgekernelbench.cli import main
    from edgekernelbench.store import RunStore

    write_candidates(tmp_path, {0: CORRECT, 1: CORRECT})
    with RunStore(tmp_path) as store:  # the roofline's peaks, as if measured before: nothing to measure here
        store.set_meta("peak:host-cpu:1", {"flops": 1e11, "bandwidth": 1e10, "threads": 1, "source": "test"})
    lookups, jobs = [], []
    get_profile, start = registry.get_profile, isolation._start
    monkeypatch.setattr(
        registry, "get_profile", lambda name, *a, **k: lookups.append(name) or get_profile(name, *a, **k)
    )
    monkeypatch.setattr(isolation, "_start", lambda job, *a, **k: jobs.append(job) or start(job, *a, **k))
    assert main(["eval", str(tmp_path), "--quick", "--trials", "1"]) == 0
    assert lookups == ["host-cpu"]
    judges = [j for j in jobs if j.task == "evaluate"]
    assert len(judges) == 2
    assert all(j.backend_profile["name"] == "host-cpu" and j.backend_profile["threads"] == 1 for j in judges)
    assert {r.sample: (r.correct, r.timing_status) for r in RunStore(tmp_path).results()} == {
        0: (True, "measured"),
        1: (True, "measured"),
    }


def test_a_job_carries_the_parents_profile_to_the_worker():
    from edgekernelbench.backends.registry import get_profile
    from edgekernelbench.harness.job import Job

    prof = replace(get_profile("rpi4", 2), name="resolved-by-the-parent")  # no such profile file entry
    assert prof.emulator  # a tuple, a list in JSON
    job = Job(problem=TINY, sample=0, backend=prof.name, spec={}, threads=2, backend_profile=prof.to_dict())
    assert Job.from_json(job.to_json()).resolved_profile() == prof
    with pytest.raises(UnknownBackend):  # without it, the worker looks the name up
        replace(job, backend_profile=None).resolved_profile()
