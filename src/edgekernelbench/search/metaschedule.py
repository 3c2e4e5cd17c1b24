"""MetaSchedule (TVM's auto-tuner, tvm.s_tir.meta_schedule) on one problem's kernels, its result as data.

`tune_problem(problem_id, profile, trials, work_dir)`:

1. The kernels: every PrimFunc the reference's main calls (search.kernels); kernels with the same workload
   key (the same computation under two names) are tuned once. Each workload is tuned on the reference's
   PrimFunc as the judge schedules it (ir.replay: a copy as "main"), for the judge's target of the backend
   (backends.host.resolve_target: the profile's target, "mcpu": "native" resolved, "num-cores" = its
   threads), measured on this machine by MetaSchedule's LocalRunner whose worker runs with the profile's
   thread count (TVM_NUM_THREADS, as the judge's worker).
2. The trial budget: `trials` measured candidates for the whole problem (`split_trials`): each workload
   gets one trial (FLOP-heaviest first, while trials remain), the rest goes to the workloads in
   proportion to their FLOPs (largest remainders first). Each workload is one `ms.tune_tir` call with
   that many trials (at most 64 per MetaSchedule iteration). MetaSchedule may measure fewer than it was
   given when its search space has no unmeasured candidate left; the report counts what it measured.
3. One JSON database (MetaSchedule's own: database_workload.json, database_tuning_record.json, logs/)
   in `work_dir`, emptied first (a (problem, method) of `ekb agent` starts over).
4. The best record of each workload -> decisions: its trace with MetaSchedule's postprocessing (the
   instructions after EnterPostproc: the parallel / vectorize / unroll rewrites and the reduction's
   decomposition that the postprocessors made as schedule primitives), as JSON, split into the loop,
   memory and target layers (ir.replay.split_flat_trace: monotone phases; concatenated again they are
   the trace itself), keyed by the kernel's name, with its workload key. Each kernel's decisions are
   replayed on its reference PrimFunc (ir.replay.apply_trace) and built for the target before they
   are kept; a kernel whose trace does not replay or build keeps the reference, and the report says why.
   The replayed function is compared with MetaSchedule's own `query_schedule` of that record (what
   `ms.tir_integration.compile_tir` returns): `same_as_metaschedule` in the report.

Returns a KernelSpec (judged by the caller) and a report (per kernel: trials given and measured, the best
time MetaSchedule measured, tuning seconds, status; total wall time).

Fixed costs (2-core machine): MetaSchedule's TuneContext imports tvm.s_tir.tensor_intrin, whose package
registers the tensor intrinsics of every target by parsing them (CUDA's alone 20-60 s here, x86's 1 s);
`cpu_intrinsics_only` registers the CPU target's family only (what MetaSchedule's CPU rules can use), so
MetaSchedule's wall time is its search, not that import. Then about 10 s of evolutionary search per
workload before the first measurement. Builds skip the import too (`_build_candidate`)."""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import DecisionError, EKBError, last_line
from ..ir.spec import SCHEDULE_LAYERS, Decisions, KernelSpec
from ..tvm_env import build_tir
from ..tvm_env import compile as tvm_compile

log = logging.getLogger(__name__)
BUILDER_TIMEOUT_S = 300  # per batch of builds (MetaSchedule's default: 30 s)
RUNNER_TIMEOUT_S = 60
MAX_TRIALS_PER_ITER = 64  # MetaSchedule's default batch of measured candidates per search iteration
MS_LOGGER = "tvm.s_tir.meta_schedule"


class TuningUnavailable(EKBError):
    """MetaSchedule cannot run here: a package its cost model needs is missing, or the backend is not
    this machine's CPU (MetaSchedule measures every candidate locally)."""


@dataclass
class KernelTuning:
    kernel: str
    workload: str
    flops: float | None
    trials: int = 0  # trials given to its workload (0: shares a workload tuned under another name)
    measured: int = 0  # tuning records MetaSchedule committed for it (failed builds and runs included)
    best_us: float | None = None  # MetaSchedule's own measurement of its best candidate (mean, µs)
    seconds: float = 0.0  # tuning wall time
    status: str = "reference"  # "tuned" (decisions kept) | "reference"
    why: str = ""  # why it keeps the reference
    layers: list[str] = field(default_factory=list)  # the layers its decisions fill
    instructions: int = 0  # instructions of its trace
    same_as_metaschedule: bool | None = None  # replayed IR == MetaSchedule's query_schedule of the record
    tuned_as: str = ""  # the kernel whose workload tuning it shares, when not itself


