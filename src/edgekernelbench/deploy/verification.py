"""`ekb deploy --verify DIR` (also the last step of `ekb deploy`): the artifact, loaded afresh, against ONNX
Runtime on random inputs; on the host also its latency, its peak memory, its speed against tvm-default and
ONNX Runtime, and the per-kernel profile.

- host profile: the artifact's run.py in a fresh process that cannot use TVM's compiler
  (data/no_compiler/sitecustomize.py: `import tvm` fails, libtvm_compiler may not be loaded, and the process
  checks its memory map at exit), and the C program (c/model, the form a board gets) natively; the outputs
  of both are compared here with the oracle's, and both report their load time, first run, the percentiles
  of N single runs and their peak resident memory (deploy/latency.py); the C program also times every kernel
  call (the per-kernel profile, deploy/profile.py). Then, in another fresh process (deploy/timing.py), the
  deployed library is timed against tvm-default and ONNX Runtime with the harness's protocol; an artifact
  deployed `--from RUN` is held against the run's judged speedup (`reproduction`).
- cross profile: the C program under the profile's emulator (qemu-user), on the same inputs; emulated
  timings are not speed, so nothing is timed.
- `tracker` (or a profile with run = "remote"): the library is uploaded to a device of the profile's rpc_key
  through TVM RPC, run and timed there (the Relax VM on the device), against tvm-default built here and
  uploaded, and ONNX Runtime on the device where its `ekb farm server` offers it; its latency: the upload and
  load, the first run (timed here, over RPC) and N single runs timed on the device.

The oracle is the harness's (oracle.py): ONNX Runtime with graph optimizations off, or onnx.reference for
integer arithmetic; outputs must match within the manifest's tolerances. The report goes into
DIR/verify.json and is returned; its figures also into the manifest's "measured".
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..errors import last_line
from .artifact import read_manifest
from .latency import Latency, from_c_program, from_run_py, host_facts, latency
from .model import DeployError, artifact_problem
from .profile import kernel_profile, peak_for

log = logging.getLogger(__name__)
NO_COMPILER = Path(__file__).parent / "data" / "no_compiler"
RUN_TIMEOUT_S = 600
DEFAULT_RUNS = 200  # single runs timed for the latency percentiles
PROFILE_RUNS = 50  # C program runs with every kernel call timed (the per-kernel profile)
C_RUNNER = "c/model (static C program)"
ENV_KEEP = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "EKB_NATIVE_CACHE")


def _env(threads: int, pythonpath: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k in ENV_KEEP or k.startswith("EKB_ORT")}
    env.update(TVM_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def _stderr_line(proc: subprocess.CompletedProcess) -> str:
    err = (
        (proc.stderr or b"").decode(errors="replace") if isinstance(proc.stderr, bytes) else proc.stderr or ""
    )
    lines = [ln.strip() for ln in err.strip().splitlines() if ln.strip()]
    return lines[-1][:500] if lines else f"exit status {proc.returncode}"


def verify(
    folder: str | Path,
    *,
    quick: bool = False,
    tracker: str | None = None,
    checks: int = 3,
    measure: bool = True,
    seed: int = 0,
    runs: int = DEFAULT_RUNS,
    profile_dir: str | Path | None = None,
) -> dict:
    """Verifies the artifact in `folder`; returns the report (also written to folder/verify.json, and what it
    measured into the manifest's "measured"). The report's "verified" is True when every output of every
    check matched the oracle, from every runner that ran (run.py and the C program on the host). `runs`:
    single runs timed for the latency percentiles; `profile_dir`: the per-kernel profile goes there
    (profile.json, profile.txt), with the roofline (the backend's peaks measured if need be). Raises
    DeployError when the artifact cannot be verified at all (no manifest, a missing toolchain or emulator, no
    device)."""
    from ..backends.base import BackendProfile
    from ..oracle import Oracle

    folder = Path(folder)
    manifest = read_manifest(folder)
    profile = BackendProfile.from_dict(manifest["backend"]["profile"])
    problem = artifact_problem(folder, manifest)
    feeds = [problem.sample_inputs(seed + i) for i in range(max(1, checks))]
    oracle = Oracle(problem)
    want = [oracle.run(f) for f in feeds]
    t0 = time.perf_counter()
    runs = runs if measure else 0
    lat: list[Latency] = []
    c_report = c_stats = None
    if tracker or profile.run == "remote":
        got, timing, where, remote_lat = _remote(
            folder, manifest, profile, problem, feeds, tracker, quick, runs
        )
        lat += [remote_lat] if remote_lat is not None else []
    elif profile.kind == "cross":
        got, c_stats, where = _c_program(folder, manifest, feeds, 0, 0, profile)
        timing = {"status": f"not measured: emulated ({where}); emulated timings are not speed"}
    else:
        got, where, py_stats = _host_runtime_only(folder, manifest, feeds, runs)
        if py_stats and runs:
            lat.append(from_run_py(py_stats, host_facts()))
        if (manifest.get("c_program") or {}).get("status") == "built":
            c_got, c_stats, c_where = _c_program(folder, manifest, feeds, runs, PROFILE_RUNS if runs else 0)
            c_report = {**_compare(c_got, want, problem, oracle.name), "where": c_where}
            if c_stats and runs:
                lat.append(from_c_program(c_stats, host_facts(), C_RUNNER))
        timing = (
            _host_timing(folder, manifest, quick) if measure else {"status": "not measured (--no-measure)"}
        )
    report = _compare(got, want, problem, oracle.name)
    report.update(where=where, backend=profile.name, timing=timing)
    if c_report is not None:
        report["c_program"] = c_report
        report["verified"] = report["verified"] and c_report["verified"]
    report["latency"] = [x.to_dict() for x in lat]
    report["memory"] = _memory(manifest, lat, c_stats)
    prof = _profile(manifest, profile, c_stats, profile_dir)
    if prof is not None:
        report["profile"] = prof.to_dict()
    elif profile_dir is not None:
        report["profile"] = {"status": "not measured: the per-kernel profile needs the C program on the host"}
    if manifest.get("carryover") and timing.get("status") == "measured":
        report["reproduction"] = reproduction(manifest["carryover"], timing, prof).to_dict()
    report.update(seconds=round(time.perf_counter() - t0, 2), created=time.strftime("%Y-%m-%dT%H:%M:%S"))
    (folder / "verify.json").write_text(json.dumps(report, indent=1) + "\n")
    _record(folder, manifest, report)
    return report


def _record(folder: Path, manifest: dict, report: dict) -> None:
    """The verification's figures into the manifest ("measured"), written whole or not at all."""
    keys = ("verified", "where", "latency", "memory", "profile", "reproduction", "created")
    manifest["measured"] = {k: report[k] for k in keys if k in report}
    timing = report.get("timing") or {}
    if timing.get("status") == "measured":
        manifest["measured"]["speedups"] = timing.get("speedups")
    tmp = folder / ".manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(tmp, folder / "manifest.json")


def _memory(manifest: dict, lat: list[Latency], c_stats: dict | None) -> dict:
    """The plan (made at deploy time) beside what the runners measured."""
    plan = manifest.get("memory") or {}
    out = {
        "planned_bytes": plan.get("planned_bytes"),
        "activations_bytes": plan.get("activations_bytes"),
        "workspace_bytes": plan.get("workspace_bytes"),
        "weights_bytes": plan.get("weights_bytes"),
        "peak_rss_bytes": {x.runner: x.peak_rss_bytes for x in lat if x.peak_rss_bytes},
        "model_rss_bytes": {x.runner: x.model_rss_bytes for x in lat if x.model_rss_bytes},
    }
    if c_stats:
        out["c_program_workspace_peak_bytes"] = c_stats.get("workspace_peak_bytes")
        out["c_program_buffer_bytes"] = c_stats.get("buffer_bytes")
    return out


def _profile(manifest: dict, profile, c_stats: dict | None, profile_dir):
    """The per-kernel profile from the C program's host run (None without one); with `profile_dir`, the
    roofline too, written there."""
    if not (c_stats and c_stats.get("steps") and profile.kind == "host"):
        return None
    peak = None
    if profile_dir is not None:
        peak = peak_for(profile, manifest["threads"], manifest["decisions"].get("from_run"))
    integer = bool(manifest["model"].get("integer", False))
    prof = kernel_profile(c_stats["steps"], manifest["kernels"], peak, integer, C_RUNNER)
    if profile_dir is not None:
        folder = Path(profile_dir)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "profile.json").write_text(json.dumps(prof.to_dict(), indent=1) + "\n")
        (folder / "profile.txt").write_text(prof.table() + "\n")
    return prof


def _compare(got: list, want: list, problem, oracle: str) -> dict:
    from ..oracle import compare_outputs

    checks = []
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if isinstance(g, str):  # the run failed
            checks.append({"check": i, "matches_oracle": False, "error": g})
            continue
        checks.append({"check": i, **compare_outputs(g, w, problem.atol, problem.rtol)})
    return {
        "verified": all(c["matches_oracle"] for c in checks),
        "oracle": oracle,
        "atol": problem.atol,
        "rtol": problem.rtol,
        "checks": checks,
    }


# ------------------------------------------------------------------------------------------ reproduction
@dataclass
class Reproduction:
    """The artifact's speedup over tvm-default, timed here, against the run's judged one (`--from RUN`)."""

    candidate: str
    judged: float | None
    judged_ci: list[float] | None
    deployed: float
    deployed_ci: list[float]
    within: bool  # the two 95% intervals overlap: no difference the two measurements resolve
    verdict: str
    not_carried: list[str] = field(default_factory=list)
    tvm_default_us: dict = field(default_factory=dict)  # {"judged", "here"}: the baseline in both
    candidate_us: dict = field(default_factory=dict)  # {"judged", "here"}: the candidate / the artifact
    kernels: list[list] = field(default_factory=list)  # [kernel, judged us per call, here (C program), ratio]

    def to_dict(self) -> dict:
        return asdict(self)


def reproduction(carry: dict, timing: dict, prof) -> Reproduction:
    """Whether the artifact reproduces the judged speedup within the judge's noise (the 95% intervals of the
    two paired speedups overlap), and if not what differs: the parts that did not carry over (the manifest's
    carryover), the two contenders' times here and in the judgment, and each kernel's."""
    here = timing["speedups"]["tvm-default"]
    lo, hi = here["ci"]
    judged_s = carry.get("judged_speedup")
    jci = carry.get("judged_ci") or ([judged_s, judged_s] if judged_s else None)
    within = bool(jci) and max(lo, jci[0]) <= min(hi, jci[1])
    judged = carry.get("judged") or {}
    base = {
        "judged": _us(judged.get("tvm_default_s")),
        "here": _us(timing["timings"]["tvm-default"]["median"]),
    }
    mine = {"judged": _us(judged.get("candidate_s")), "here": _us(timing["timings"]["deployed"]["median"])}
    kernels = []
    if prof is not None:
        per_call = {r.kernel: r.us_per_call for r in prof.rows}
        judged_us: dict[str, list[float]] = {}  # the judge profiled each call of main
        for k in judged.get("kernels") or []:
            if k.get("kernel") in per_call and k.get("median"):
                judged_us.setdefault(k["kernel"], []).append(k["median"] * 1e6)
        for name, times in judged_us.items():
            was = sum(times) / len(times)
            kernels.append([name, was, per_call[name], per_call[name] / was])
    missing = list(carry.get("not_carried") or [])
    here_text = f"{here['speedup']:.2f}x [{lo:.2f}, {hi:.2f}] over tvm-default here"
    if not jci:
        verdict = f"{here_text}; the run recorded no judged speedup to reproduce"
    elif within:
        verdict = f"reproduced: {here_text}, judged {judged_s:.2f}x [{jci[0]:.2f}, {jci[1]:.2f}]"
    else:
        verdict = f"not reproduced: {here_text}, judged {judged_s:.2f}x [{jci[0]:.2f}, {jci[1]:.2f}]; "
        verdict += "not carried over: " + "; ".join(missing) if missing else "every part carried over"
        if base["judged"] and mine["judged"]:
            verdict += (
                f"; tvm-default {base['here']:.1f} us here vs {base['judged']:.1f} us judged, the candidate "
                f"{mine['here']:.1f} us here vs {mine['judged']:.1f} us judged"
            )
        share = {r.kernel: r.share for r in prof.rows} if prof is not None else {}
        big = [k for k in kernels if share.get(k[0], 0.0) >= 0.05]  # 5% of the time or more
        if big:
            worst = max(big, key=lambda k: max(k[3], 1 / k[3]))
            verdict += (
                f"; of the kernels taking 5% or more, the furthest from its judged time: {worst[0]} "
                f"({worst[2]:.1f} us here, {worst[1]:.1f} us judged)"
            )
    return Reproduction(
        carry.get("candidate", ""),
        judged_s,
        jci,
        here["speedup"],
        [lo, hi],
        within,
        verdict,
        missing,
        base,
        mine,
        kernels,
    )


def _us(seconds) -> float | None:
    return seconds * 1e6 if seconds else None


# ------------------------------------------------------------------------------------------ host
def _host_runtime_only(folder: Path, manifest: dict, feeds: list[dict], runs: int) -> tuple[list, str, dict]:
    """run.py on every input set in one fresh process without TVM's compiler, with `runs` timed runs of the
    first; (outputs or an error per set, where, run.py's --stats)."""
    names = [o["name"] for o in manifest["outputs"]]
    with tempfile.TemporaryDirectory(prefix="ekb-verify-") as tmp:
        files = []
        for i, f in enumerate(feeds):
            path = Path(tmp) / f"check{i}.npz"
            np.savez(path, **{s["name"]: f[s["name"]] for s in manifest["inputs"]})
            files.append(str(path))
        stats_file = Path(tmp) / "stats.json"
        cmd = [sys.executable, str(folder / "run.py"), *files, "--stats", str(stats_file)]
        cmd += ["--repeat", str(runs)] if runs else []
        env = _env(manifest["threads"], str(NO_COMPILER))
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return [f"run.py ran past {RUN_TIMEOUT_S} s"] * len(feeds), "host", {}
        if proc.returncode != 0:
            why = f"run.py failed in a process without TVM's compiler: {_stderr_line(proc)}"
            return [why] * len(feeds), "host", {}
        got = []
        for path in files:
            with np.load(path.removesuffix(".npz") + ".out.npz") as z:
                got.append([z[n] for n in names])
        stats = json.loads(stats_file.read_text())
    return got, "host: run.py in a fresh process, TVM runtime only (compiler blocked)", stats


def _host_timing(folder: Path, manifest: dict, quick: bool) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "edgekernelbench.deploy.timing",
        str(folder),
        *(["--quick"] if quick else []),
    ]
    env = _env(manifest["threads"], os.environ.get("PYTHONPATH"))
    env.update({k: v for k, v in os.environ.items() if k in ("EKB_PROBLEM_MODULES", "EKB_USER_SUITE")})
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"status": f"failed: the timing process ran past {RUN_TIMEOUT_S} s"}
    try:
        out = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"status": f"failed: {_stderr_line(proc)}"}
    if "error" in out:
        return {"status": f"failed: {out['error']}"}
    out["status"] = "measured"
    return out


