"""`ekb deploy --verify DIR` (also the last step of `ekb deploy`): the artifact, loaded afresh, against ONNX
Runtime on random inputs, and on the host timed end to end.

- host profile: the artifact's run.py in a fresh process that cannot use TVM's compiler
  (data/no_compiler/sitecustomize.py: `import tvm` fails, libtvm_compiler may not be loaded, and the process
  checks its memory map at exit); its outputs are compared here with the oracle's. Then, in another fresh
  process (deploy/timing.py), the deployed library is timed against tvm-default and ONNX Runtime with the
  harness's protocol.
- cross profile: the artifact's C program (c/model) under the profile's emulator (qemu-user), on the same
  inputs; emulated timings are not speed, so nothing is timed.
- `tracker` (or a profile with run = "remote"): the library is uploaded to a device of the profile's rpc_key
  through TVM RPC, run and timed there (the Relax VM on the device), against tvm-default built here and
  uploaded, and ONNX Runtime on the device where its `ekb farm server` offers it.

The oracle is the harness's (oracle.py): ONNX Runtime with graph optimizations off, or onnx.reference for
integer arithmetic; outputs must match within the manifest's tolerances. The report goes into
DIR/verify.json and is returned.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ..errors import last_line
from .artifact import read_manifest
from .model import DeployError, artifact_problem

log = logging.getLogger(__name__)
NO_COMPILER = Path(__file__).parent / "data" / "no_compiler"
RUN_TIMEOUT_S = 600
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
) -> dict:
    """Verifies the artifact in `folder`; returns the report (also written to folder/verify.json). The
    report's "verified" is True when every output of every check matched the oracle. Raises DeployError when
    the artifact cannot be verified at all (no manifest, a missing toolchain or emulator, no device)."""
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
    if tracker or profile.run == "remote":
        got, timing, where = _remote(folder, manifest, profile, problem, feeds, tracker, quick, measure)
    elif profile.kind == "cross":
        got, where = _emulated(folder, manifest, profile, feeds)
        timing = {"status": f"not measured: emulated ({where}); emulated timings are not speed"}
    else:
        got, where = _host_runtime_only(folder, manifest, feeds)
        timing = (
            _host_timing(folder, manifest, quick) if measure else {"status": "not measured (--no-measure)"}
        )
    report = _compare(got, want, problem, oracle.name)
    report.update(
        where=where,
        backend=profile.name,
        timing=timing,
        seconds=round(time.perf_counter() - t0, 2),
        created=time.strftime("%Y-%m-%dT%H:%M:%S"),
    )
    (folder / "verify.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


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


# ------------------------------------------------------------------------------------------ host
def _host_runtime_only(folder: Path, manifest: dict, feeds: list[dict]) -> tuple[list, str]:
    """run.py on every input set in one fresh process without TVM's compiler."""
    names = [o["name"] for o in manifest["outputs"]]
    with tempfile.TemporaryDirectory(prefix="ekb-verify-") as tmp:
        files = []
        for i, f in enumerate(feeds):
            path = Path(tmp) / f"check{i}.npz"
            np.savez(path, **{s["name"]: f[s["name"]] for s in manifest["inputs"]})
            files.append(str(path))
        cmd = [sys.executable, str(folder / "run.py"), *files]
        env = _env(manifest["threads"], str(NO_COMPILER))
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return [f"run.py ran past {RUN_TIMEOUT_S} s"] * len(feeds), "host"
        if proc.returncode != 0:
            why = f"run.py failed in a process without TVM's compiler: {_stderr_line(proc)}"
            return [why] * len(feeds), "host"
        got = []
        for path in files:
            with np.load(path.removesuffix(".npz") + ".out.npz") as z:
                got.append([z[n] for n in names])
    return got, "host: run.py in a fresh process, TVM runtime only (compiler blocked)"


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


