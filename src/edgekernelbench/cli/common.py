"""Shared by the commands: the consoles, the progress bar, backend and timing arguments, option decorators."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:
    from ..backends.base import BackendProfile

# piped output (CI logs, files) gets a wide fixed width instead of 80 columns
console = Console() if sys.stdout.isatty() else Console(width=160)
err_console = Console(stderr=True)


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=err_console,
        transient=False,
    )


def _profiles(
    value: str, threads: int | None = None, run_dir: Path | None = None, run_dir_override: bool = False
) -> list[BackendProfile]:
    """Comma-separated backend names -> their BackendProfiles (with `threads`; UnknownBackend for a name
    that has none): each command resolves its backends here, once, and passes the profiles down. With
    `run_dir`, RUN_DIR/profiles.toml's profiles too (backends/profiles.py: it may add profiles, and
    replaces one only with `run_dir_override`)."""
    from ..backends.registry import get_profile

    return [
        get_profile(b.strip(), threads, run_dir, run_dir_override=run_dir_override)
        for b in value.split(",")
        if b.strip()
    ]


def _timing(quick: bool):
    from ..harness.timing import TimingConfig

    return TimingConfig.quick() if quick else TimingConfig()


def _llm_options(f):
    f = click.option(
        "--samples",
        type=click.IntRange(1),
        default=1,
        show_default=True,
        help="LLM models: samples per problem.",
    )(f)
    f = click.option("--temperature", type=float, default=0.2, show_default=True, help="LLM sampling.")(f)
    f = click.option("--max-tokens", type=click.IntRange(1), default=8192, show_default=True)(f)
    f = click.option(
        "--concurrency", type=click.IntRange(1), default=4, show_default=True, help="LLM calls at once."
    )(f)
    f = click.option("--no-cache", is_flag=True, help="Call the model again even for cached answers.")(f)
    f = click.option(
        "--cache",
        "cache_path",
        type=click.Path(path_type=Path),
        help="Response cache (SQLite; default $EKB_LLM_CACHE or ~/.cache/edgekernelbench/).",
    )(f)
    f = click.option(
        "--request-timeout", type=float, default=120.0, show_default=True, help="Seconds per LLM request."
    )(f)
    f = click.option(
        "--retries",
        type=click.IntRange(0),
        default=4,
        show_default=True,
        help="Retries (exponential backoff) on 429, 5xx, timeouts.",
    )(f)
    return f


def _eval_options(f):
    f = click.option(
        "--backend", "backend", default="host-cpu", show_default=True, help="Backend(s), comma-separated."
    )(f)
    f = click.option("--threads", type=int, default=1, show_default=True, help="Threads for TVM and ORT.")(f)
    f = click.option("--trials", type=int, default=5, show_default=True, help="Correctness trials.")(f)
    f = click.option("--quick", is_flag=True, help="Short timing protocol (3 rounds of >= 10 ms).")(f)
    f = click.option("--no-measure", is_flag=True, help="Check correctness only; no timing.")(f)
    f = click.option(
        "--timeout", type=float, default=300.0, show_default=True, help="Wall-clock limit per candidate (s)."
    )(f)
    f = click.option(
        "--memory-mb",
        type=int,
        default=6144,
        show_default=True,
        help="Memory limit per worker (MiB): address space; resident memory on a local GPU.",
    )(f)
    f = click.option(
        "--jobs",
        type=int,
        help="N > 1: judge on a local Ray instance of N workers (pip install 'edgekernelbench[cluster]'; "
        "a timed judgment holds a physical core of its own: docs/cluster.md); 1: one at a time, no Ray. "
        "Default: one at a time where this machine times, else as many as the cores allow at --threads "
        "each (at most 4); remote devices: one per device.",
    )(f)
    f = click.option(
        "--baselines",
        help="Baselines timed against each candidate, comma-separated: tvm-default (tvm.compile as TVM "
        "gives it), onnxruntime, tvm-dlight (dlight's default schedules).  "
        "[default: tvm-default,onnxruntime]",
    )(f)
    f = click.option(
        "--seed",
        type=click.IntRange(0, 2**63 - 1),
        help="Replay judgments with this input seed (a result's `seed`); default: a fresh seed from the OS "
        "for every judgment, drawn by the judge after the candidate's processes started.",
    )(f)
    f = _tracker_option(f)
    return f


def _ray_option(f):
    return click.option(
        "--ray",
        "ray",
        metavar="ADDRESS",
        help="Judge on the Ray cluster at ADDRESS (its head's HOST:PORT, or auto; docs/cluster.md): one "
        "judgment per task (ekb agent: one problem and method's episode per task), timed ones on cores "
        "reserved for timing; the run store stays here.",
    )(f)


def _cluster(address: str | None, jobs: int | None):
    """The ClusterConfig of --ray / --jobs (None: no Ray); Ray missing is one clear error, before anything
    runs."""
    if not address and not (jobs and jobs > 1):
        return None
    from ..cluster.session import ClusterConfig, check_address, require_ray

    require_ray()
    if address:
        check_address(address)  # nobody there: one line now, not after the run has started
    return ClusterConfig(address=address or None, jobs=jobs or 1)


def _run_dir_profiles_option(f):
    from ..backends.profiles import OVERRIDE_FLAG

    return click.option(
        OVERRIDE_FLAG,
        "run_dir_override",
        is_flag=True,
        help="Let RUN_DIR/profiles.toml replace a profile that exists already (built-in or yours); without "
        "it, a run directory's profiles may only add new names.",
    )(f)


def _tracker_option(f):
    return click.option(
        "--tracker",
        envvar="EKB_TRACKER",
        help="TVM RPC tracker HOST:PORT ($EKB_TRACKER): backends with an rpc_key run on its devices.",
    )(f)