# ------------------------------------------------------------------------------------------ C program
def _c_program(
    folder: Path, manifest: dict, feeds: list[dict], runs: int, profile_runs: int, profile=None
) -> tuple[list, dict, str]:
    """The artifact's C program on every input set (under the profile's emulator for a cross profile,
    natively on the host), the first with `runs` timed and `profile_runs` profiled runs and its statistics
    (-j); (outputs or an error per set, the statistics, where)."""
    prog = manifest.get("c_program") or {}
    binary = folder / prog.get("binary", "c/model")
    if not binary.is_file():
        raise DeployError(
            f"{folder}: no C program ({binary.relative_to(folder)}): rebuild it with c/build.sh"
        )
    emulator: list[str] = []
    if profile is not None and profile.kind == "cross":
        from ..backends.cross import CrossBackend

        emulator = CrossBackend(profile).emulator()  # ToolchainMissing names the package
    runner = Path(emulator[0]).name if emulator else "natively"
    got: list = []
    stats: dict = {}
    with tempfile.TemporaryDirectory(prefix="ekb-verify-") as tmp:
        for i, f in enumerate(feeds):
            ins = []
            for s in manifest["inputs"]:
                path = Path(tmp) / f"in{i}_{len(ins)}.bin"
                np.asarray(f[s["name"]], dtype=s["dtype"], order="C").tofile(path)
                ins.append(str(path))
            outs = [str(Path(tmp) / f"out{i}_{k}.bin") for k in range(len(manifest["outputs"]))]
            flags = ["-j", str(Path(tmp) / "stats.json")] if i == 0 else []
            flags += ["-r", str(runs), "-p", str(profile_runs)] if i == 0 and runs else []
            cmd = [*emulator, str(binary), *flags, str(folder / "weights"), *ins, *outs]
            try:
                proc = subprocess.run(
                    cmd, capture_output=True, stdin=subprocess.DEVNULL, timeout=RUN_TIMEOUT_S
                )
            except subprocess.TimeoutExpired:
                got.append(f"the C program ran past {RUN_TIMEOUT_S} s ({runner})")
                continue
            if proc.returncode != 0:
                got.append(f"the C program failed ({runner}): {_stderr_line(proc)}")
                continue
            if i == 0:
                stats = json.loads((Path(tmp) / "stats.json").read_text())
            got.append(
                [
                    np.fromfile(path, dtype=o["dtype"]).reshape(o["shape"])
                    for path, o in zip(outs, manifest["outputs"], strict=True)
                ]
            )
    return got, stats, f"{runner}: the C program ({binary.relative_to(folder)})"


