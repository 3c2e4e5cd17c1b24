"""The device farm over TVM RPC, on loopback: a real tracker and `ekb farm server`s (TVM's rpc_server
with the EKB functions) under two keys, plus a plain `python -m tvm.exec.rpc_server` and an `ekb farm
server` without onnxruntime. Candidates are judged on the devices of their profile's key (routing), in
parallel on the devices of one key, a key without devices is an infrastructure failure, a crashing kernel
is a crash (and its device comes back), and a device killed mid-run costs no record: the item is retried
on another device or, after a rerun, resumed. The onnxruntime baseline is timed on the device when its
server can, and recorded as not measured, with the reason, when it cannot.

Every process started here has its own process group and is killed by its id at teardown."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_cli import assert_one_line_error, ekb, write_candidates
from test_harness import CORRECT, prim

TINY = "L1/tiny_scale_add"
L1 = "L1/dwconv3x3_kws"  # several kernels and main_transform_params (a tuple argument)
KEY_A = "host-cpu-rpc"  # the built-in loopback profile; two devices
KEY_B = "ekb-test-b"  # one device
KEY_PLAIN = "ekb-test-plain"  # one plain `python -m tvm.exec.rpc_server`: no EKB functions
KEY_NOORT = "ekb-test-noort"  # one `ekb farm server` where onnxruntime is not installed
PROFILES = f"""
[ekb-rpc-b]
kind = "host"
run = "remote"
rpc_key = "{KEY_B}"
target = {{ kind = "llvm", mcpu = "native" }}

[ekb-rpc-b-local]
kind = "host"
run = "local"
rpc_key = "{KEY_B}"
target = {{ kind = "llvm", mcpu = "native" }}

[ekb-rpc-none]
kind = "host"
run = "remote"
rpc_key = "ekb-test-none"
target = {{ kind = "llvm", mcpu = "native" }}

[ekb-rpc-plain]
kind = "host"
run = "remote"
rpc_key = "{KEY_PLAIN}"
target = {{ kind = "llvm", mcpu = "native" }}

[ekb-rpc-gpu]
kind = "gpu"
run = "remote"
rpc_key = "{KEY_B}"
target = {{ kind = "cuda", arch = "sm_87" }}
host = {{ kind = "llvm", mcpu = "native" }}