# ------------------------------------------------------------------------------------------ emulated
def _emulated(folder: Path, manifest: dict, profile, feeds: list[dict]) -> tuple[list, str]:
    from ..backends.cross import CrossBackend

    prog = manifest.get("c_program") or {}
    binary = folder / prog.get("binary", "c/model")
    if not binary.is_file():
        raise DeployError(
            f"{folder}: no C program ({binary.relative_to(folder)}): rebuild it with c/build.sh"
        )
    emulator = CrossBackend(profile).emulator()  # ToolchainMissing names the package
    got = []
    with tempfile.TemporaryDirectory(prefix="ekb-verify-") as tmp:
        for i, f in enumerate(feeds):
            ins, outs = [], []
            for s in manifest["inputs"]:
                path = Path(tmp) / f"in{i}_{len(ins)}.bin"
                np.asarray(f[s["name"]], dtype=s["dtype"], order="C").tofile(path)
                ins.append(str(path))
            outs = [str(Path(tmp) / f"out{i}_{k}.bin") for k in range(len(manifest["outputs"]))]
            cmd = [*emulator, str(binary), str(folder / "weights"), *ins, *outs]
            try:
                proc = subprocess.run(
                    cmd, capture_output=True, stdin=subprocess.DEVNULL, timeout=RUN_TIMEOUT_S
                )
            except subprocess.TimeoutExpired:
                got.append(f"the C program ran past {RUN_TIMEOUT_S} s under {Path(emulator[0]).name}")
                continue
            if proc.returncode != 0:
                got.append(f"the C program failed under {Path(emulator[0]).name}: {_stderr_line(proc)}")
                continue
            got.append(
                [
                    np.fromfile(path, dtype=o["dtype"]).reshape(o["shape"])
                    for path, o in zip(outs, manifest["outputs"], strict=True)
                ]
            )
    return got, f"{Path(emulator[0]).name}: the C program ({binary.relative_to(folder)})"


# ------------------------------------------------------------------------------------------ remote
def _remote(folder, manifest, profile, problem, feeds, tracker, quick, measure):
    """Run and time the uploaded library on a farm device (TVM RPC)."""
    from ..backends.rpc import RPCLoaded, RPCSession, remote_backend
    from ..baselines.onnxruntime import ORTUnavailable, remote_ort_timer
    from ..baselines.tvm_default import tvm_default_module
    from ..harness.timing import TimingConfig, paired_speedup, time_interleaved
    from ..reference import build_reference
    from .artifact import graph_module
    from .timing import DEPLOYED, load_weights

    backend = remote_backend(profile, tracker)
    if backend is None:
        key = profile.rpc_key or profile.name
        raise DeployError(f"no device under key '{key}' on the tracker {tracker}: see `ekb farm status`")
    session = RPCSession(backend)
    remote = session.connect()
    name = f"ekb_deploy_{os.getpid()}_{folder.name}.so"
    remote.upload(str(folder / manifest["library"]["file"]), target=name)
    loaded = RPCLoaded(session, remote.load_module(name), None)
    weights = [session.to_device(w) for w in load_weights(folder, manifest)]
    names = [s["name"] for s in manifest["inputs"]]
    got = []
    for f in feeds:
        try:
            outs = loaded.call("main", [session.to_device(f[n]) for n in names] + weights)
            got.append([t.numpy() for t in outs])
        except Exception as e:  # noqa: BLE001 -- the device's error, reported as the check's
            got.append(f"on the device: {last_line(e, 300)}")
    where = f"device '{session.key}' at {session.server} (TVM RPC)"
    if not measure:
        return got, {"status": "not measured (--no-measure)"}, where
    args = [session.to_device(feeds[0][n]) for n in names] + weights
    reference = build_reference(problem)
    built = backend.build(graph_module(tvm_default_module(reference.module, backend.target())))
    contenders = {
        DEPLOYED: loaded.timer("main", args),
        "tvm-default": session.load(built).timer("main", args),
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
        return got, {"status": f"failed: {last_line(e, 300)}"}, where
    from dataclasses import asdict

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
    return got, timing, where


def _speedup(t: tuple[float, float, float]) -> tuple[float, list[float]]:
    return t[0], [t[1], t[2]]