def problem_dir(run_dir: Path, problem_id: str) -> Path:
    """Where a problem's MetaSchedule database lives in a run directory."""
    return Path(run_dir) / "agents" / "metaschedule" / problem_id.replace("/", "_")


def require_metaschedule() -> None:
    """Raises TuningUnavailable when MetaSchedule's default cost model (XGBoost) cannot be imported: it
    imports xgboost (and scipy) only at its first update, after the first batch is measured."""
    missing = []
    for mod in ("xgboost", "scipy"):
        try:
            __import__(mod)
        except ImportError as e:
            missing.append(f"{mod} ({last_line(e, 200)})")
    if missing:
        raise TuningUnavailable(
            "MetaSchedule's cost model needs xgboost and scipy; missing "
            + ", ".join(missing)
            + ": pip install 'edgekernelbench[tune]' (or xgboost-cpu scipy)"
        )


def split_trials(total: int, weights: list[float]) -> list[int]:
    """`total` trials over items with `weights` (FLOPs; None/0 count as 0): one each, heaviest first,
    while trials remain; the rest in proportion to the weights, largest remainders first (evenly when
    every weight is 0). Sums to `total` (or to 0 with no items)."""
    n = len(weights)
    if n == 0 or total <= 0:
        return [0] * n
    w = [max(float(x or 0.0), 0.0) for x in weights]
    order = sorted(range(n), key=lambda i: (-w[i], i))
    out = [0] * n
    for i in order[:total]:
        out[i] = 1
    rest = total - sum(out)
    if rest <= 0:
        return out
    if sum(w) == 0:
        w = [1.0] * n
    shares = [rest * x / sum(w) for x in w]
    base = [int(s) for s in shares]
    left = rest - sum(base)
    by_remainder = sorted(range(n), key=lambda i: (-(shares[i] - base[i]), -w[i], i))
    for i in by_remainder[:left]:
        base[i] += 1
    return [a + b for a, b in zip(out, base, strict=True)]


