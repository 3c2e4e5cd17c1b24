"""`ekb baseline`: measure tvm-default, onnxruntime and the unscheduled reference for a set of problems,
with the harness's protocol (in a worker, interleaved), and keep them in a run store."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..generators.reference_candidates import reference_spec
from ..harness.api import evaluate
from ..harness.timing import TimingConfig
from ..store import RunStore


def measure_baselines(
    problems,
    backend: str,
    run_dir: Path,
    threads: int = 1,
    timing: TimingConfig | None = None,
    force: bool = False,
    on_result: Callable[[str, bool], None] | None = None,
    tracker: str | None = None,
) -> dict:
    """Returns {problem id: {"reference": s, "tvm-default": s, "onnxruntime": s}} (median seconds/call)."""
    out: dict[str, dict[str, float]] = {}
    from ..backends.registry import get_profile

    prof = get_profile(backend, threads)
    remote = bool(prof.rpc_key) and (bool(tracker) or prof.run == "remote")  # no onnxruntime there
    with RunStore(run_dir) as store:
        have = store.baselines(backend)
        for p in problems:
            names = ("reference", "tvm-default") if remote else ("reference", "tvm-default", "onnxruntime")
            if not force and all((p.id, backend, n) in have for n in names):
                out[p.id] = {n: have[(p.id, backend, n)]["timing"]["median"] for n in names}
                if on_result:
                    on_result(p.id, True)
                continue
            spec = reference_spec(p)
            res = evaluate(
                p, spec, backend, threads=threads, trials=1, timing=timing, profile=True, tracker=tracker
            )
            times = {}
            if res.correct and res.runtime:
                extra = {"threads": threads, "flops": res.flops, "bytes": res.bytes}
                store.put_baseline(
                    p.id, backend, "reference", res.runtime, {**extra, "kernels": res.extra.get("kernels")}
                )
                times["reference"] = res.runtime.median
                for name, t in res.baselines.items():
                    store.put_baseline(
                        p.id, backend, name, t, {**extra, "kernels": res.extra.get(f"kernels:{name}")}
                    )
                    times[name] = t.median
            out[p.id] = times
            if on_result:
                on_result(p.id, res.correct)
    return out