[ekb-rpc-noort]
kind = "host"
run = "remote"
rpc_key = "{KEY_NOORT}"
target = {{ kind = "llvm", mcpu = "native" }}
"""
# on a server's PYTHONPATH, hides the installed onnxruntime as if it were not there
NO_ORT_PACKAGE = 'raise ModuleNotFoundError("No module named \'onnxruntime\'", name="onnxruntime")\n'
CRASH = prim("for i, j in T.grid(4, 8):\n    out[i * 100000000, j] = x[i, j] * w1[j] + b3[j]")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Farm:
    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.procs: dict[str, subprocess.Popen] = {}
        self.ports: dict[str, int] = {}
        self.tracker = ""

    def spawn(self, name: str, cmd: list[str], env: dict | None = None) -> subprocess.Popen:
        log = open(self.workdir / f"{name}.log", "w")  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own process group: the server, its popen_worker, sessions
        )
        log.close()
        self.procs[name] = proc
        return proc

    def start(self, name: str, *args: str, env: dict | None = None) -> subprocess.Popen:
        return self.spawn(name, [sys.executable, "-m", "edgekernelbench.cli", "farm", *args], env)

    def start_server(self, name: str, key: str, env: dict | None = None) -> None:
        port = free_port()
        self.ports[name] = port
        self.start(name, "server", "--key", key, "--tracker", self.tracker, "--port", str(port), env=env)

    def start_plain_server(self, name: str, key: str) -> None:
        """TVM's own rpc_server, as on a board without edgekernelbench."""
        port = free_port()
        self.ports[name] = port
        cmd = [sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", str(port)]
        self.spawn(name, cmd + ["--port-end", str(port + 1), "--tracker", self.tracker, "--key", key])

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text()

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def servers(self, *names: str) -> set[str]:
        return {f"127.0.0.1:{self.ports[n]}" for n in names}

    def status(self):
        from edgekernelbench.backends.rpc import farm_status

        return farm_status(self.tracker)

    def wait_devices(self, want: dict[str, int], timeout: float = 60.0) -> None:
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            with contextlib.suppress(Exception):
                last = self.status()
                if all(last.devices(k) == n and last.free(k) == n for k, n in want.items()):
                    return
            time.sleep(0.3)
        logs = {p.name: p.read_text()[-800:] for p in self.workdir.glob("*.log")}
        raise AssertionError(f"farm not ready: want {want}, tracker says {last}; logs {logs}")


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    work = tmp_path_factory.mktemp("farm")
    profiles = work / "profiles.toml"
    profiles.write_text(PROFILES)
    old = os.environ.get("EKB_PROFILES")
    os.environ["EKB_PROFILES"] = str(profiles)  # seen by the ekb subprocesses and their workers
    f = Farm(work)
    try:
        port = free_port()
        f.tracker = f"127.0.0.1:{port}"
        f.start("tracker", "tracker", "--host", "127.0.0.1", "--port", str(port))
        f.wait_devices({}, timeout=60)
        f.start_server("a1", KEY_A)
        f.start_server("a2", KEY_A)
        f.start_server("b1", KEY_B)
        f.start_plain_server("p1", KEY_PLAIN)
        hidden = work / "no-onnxruntime"
        (hidden / "onnxruntime").mkdir(parents=True)
        (hidden / "onnxruntime" / "__init__.py").write_text(NO_ORT_PACKAGE)
        path = os.pathsep.join(filter(None, [str(hidden), os.environ.get("PYTHONPATH")]))
        f.start_server("n1", KEY_NOORT, env={**os.environ, "PYTHONPATH": path})
        f.wait_devices({KEY_A: 2, KEY_B: 1, KEY_PLAIN: 1, KEY_NOORT: 1})
        yield f
    finally:
        for name in list(f.procs):
            f.kill(name)
        if old is None:
            os.environ.pop("EKB_PROFILES", None)
        else:
            os.environ["EKB_PROFILES"] = old


def records(run_dir: Path) -> dict:
    from edgekernelbench.store import RunStore

    with RunStore(run_dir) as store:
        return {(r.problem, r.sample, r.backend): r for r in store.results()}


def test_status_lists_the_devices(farm):
    out = json.loads(ekb("farm", "status", "--tracker", farm.tracker, "--json", check=True).stdout)
    keys = out["keys"]
    assert keys[KEY_A]["devices"] == 2 and set(keys[KEY_A]["servers"]) == farm.servers("a1", "a2")
    assert keys[KEY_B]["devices"] == 1 and set(keys[KEY_B]["servers"]) == farm.servers("b1")
    table = ekb("farm", "status", "--tracker", farm.tracker, check=True).stdout
    assert KEY_A in table and KEY_B in table and f"127.0.0.1:{farm.ports['b1']}" in table


def test_unreachable_tracker_is_one_clear_line(tmp_path):
    nobody = f"127.0.0.1:{free_port()}"
    assert_one_line_error(ekb("farm", "status", "--tracker", nobody), "cannot reach the RPC tracker")
    assert_one_line_error(
        ekb("farm", "server", "--key", "k", "--tracker", nobody), "cannot reach the RPC tracker"
    )
    write_candidates(tmp_path, {0: CORRECT})
    p = ekb("eval", tmp_path, "--backend", "host-cpu-rpc", "--tracker", nobody)
    assert_one_line_error(p, "cannot reach the RPC tracker")
    p = ekb("peak", "--backend", "host-cpu-rpc", "--tracker", nobody, "--profiles-file", tmp_path / "p.toml")
    assert_one_line_error(p, "cannot reach the RPC tracker")
    assert_one_line_error(ekb("farm", "status", "--tracker", "nohost"), "bad tracker address")


def test_a_profile_goes_remote_only_with_a_device_for_its_key(farm):
    from edgekernelbench.backends.cross import CrossBackend
    from edgekernelbench.backends.host import LocalBackend
    from edgekernelbench.backends.registry import get_backend
    from edgekernelbench.backends.rpc import RPCBackend

    remote = get_backend("ekb-rpc-b-local", tracker=farm.tracker)
    assert isinstance(remote, RPCBackend) and remote.profile.run == "remote" and remote.profile.can_time
    assert type(get_backend("ekb-rpc-b-local")) is LocalBackend  # no tracker: as the profile says
    assert isinstance(get_backend("rpi4", tracker=farm.tracker), CrossBackend)  # no rpi4 device: emulated
    assert isinstance(get_backend("ekb-rpc-none", tracker=farm.tracker), RPCBackend)  # run = remote


def test_eval_routes_by_key_runs_devices_in_parallel_and_times_remotely(farm, tmp_path):
    from edgekernelbench.harness.api import JudgeConfig
    from edgekernelbench.problems import get_problem
    from edgekernelbench.reference import build_reference
    from edgekernelbench.runs import EvalConfig, device_plan

    farm.wait_devices({KEY_A: 2, KEY_B: 1})
    assert device_plan("host-cpu-rpc", EvalConfig(judge=JudgeConfig(tracker=farm.tracker))) == (
        farm.tracker,
        2,
    )
    write_candidates(tmp_path, {0: CORRECT, 1: CORRECT, 2: CORRECT})
    write_candidates(tmp_path, {0: build_reference(get_problem(L1)).script()}, problem=L1)
    p = ekb(
        "eval", tmp_path, "--backend", "host-cpu-rpc", "--tracker", farm.tracker, "--quick", "--trials", "2"
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "evaluated 4 (4 correct)" in p.stdout, p.stdout
    env_p = subprocess.run(  # the tracker from $EKB_TRACKER
        [sys.executable, "-m", "edgekernelbench.cli", "eval", str(tmp_path), "--backend", "ekb-rpc-b"]
        + ["--problem", TINY, "--no-measure", "--trials", "2"],
        capture_output=True,
        text=True,
        env={**os.environ, "EKB_TRACKER": farm.tracker},
        timeout=300,
    )
    assert "evaluated 3 (3 correct)" in env_p.stdout, env_p.stdout + env_p.stderr
    recs = records(tmp_path)
    on_a = [r for (_, _, b), r in recs.items() if b == "host-cpu-rpc"]
    on_b = [r for (_, _, b), r in recs.items() if b == "ekb-rpc-b"]
    assert len(on_a) == 4 and len(on_b) == 3 and all(r.correct for r in on_a + on_b)
    assert {r.extra["device"]["server"] for r in on_a} == farm.servers("a1", "a2")  # both A devices
    assert {r.extra["device"]["server"] for r in on_b} == farm.servers("b1")
    assert {r.extra["device"]["key"] for r in on_a} == {KEY_A}
    for r in on_a:  # timed on the device against tvm-default and onnxruntime, both on the device
        assert r.timing_status == "measured" and set(r.baselines) == {"tvm-default", "onnxruntime"}, r
        assert r.extra["onnxruntime_on"] == "device" and "not_measured" not in r.extra
        assert r.runtime.median > 0
    l1 = recs[(L1, 0, "host-cpu-rpc")]
    assert l1.correctness.trials == len(l1.correctness.inputs) >= 2 and max(l1.correctness.max_abs_err) < 1e-3


def test_a_key_without_devices_is_infra_not_the_candidates_fault(farm):
    from edgekernelbench.harness.api import evaluate
    from edgekernelbench.harness.isolation import Limits

    r = evaluate(TINY, CORRECT, "ekb-rpc-none", tracker=farm.tracker, trials=1, measure=False,
                 limits=Limits(timeout_s=120))  # fmt: skip
    assert r.reason == "infra" and "no device registered under key 'ekb-test-none'" in r.detail, r.detail
    assert r.compiled and not r.extra.get("device_lost")


def test_a_gpu_profile_on_a_device_without_that_gpu_is_infra(farm):
    """The remote GPU path: built here (CUDA, dlight's schedule), exported, then the device (a CPU-only
    server under the key) has no CUDA device: an infrastructure failure, not the kernel's."""
    from edgekernelbench.backends.registry import get_profile
    from edgekernelbench.generators.reference_candidates import gpu_default_spec
    from edgekernelbench.harness.api import evaluate
    from edgekernelbench.harness.isolation import Limits
    from edgekernelbench.problems import get_problem

    spec = gpu_default_spec(get_problem(TINY), get_profile("ekb-rpc-gpu"))
    r = evaluate(TINY, spec, "ekb-rpc-gpu", tracker=farm.tracker, trials=1, limits=Limits(timeout_s=120))
    assert r.compiled and r.reason == "infra", (r.reason, r.detail)
    assert (
        f"'{KEY_B}'" in r.detail
        and "has no cuda device" in r.detail
        and "__global__" in r.extra["device_source"]
    )
    assert not r.extra.get("device_lost")


def test_peak_measures_a_remote_device_and_stores_it(farm, tmp_path):
    import tomllib

    farm.wait_devices({KEY_A: 2})
    profiles = tmp_path / "peaks.toml"
    args = ["peak", "--backend", "host-cpu-rpc", "--tracker", farm.tracker, "--profiles-file", profiles]
    ekb(*args, "--mib", "8", check=True)
    table = tomllib.loads(profiles.read_text())["host-cpu-rpc"]
    assert table["peak_flops"] > 1e8 and table["peak_bandwidth"] > 1e8, table
    # the board's levels come from the profile's caches table (for host-cpu-rpc, this machine as a loopback
    # device: its caches as detected, backends/hostinfo.py), not the board's sysfs
    from edgekernelbench.backends.registry import get_profile

    caches = get_profile("host-cpu-rpc").caches
    want = [k.split("_")[0].upper().replace("L1D", "L1d") for k in sorted(caches)] + ["DRAM"]
    assert [lv["level"] for lv in table["peak_levels"]] == want, (table, caches)
    src = table["peak_source"]
    assert src.startswith("measured: TVM micro-kernels over RPC on 127.0.0.1:") and src.endswith(
        "1 thread(s)"
    )
    assert any(s in src for s in farm.servers("a1", "a2")), src
    p = ekb("peak", "--backend", "ekb-rpc-none", "--tracker", farm.tracker, "--profiles-file", profiles)
    assert_one_line_error(p, "no device registered under key 'ekb-test-none'")
    assert "ekb-rpc-none" not in profiles.read_text()


def test_a_crashing_kernel_is_a_crash_and_its_device_comes_back(farm):
    from edgekernelbench.harness.api import evaluate
    from edgekernelbench.harness.isolation import Limits

    farm.wait_devices({KEY_B: 1})
    lim = Limits(timeout_s=120)
    r = evaluate(TINY, CRASH, "ekb-rpc-b", tracker=farm.tracker, trials=1, measure=False, limits=lim)
    assert r.reason == "crash" and "the candidate crashed it" in r.detail, (r.reason, r.detail)
    farm.wait_devices({KEY_B: 1}, timeout=60)  # `ekb farm server` served on (TVM's own loop would stop)
    assert "a session's process died" in farm.log("b1") and "serving on" in farm.log("b1")
    r = evaluate(TINY, CORRECT, "ekb-rpc-b", tracker=farm.tracker, trials=1, measure=False, limits=lim)
    assert r.correct and r.extra["device"]["server"] in farm.servers("b1"), r.detail


@pytest.mark.parametrize("name, machine", [("rpi4", 183), ("armv7", 40), ("riscv64-rvv", 243)])
def test_a_cross_profile_exports_for_its_board(name, machine):
    """What is uploaded to a board: shared objects for its architecture, linked by the cross compiler."""
    import shutil

    from edgekernelbench.backends.registry import get_profile
    from edgekernelbench.backends.rpc import RPCBackend
    from edgekernelbench.problems import get_problem
    from edgekernelbench.reference import build_reference

    profile = get_profile(name)
    if not shutil.which(profile.cross_compiler):
        pytest.skip(f"{profile.cross_compiler} not installed (make toolchains)")
    built = RPCBackend(profile, "127.0.0.1:1").build(build_reference(get_problem(TINY)).module)
    for path in (built.graph_path, built.kernels_path):
        head = path.read_bytes()[:20]
        assert head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") == machine, path


# ------------------------------------------------------------------------------------------ onnxruntime
def _judge(problem, backend: str, farm):
    from edgekernelbench.harness.api import evaluate
    from edgekernelbench.harness.isolation import Limits
    from edgekernelbench.harness.timing import TimingConfig

    return evaluate(problem, CORRECT, backend, tracker=farm.tracker, trials=1, timing=TimingConfig.quick(),
                    limits=Limits(timeout_s=120))  # fmt: skip


def test_onnxruntime_is_timed_on_the_device_by_ekb_farm_server(farm):
    import onnxruntime

    farm.wait_devices({KEY_A: 2})
    r = _judge(TINY, "host-cpu-rpc", farm)
    assert r.correct and r.timing_status == "measured", (r.reason, r.detail)
    assert set(r.baselines) == {"tvm-default", "onnxruntime"} and set(r.speedups) == set(r.baselines)
    assert r.extra["onnxruntime_on"] == "device" and r.extra["onnxruntime_version"] == onnxruntime.__version__
    assert "not_measured" not in r.extra
    assert r.extra["onnxruntime_timer"] == {
        "timer": "python-iobinding",
        "on": "device",
    }  # no compiler assumed
    ort = r.baselines["onnxruntime"]  # the same interleaved protocol as the candidate's
    assert ort.median > 0 and ort.count == r.runtime.count == r.baselines["tvm-default"].count
    server = next(n for n in ("a1", "a2") if farm.servers(n) == {r.extra["device"]["server"]})
    assert "ekb.ort.load: onnxruntime" in farm.log(server)  # the session was the device's
    import platform

    import tvm

    info = r.extra["device"]["info"]  # what the device said about itself, kept with the record
    assert info["tvm"] == tvm.__version__ and info["machine"] == platform.machine()
    assert info["onnxruntime"] == onnxruntime.__version__ and info["cpus"] >= 1


@pytest.mark.parametrize(
    "backend, reason",
    [
        ("ekb-rpc-plain", "the device's RPC server has no EKB functions: start it with `ekb farm server`"),
        ("ekb-rpc-noort", "onnxruntime is not installed on the device"),
    ],
)
def test_a_device_that_cannot_run_onnxruntime_still_judges_the_candidate(farm, backend, reason):
    farm.wait_devices({KEY_PLAIN: 1, KEY_NOORT: 1})
    r = _judge(TINY, backend, farm)
    assert r.correct and r.timing_status == "measured", (r.reason, r.detail)
    assert set(r.baselines) == set(r.speedups) == {"tvm-default"}
    assert r.extra["not_measured"] == {"onnxruntime": reason} and "onnxruntime_on" not in r.extra
    info = r.extra["device"].get("info", {})
    assert info.get("onnxruntime", "") == "" and ("tvm" in info) == (backend == "ekb-rpc-noort")


def test_a_device_with_another_tvm_version_is_infra():
    import tvm

    from edgekernelbench.backends.base import DeviceFailure
    from edgekernelbench.backends.rpc import check_tvm_version

    check_tvm_version({}, "plain")  # a plain rpc_server says nothing: no check
    check_tvm_version({"tvm": tvm.__version__}, "same")
    major, minor = tvm.__version__.split(".")[:2]
    other = f"{major}.{int(minor) - 1}.0"
    with pytest.raises(DeviceFailure, match=f"runs TVM {other}, this machine") as e:
        check_tvm_version({"tvm": other}, "rpi5 at 10.0.0.2:9090")
    assert e.value.reason == "infra" and not e.value.retry


def test_baseline_measures_onnxruntime_on_the_device_where_it_can(farm, tmp_path):
    from edgekernelbench.store import RunStore

    farm.wait_devices({KEY_A: 2, KEY_PLAIN: 1})
    base = ["baseline", "--problem", L1, "--tracker", farm.tracker, "--quick", "--out"]
    p = ekb(*base, tmp_path / "a", "--backend", "host-cpu-rpc", check=True)
    assert "onnxruntime not measured" not in p.stderr, p.stderr
    assert "timer floors" in p.stdout and "run_with_iobinding, I/O bound on the device" in p.stdout, p.stdout
    with RunStore(tmp_path / "a") as store:
        rows = {k[2]: v for k, v in store.baselines("host-cpu-rpc").items() if k[0] == L1}
    assert set(rows) == {"reference", "tvm-default", "onnxruntime"}
    assert rows["onnxruntime"]["extra"]["on"] == "device" and rows["onnxruntime"]["timing"]["median"] > 0

    p = ekb(*base, tmp_path / "p", "--backend", "ekb-rpc-plain", check=True)
    assert "onnxruntime not measured on the device: the device's RPC server has no EKB functions" in p.stderr
    with RunStore(tmp_path / "p") as store:
        first = {k[2]: v["created"] for k, v in store.baselines("ekb-rpc-plain").items() if k[0] == L1}
    assert set(first) == {"reference", "tvm-default"}
    p = ekb(*base, tmp_path / "p", "--backend", "ekb-rpc-plain", check=True)  # nothing more to measure
    assert "no EKB functions" in p.stderr, p.stderr
    with RunStore(tmp_path / "p") as store:
        again = {k[2]: v["created"] for k, v in store.baselines("ekb-rpc-plain").items() if k[0] == L1}
    assert again == first


def test_the_device_side_is_one_standalone_file(tmp_path):
    """farm_server.py runs on a board as a copied single file: it imports nothing of edgekernelbench
    (here: no site-packages at all, so only the standard library) until it starts TVM's server."""
    import shutil

    from edgekernelbench.backends import farm_server

    copy = tmp_path / "farm_server.py"
    shutil.copy(farm_server.__file__, copy)
    env = {"PATH": os.environ.get("PATH", "")}
    p = subprocess.run([sys.executable, "-S", str(copy), "--help"], capture_output=True, text=True, env=env)
    assert p.returncode == 0 and "ONNX Runtime" in p.stdout, p.stderr


def _serving(proc: subprocess.Popen) -> bool:
    """Whether an `ekb farm server` has a session in progress (rpc_server forks one process per session)."""
    import psutil

    try:
        return len(psutil.Process(proc.pid).children(recursive=True)) > 2  # rpc_server, popen_worker
    except psutil.NoSuchProcess:
        return False


def test_a_device_killed_mid_run_loses_no_record(farm, tmp_path):
    n = 6
    farm.wait_devices({KEY_A: 2})
    write_candidates(tmp_path, {k: CORRECT for k in range(n)})
    args = ["eval", str(tmp_path), "--backend", "host-cpu-rpc", "--tracker", farm.tracker, "--trials", "5"]
    cmd = [sys.executable, "-m", "edgekernelbench.cli", *args, "--quick"]
    log = open(tmp_path / "eval.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    db = tmp_path / "results.db"
    killed = None
    try:
        deadline = time.time() + 120
        while time.time() < deadline and killed is None and proc.poll() is None:
            time.sleep(0.05)
            done = 0
            if db.exists():
                with contextlib.suppress(sqlite3.OperationalError), sqlite3.connect(db) as con:
                    done = con.execute("select count(*) from results").fetchone()[0]
            if done >= 1:
                busy = [name for name in ("a1", "a2") if _serving(farm.procs[name])]
                if busy:
                    killed = busy[0]
                    farm.kill(killed)  # the whole server, with the session it was serving
        assert killed, "no server was serving while the run was in progress"
        proc.wait(timeout=240)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    first = records(tmp_path)
    before = {k: r.eval_seconds for k, r in first.items() if r.correct}
    if len(before) < n:  # an item whose every device was lost is "infra": the next eval re-runs it
        bad = {k: (r.reason, r.detail) for k, r in first.items() if not r.correct}
        assert all(reason == "infra" for reason, _ in bad.values()), bad
        p = ekb("eval", tmp_path, "--backend", "host-cpu-rpc", "--tracker", farm.tracker, "--quick")
        assert p.returncode == 0, p.stdout + p.stderr
    final = records(tmp_path)
    assert sorted(k[1] for k in final) == list(range(n))  # no record lost or duplicated
    assert all(r.correct for r in final.values()), {k: (r.reason, r.detail) for k, r in final.items()}
    assert all(final[k].eval_seconds == s for k, s in before.items())  # finished records kept as they were
    servers = {r.extra["device"]["server"] for r in final.values()}
    assert servers <= farm.servers("a1", "a2")
    retried = [r for r in final.values() if r.extra.get("devices_lost")]
    print(f"killed {killed}; items retried on another device: {len(retried)}")


def test_a_deployed_model_is_verified_and_timed_on_a_farm_device(farm, tmp_path):
    """`ekb deploy --backend host-cpu-rpc --tracker`: the library is built here, uploaded to a device of the
    profile's key, run there against the oracle and timed there (with its latency percentiles); `ekb deploy
    --verify DIR --tracker` again."""
    out = tmp_path / "tiny"
    args = ["deploy", TINY, "--backend", KEY_A, "--out", str(out), "--rules", "--no-db", "--quick"]
    p = ekb(*args, "--tracker", farm.tracker)
    assert p.returncode == 0, p.stdout + p.stderr
    report = json.loads((out / "verify.json").read_text())
    assert report["verified"] and report["backend"] == KEY_A, report
    assert report["where"].startswith(f"device '{KEY_A}' at 127.0.0.1:"), report["where"]
    timing = report["timing"]
    assert timing["status"] == "measured" and "tvm-default" in timing["speedups"], timing
    (lat,) = report["latency"]  # the device's: upload and load, first run, single runs timed on the device
    assert lat["runner"].startswith(f"device '{KEY_A}'") and lat["runs"] == 200
    assert 0 < lat["p50_s"] <= lat["p90_s"] <= lat["p99_s"] and lat["load_s"] > 0 and lat["first_s"] > 0
    (out / "verify.json").unlink()
    p = ekb("deploy", "--verify", str(out), "--tracker", farm.tracker, "--quick")
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads((out / "verify.json").read_text())["verified"]