# ------------------------------------------------------------------------------------------ remote
def _remote(folder, manifest, profile, problem, feeds, tracker, quick, runs):
    """Run and time the uploaded library on a farm device (TVM RPC): (outputs, timing, where, Latency)."""
    from ..backends.rpc import RPCLoaded, RPCSession, remote_backend
    from ..baselines.onnxruntime import ORTUnavailable, remote_ort_timer
    from ..baselines.tvm_default import tvm_default_module
    from ..harness.timing import TimingConfig, paired_speedup, time_interleaved
    from ..reference import build_reference
    from .artifact import graph_module, transformed_weights
    from .timing import DEPLOYED, load_weights

    backend = remote_backend(profile, tracker)
    if backend is None:
        key = profile.rpc_key or profile.name
        raise DeployError(f"no device under key '{key}' on the tracker {tracker}: see `ekb farm status`")
    session = RPCSession(backend)
    remote = session.connect()
    name = f"ekb_deploy_{os.getpid()}_{folder.name}.so"
    t0 = time.perf_counter()
    remote.upload(str(folder / manifest["library"]["file"]), target=name)
    loaded = RPCLoaded(session, remote.load_module(name), None)
    weights = [session.to_device(w) for w in load_weights(folder, manifest)]
    load_s = time.perf_counter() - t0
    names = [s["name"] for s in manifest["inputs"]]
    got, first_s = [], None
    for f in feeds:
        try:
            t0 = time.perf_counter()
            outs = loaded.call("main", [session.to_device(f[n]) for n in names] + weights)
            first_s = first_s if first_s is not None else time.perf_counter() - t0
            got.append([t.numpy() for t in outs])
        except Exception as e:  # noqa: BLE001 -- the device's error, reported as the check's
            got.append(f"on the device: {last_line(e, 300)}")
    where = f"device '{session.key}' at {session.server} (TVM RPC)"
    if not runs:
        return got, {"status": "not measured (--no-measure)"}, where, None
    args = [session.to_device(feeds[0][n]) for n in names]
    loaded.vm.set_input("main", *args, *weights)
    single = loaded.vm.time_evaluator("invoke_stateful", loaded.device, number=1, repeat=runs)("main")
    lat = latency(
        f"device '{session.key}' (TVM RPC; load and first run timed here, runs on the device)",
        profile.threads,
        load_s,
        first_s,
        [float(x) for x in single.results],
        {"cpu": profile.description or profile.name},
    )
    reference = build_reference(problem)
    built = backend.build(graph_module(tvm_default_module(reference.module, backend.target())), stock=True)
    default_args = args + [session.to_device(w) for w in transformed_weights(reference)]
    contenders = {
        DEPLOYED: loaded.timer("main", args + weights),
        "tvm-default": session.load(built).timer("main", default_args),
    }
    timing: dict = {}
    try:
        run, version, how = remote_ort_timer(remote, problem, feeds[0], profile.threads)
        contenders["onnxruntime"] = run
        timing["onnxruntime_timer"] = {**how, "version": version}
    except ORTUnavailable as e:
        timing["onnxruntime_timer"] = {"unavailable": str(e)}
    cfg = TimingConfig.quick() if quick else TimingConfig()
    try:
        times = time_interleaved(contenders, cfg)
    except Exception as e:  # noqa: BLE001 -- a remote timing that fails is reported, the checks stand
        return got, {"status": f"failed: {last_line(e, 300)}"}, where, lat
    timing.update(
        status="measured",
        protocol=asdict(cfg),
        threads=profile.threads,
        timings={n: asdict(t) for n, t in times.items()},
        speedups={
            n: dict(zip(("speedup", "ci"), _speedup(paired_speedup(times[n], times[DEPLOYED])), strict=True))
            for n in times
            if n != DEPLOYED
        },
    )
    return got, timing, where, lat


def _speedup(t: tuple[float, float, float]) -> tuple[float, list[float]]:
    return t[0], [t[1], t[2]]