def _runner_threads(n: int) -> None:
    """MetaSchedule's runner worker: a thread pool of `n` threads, as the judge's worker has. TVM sizes
    its pool from TVM_NUM_THREADS at first use; num_threads() makes that first use now."""
    for var in ("TVM_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ[var] = str(n)
    import tvm

    tvm.runtime.num_threads()


def _build_candidate(mod, target, _params):
    """MetaSchedule's default build (builder.local_builder.default_build) without its `import
    tvm.s_tir.tensor_intrin`: that import registers every tensor intrinsic of every target by parsing
    TVMScript, 30-50 s on a 2-core machine, in each fresh builder worker (LocalBuilder starts new workers
    for every batch), which is what hit the default 30 s build timeout. A candidate needs no registry to
    build: its tensorized blocks already hold the intrinsic's implementation."""
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    # lowered as every other build of this project (tvm_env.compile), so that what MetaSchedule measures
    # while it tunes is the code the judge later times
    return build_tir(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target)


def _trace_json(trace) -> list:
    from ..ir.replay import _json_default

    return json.loads(json.dumps(trace.as_json(remove_postproc=False), default=_json_default))


def _same_trace(a: list, b: list) -> bool:
    """Same instructions, same decisions (in any order)."""
    key = functools.partial(json.dumps, sort_keys=True)
    return a[0] == b[0] and sorted(map(key, a[1])) == sorted(map(key, b[1]))


INTRINSIC_FAMILIES = {
    "x86": "x86",
    "i386": "x86",
    "aarch64": "arm_cpu",
    "arm": "arm_cpu",
    "riscv": "riscv_cpu",
}


def cpu_intrinsics_only(target: dict) -> str | None:
    """Registers the tensor intrinsics of the CPU target's family only (x86, arm_cpu or riscv_cpu), and
    makes `import tvm.s_tir.tensor_intrin` (MetaSchedule's TuneContext runs it) a no-op that does not
    parse every other target's intrinsics. Returns the family, or None when the package was left to import
    as it is (already imported, or a target outside these families)."""
    import importlib
    import platform
    import sys
    import types
    from pathlib import Path

    import tvm.s_tir

    name = "tvm.s_tir.tensor_intrin"
    if name in sys.modules:
        return None
    triple = str(target.get("mtriple") or platform.machine())
    family = next((f for arch, f in INTRINSIC_FAMILIES.items() if triple.startswith(arch)), None)
    if target.get("kind") != "llvm" or family is None:
        return None
    pkg = types.ModuleType(name, "tvm.s_tir.tensor_intrin, with only the CPU target's intrinsics registered")
    pkg.__path__ = [str(Path(tvm.s_tir.__file__).parent / "tensor_intrin")]
    sys.modules[name] = pkg
    tvm.s_tir.tensor_intrin = pkg
    try:
        importlib.import_module(f"{name}.{family}")
    except Exception:  # the family's module failed: let the package import everything, as TVM does
        del sys.modules[name]
        raise
    log.info("MetaSchedule: registered the %s tensor intrinsics only", family)
    return family


def tune_problem(
    problem_id: str,
    profile,
    trials: int,
    work_dir: Path,
    *,
    seed: int = 0,
    should_stop: Callable[[], bool] | None = None,
) -> tuple[KernelSpec, dict]:
    """Tunes the problem's kernels with `trials` measured trials in all (see the module docstring);
    returns the candidate and the report. `should_stop()`: checked before each workload; true leaves the
    remaining ones as the reference (e.g. the wall-clock cap is reached)."""
    require_metaschedule()
    if profile.kind != "host" or profile.run != "local":
        raise TuningUnavailable(
            f"MetaSchedule measures on this machine's CPU; backend {profile.name} is {profile.kind} "
            f"({profile.run})"
        )
    if trials < 1:
        raise ValueError("MetaSchedule needs at least one trial")
    import tvm
    import tvm_ffi
    from tvm.s_tir import meta_schedule as ms

    from ..backends.host import resolve_target
    from ..ir.replay import _as_main, apply_trace, combine_layers, split_flat_trace
    from ..problems import get_problem
    from ..reference import build_reference
    from .kernels import kernels

    t_start = time.perf_counter()
    problem = get_problem(problem_id)
    target_dict = resolve_target(profile)
    cpu_intrinsics_only(target_dict)
    target = (
        tvm.target.Target(target_dict, host=profile.host) if profile.host else tvm.target.Target(target_dict)
    )
    ref = build_reference(problem)
    funcs = ref.primfuncs()
    ks = kernels(problem_id)
    report_of = {k.name: KernelTuning(k.name, k.workload, k.flops) for k in ks}
    groups: dict[str, list] = {}  # workload key -> kernels with it, in call order
    for k in ks:
        groups.setdefault(k.workload, []).append(k)
    order = sorted(groups, key=lambda w: -(groups[w][0].flops or 0.0))  # FLOP-heaviest first (stable)
    given = dict(zip(order, split_trials(trials, [groups[w][0].flops for w in order]), strict=True))

    work_dir = Path(work_dir)
    if work_dir.exists():
        shutil.rmtree(work_dir)
    work_dir.mkdir(parents=True)
    db = ms.database.JSONDatabase(work_dir=str(work_dir))
    dec = Decisions()
    for wl in order:
        first = groups[wl][0]
        rep = report_of[first.name]
        rep.trials = given[wl]
        for other in groups[wl][1:]:
            report_of[other.name].tuned_as = first.name
        if rep.trials == 0:
            rep.why = "no trial left for it"
            continue
        if should_stop is not None and should_stop():
            rep.why = "not tuned: the method's wall-clock cap was reached"
            continue
        main = _as_main(funcs[first.name])["main"].with_attr("tirx.noalias", True)
        ms_mod = tvm.IRModule({"main": main})
        before = len(db)
        t0 = time.perf_counter()
        try:
            _tune_one(ms, first.name, main, target, work_dir, db, rep.trials, seed, profile.threads)
        except Exception as e:  # noqa: BLE001 -- one kernel MetaSchedule cannot tune keeps the reference
            rep.why = f"MetaSchedule failed: {last_line(e, 300)}"
            log.warning("%s %s: %s", problem_id, first.name, rep.why)
            continue
        finally:
            rep.seconds = round(time.perf_counter() - t0, 3)
            rep.measured = len(db) - before
        rec = db.query_tuning_record(ms_mod, target, workload_name="main")
        if rec is None:
            rep.why = f"no valid measurement among {rep.measured} trial(s)"
            continue
        secs = [float(getattr(s, "value", s)) for s in rec.run_secs]
        rep.best_us = round(sum(secs) / len(secs) * 1e6, 3)
        trace = _trace_json(rec.trace)
        layers = split_flat_trace(trace)
        combined, where = combine_layers([(n, layers[n]) for n in SCHEDULE_LAYERS if n in layers])
        if not _same_trace(combined, trace):  # split_flat_trace cuts consecutive phases: never happens
            rep.why = "the trace does not split into layers that concatenate back to it"
            continue
        ms_sch = db.query_schedule(ms_mod, target, workload_name="main")
        for k in groups[wl]:
            r = report_of[k.name]
            r.best_us, r.instructions = rep.best_us, len(trace[0])
            try:
                sch = apply_trace(funcs[k.name], combined, k.name, where)
            except DecisionError as e:
                r.why = f"MetaSchedule's best trace does not replay: {e}"
                log.warning("%s %s: %s", problem_id, k.name, r.why)
                continue
            try:
                tvm_compile(sch.mod, target=target)
            except Exception as e:  # noqa: BLE001 -- a schedule that does not build: the reference
                r.why = f"MetaSchedule's best schedule does not build: {last_line(e, 300)}"
                log.warning("%s %s: %s", problem_id, k.name, r.why)
                continue
            if ms_sch is not None:
                ours = sch.mod["main"].with_attr("tirx.noalias", True)
                r.same_as_metaschedule = bool(tvm_ffi.structural_equal(ours, ms_sch.mod["main"]))
            for layer, t in layers.items():
                getattr(dec, layer)[k.name] = t
            dec.workloads[k.name] = k.workload
            r.status, r.layers = "tuned", list(layers)
    for r in report_of.values():
        if r.tuned_as and r.status != "tuned" and not r.why:
            r.why = f"its workload, tuned as {r.tuned_as}: {report_of[r.tuned_as].why or 'not tuned'}"
    rows = [asdict(report_of[k.name]) for k in ks]
    report = {
        "trials": trials,
        "measured": sum(r["measured"] for r in rows),
        "wall_s": round(time.perf_counter() - t_start, 3),
        "target": target_dict,
        "database": str(work_dir),
        "kernels": rows,
    }
    tuned = [r["kernel"] for r in rows if r["status"] == "tuned"]
    spec = KernelSpec(
        problem=problem_id,
        decisions=dec,
        method="metaschedule",
        notes=f"MetaSchedule, {trials} trial(s): best records of {', '.join(tuned) or 'no kernel'}",
        metadata={
            "metaschedule": {
                "trials": trials,
                "kernels": {
                    r["kernel"]: {k: r[k] for k in ("trials", "measured", "best_us", "status")} for r in rows
                },
            }
        },
    )
    if dec.is_empty():
        spec.module = ref.script()  # nothing tuned: the candidate is the reference itself
    return spec, report


def _tune_one(ms, name: str, main, target, work_dir: Path, db, trials: int, seed: int, threads: int) -> None:
    """One ms.tune_tir call: `trials` measured candidates of one workload into `db`."""
    ms_log = logging.getLogger(MS_LOGGER)
    # tune_tir configures this logger with a stdout handler at the logger's level (DEBUG when unset);
    # its own log files under work_dir/logs keep everything
    ms_log.setLevel(logging.WARNING)
    import tvm

    ms.tune_tir(
        tvm.IRModule({name: main}),
        target,
        work_dir=str(work_dir),
        max_trials_global=trials,
        num_trials_per_iter=min(trials, MAX_TRIALS_PER_ITER),
        builder=ms.builder.LocalBuilder(timeout_sec=BUILDER_TIMEOUT_S, f_build=_build_candidate),
        runner=ms.runner.LocalRunner(
            timeout_sec=RUNNER_TIMEOUT_S, initializer=functools.partial(_runner_threads, threads)
        ),
        database=db,
        seed=seed,
    )
