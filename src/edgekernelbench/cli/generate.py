"""`ekb generate`: candidate files, built-in or from an LLM."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import EKBError
from .common import _llm_options, _profiles, _progress, console


# ------------------------------------------------------------------------------------------ generate
def _generate(model, run_dir, level, problems, backend, suite=None, **llm_opts):
    """Writes candidates: the built-in ones, or an LLM's (llm_opts: the _llm_options of the command).
    `backend`: a --backend value (one name), or the BackendProfile the command resolved already."""
    from ..backends.base import BackendProfile
    from ..problems import select

    profile = backend if isinstance(backend, BackendProfile) else None
    if backend and profile is None:
        profiles = _profiles(backend)
        if len(profiles) != 1:
            raise EKBError("--backend takes one backend for `ekb generate`")
        profile = profiles[0]
    probs = select(level=level, ids=list(problems) or None, suite=suite)
    if model != "builtin":
        return _generate_llm(model, run_dir, probs, profile, **llm_opts)
    from ..generators.reference_candidates import write_reference_candidates

    with _progress() as prog:
        task = prog.add_task("generating", total=len(probs), status="")
        paths = []
        for p in probs:
            prog.update(task, status=p.id)
            if profile is not None and profile.kind == "gpu":
                paths += _write_gpu_candidates(p, run_dir, profile)
            elif profile is not None:
                paths += write_reference_candidates(
                    [p], run_dir, vector_lanes=profile.vector_lanes, threads=profile.threads
                )
            else:
                paths += write_reference_candidates([p], run_dir)
            prog.advance(task)
    console.print(f"wrote {len(paths)} candidate files under {run_dir / 'candidates'}")


def _generate_llm(
    model,
    run_dir,
    probs,
    profile,
    track="direct",
    samples=1,
    temperature=0.2,
    max_tokens=8192,
    concurrency=4,
    no_cache=False,
    cache_path=None,
    request_timeout=120.0,
    retries=4,
):
    from ..llm.generate import GenConfig, generate_run
    from ..llm.providers import RetryPolicy, make_provider

    if profile is None:
        from ..backends.registry import get_profile

        profile = get_profile("host-cpu")
    cfg = GenConfig(
        model=model,
        samples=samples,
        track=track,
        temperature=temperature,
        max_tokens=max_tokens,
        concurrency=concurrency,
        use_cache=not no_cache,
        cache_path=cache_path,
        policy=RetryPolicy(retries=retries, timeout_s=request_timeout),
    )
    make_provider(model, cfg.policy)  # a bad model string or a missing key: one error line, up front
    with _progress() as prog:
        task = prog.add_task(f"generating ({model})", total=len(probs) * samples, status="")

        def on_result(rec):
            prog.update(task, advance=1, status=f"{rec['problem']}#{rec['sample']}: {rec['status']}")

        counts = generate_run(run_dir, probs, profile, cfg, on_result)
        prog.update(task, completed=len(probs) * samples)
    console.print(
        f"generated {counts['generated']} ({counts['cached']} from the cache, {counts['parse_errors']} "
        f"without usable code, {counts['failed']} failed calls), skipped {counts['skipped']} existing, "
        f"under {run_dir / 'candidates'}"
    )
    return counts


@click.command()
@click.option(
    "--model",
    default="builtin",
    show_default=True,
    help="builtin = the unscheduled reference (sample 0) and the rule-based schedule (sample 1); or an LLM: "
    "openai:MODEL, anthropic:MODEL, openai-compatible:http://HOST:PORT/v1:MODEL, replay:RESPONSES.jsonl.",
)
@click.option("--out", "run_dir", type=click.Path(path_type=Path), required=True, help="Run directory.")
@click.option("--level", type=int, help="Only this level [1, unless --suite or --problem].")
@click.option("--problem", "problems", multiple=True, help="Only these problems (repeatable).")
@click.option(
    "--suite",
    type=click.Choice(["suite", "zoo", "user"]),
    help="Only this suite's problems (zoo: the held-out models, problems/zoo.py).",
)
@click.option(
    "--backend",
    help="Generate for this backend: its vector width and thread count steer the rules; for a GPU "
    "backend sample 1 is the reference scheduled with dlight's GPU rules instead. LLM prompts describe it.",
)
@click.option(
    "--track",
    type=click.Choice(["direct", "schedule"]),
    default="direct",
    show_default=True,
    help="LLM output: a full TVMScript module (direct) or schedule(name, sch) code (schedule).",
)
@_llm_options
def generate(model, run_dir, level, problems, suite, backend, **opts):
    """Write candidate files into a run directory (LLM generation resumes: existing samples are skipped)."""
    if level is None and not suite and not problems:
        level = 1
    _generate(model, run_dir, level, problems, backend, suite=suite, **opts)


def _write_gpu_candidates(problem, run_dir: Path, profile) -> list[Path]:
    """sample0.py: the unscheduled reference (fails on a GPU: loops not bound to threads);
    sample1.json: the reference with dlight's default GPU schedule for the profile's target."""
    from ..generators.reference_candidates import gpu_default_spec, reference_spec
    from ..rundir import write_candidate

    return [
        write_candidate(run_dir, problem.id, 0, ".py", reference_spec(problem).module + "\n"),
        write_candidate(run_dir, problem.id, 1, ".json", gpu_default_spec(problem, profile).to_json() + "\n"),
    ]
