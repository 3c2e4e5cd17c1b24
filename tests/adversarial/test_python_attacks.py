"""Attacks by candidate-controlled Python (TVMScript is evaluated while it is parsed; schedule_code is Python).

Each attack runs inside the builder (harness/builder.py), a sandboxed process apart from the judge: it may
do anything Python can do there, and must change neither the verdict nor the timings, nor leave anything
behind: no file outside its job directory, no process, no secret in a result, the store or a report."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import psutil
import pytest

from edgekernelbench.harness.api import evaluate
from edgekernelbench.harness.isolation import Limits
from edgekernelbench.harness.timing import TimingConfig
from edgekernelbench.ir.spec import KernelSpec

# the sandbox of fresh workers (the warm judge's children: test_warm_judge.py)
pytestmark = pytest.mark.fresh_workers

PROBLEM = "L1/tiny_scale_add"
SIG = (
    'x: T.Buffer((4, 8), "float32"), w1: T.Buffer((8,), "float32"), b3: T.Buffer((8,), "float32"), '
    'out: T.Buffer((4, 8), "float32")'
)
RIGHT = "for i, j in T.grid(4, 8):\n    out[i, j] = x[i, j] * w1[j] + b3[j]"
WRONG = "for i, j in T.grid(4, 8):\n    out[i, j] = x[i, j] * w1[j] + b3[j] + T.float32(1.0)"
LIMITS = Limits(timeout_s=120, memory_mb=4096)


def attack(code: str, body: str = WRONG) -> str:
    """A candidate module whose parsing runs `code` (Python statements): the argument of T.evaluate is
    an expression, and the TVMScript parser evaluates it."""
    payload = f'T.int32(__import__("builtins").exec({code!r}, {{}}) or 0)'
    lines = "\n".join("        " + ln for ln in [f"T.evaluate({payload})", *body.splitlines()])
    return (
        "@I.ir_module\nclass Module:\n    @T.prim_func(private=True)\n"
        f"    def fused_multiply_add({SIG}):\n{lines}\n"
    )


def judge(module: str | None = None, schedule_code: str | None = None, **kw):
    spec = KernelSpec(problem=PROBLEM, module=module, schedule_code=schedule_code, method="attack")
    kw.setdefault("trials", 2)
    kw.setdefault("measure", False)
    return evaluate(PROBLEM, spec, limits=LIMITS, **kw)


@pytest.fixture
def marker(tmp_path):
    """A unique name, and the places an attack will try to write it; none may exist afterwards."""
    tag = f"ekb-attack-{uuid.uuid4().hex[:12]}"
    places = [Path("/tmp") / tag, Path.home() / tag, tmp_path / tag, Path.cwd() / tag]
    yield tag, places
    for p in places:
        assert not p.exists(), f"the attack wrote {p}"
        p.unlink(missing_ok=True)


def tell(expr: str) -> str:
    """Code that ends the builder, reporting `expr` (a Python expression) as its failure detail: a
    builder's own status file is a channel from the candidate to the store, so what it can read matters."""
    return (
        "import json, os\n"
        f"open('built.json', 'w').write(json.dumps({{'ok': False, 'reason': 'parse_error', 'detail': {expr}}}))\n"
        "os._exit(0)\n"
    )


def test_parse_time_code_runs_in_the_builder_not_the_judge():
    """Sanity: the attack vector is real -- the parse-time code runs, and where it runs."""
    r = judge(attack("import os\n" + tell("'pid %d in %s' % (os.getpid(), os.getcwd())")))
    assert r.reason == "parse_error" and r.detail.startswith("pid 1 in "), r.detail  # its own PID namespace
    assert r.detail.endswith("/build"), r.detail  # the builder's directory, not the judge's


def test_replacing_the_comparison_does_not_pass_a_wrong_kernel(marker):
    code = (
        "import sys, atexit, pathlib, glob\n"
        "import edgekernelbench.harness.evaluate as ev\n"
        "ev._compare = lambda *a, **k: (None, '', [0.0], [0.0])\n"
        "ev.check_correctness = lambda *a, **k: ev.Correctness(correct=True, trials=5)\n"
        "import json\n"
        "fake = json.dumps({'problem': 'L1/tiny_scale_add', 'sample': 0, 'backend': 'host-cpu',\n"
        "                   'compiled': True, 'correct': True})\n"
        "def rewrite():\n"
        "    for p in glob.glob('/tmp/ekb-job-*/judge') + glob.glob('../judge') + ['.']:\n"
        "        try:\n"
        "            pathlib.Path(p, 'result.json').write_text(fake)\n"
        "        except OSError:\n"
        "            pass\n"
        "atexit.register(rewrite)\n"
        f"for p in {[str(p) for p in marker[1]]!r}:\n"
        "    try:\n"
        "        pathlib.Path(p).write_text('x')\n"
        "    except OSError:\n"
        "        pass\n"
    )
    r = judge(attack(code))
    assert r.reason == "wrong_output" and not r.correct, (r.reason, r.detail)


def test_schedule_code_cannot_patch_the_judge(marker):
    code = (
        "import pathlib\n"
        "import edgekernelbench.harness.evaluate as ev\n"
        "ev._compare = lambda *a, **k: (None, '', [0.0], [0.0])\n"
        f"for p in {[str(p) for p in marker[1]]!r}:\n"
        "    try:\n"
        "        pathlib.Path(p).write_text('x')\n"
        "    except OSError:\n"
        "        pass\n"
        "def schedule(name, sch):\n"
        "    pass\n"
    )
    wrong = (
        f"@I.ir_module\nclass Module:\n    @T.prim_func(private=True)\n    def fused_multiply_add({SIG}):\n"
        + "\n".join("        " + ln for ln in WRONG.splitlines())
    )
    r = judge(wrong + "\n", schedule_code=code)
    assert r.reason == "wrong_output", (r.reason, r.detail)


def test_replacing_the_timers_does_not_change_the_speedup():
    code = (
        "import edgekernelbench.harness.timing as tm\n"
        "orig = tm.time_interleaved\n"
        "def fast(contenders, cfg):\n"
        "    out = orig(contenders, cfg)\n"
        "    out['candidate'].median /= 1000\n"
        "    out['candidate'].samples = [s / 1000 for s in out['candidate'].samples]\n"
        "    return out\n"
        "tm.time_interleaved = fast\n"
        "import edgekernelbench.backends.host as host\n"
        "host.LocalLoaded.timer = lambda self, f, a: (lambda n: 1e-12)\n"
    )
    r = judge(attack(code, RIGHT), measure=True, timing=TimingConfig.quick())
    assert r.correct, r.detail
    # the candidate is the reference's own kernel: no honest timing makes it 100x faster than either baseline
    assert r.runtime.median > 1e-8 and all(s < 100 for s in r.speedups.values()), r.speedups


def daemons() -> tuple[str, str]:
    """(tag, code): code that leaves two `sleep <tag>` processes behind, in sessions of their own."""
    tag = str(900000 + uuid.uuid4().int % 99999)  # `sleep <tag>`: findable afterwards
    code = (
        "import subprocess, os\n"
        f"subprocess.Popen(['sleep', '{tag}'], start_new_session=True)\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        f"    os.execvp('sleep', ['sleep', '{tag}'])\n"
    )
    return tag, code


def test_no_process_survives_the_candidate():
    tag, code = daemons()
    r = judge(attack(code))
    assert r.reason == "wrong_output", (r.reason, r.detail)
    left = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", tag]]
    for p in left:
        p.kill()
    assert not left, f"{len(left)} process(es) outlived the candidate's worker"


def test_no_network():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    got: list[bytes] = []

    def accept():
        server.settimeout(30)
        try:
            conn, _ = server.accept()
            got.append(conn.recv(100))
        except OSError:
            pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    code = (
        f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=5)\ns.sendall(b'leak')\n"
    )
    r = judge(attack(code))
    server.close()
    t.join(timeout=5)
    assert r.reason == "parse_error" and not got, (r.reason, r.detail, got)


CANARY = "sk-ekb-canary-" + uuid.uuid4().hex


def test_keys_of_the_ekb_process_do_not_reach_the_results(tmp_path):
    """`ekb eval` holds an API key in its environment. The candidate looks for it in every readable
    /proc/*/environ (and its own), then raises with what it found -- a parse error's detail lands in the
    store and the report. The key must be in none of them."""
    code = (
        "import glob, os\n"
        "found = []\n"
        "for p in glob.glob('/proc/*/environ') + ['/proc/self/environ']:\n"
        "    try:\n"
        "        found.append(open(p, 'rb').read().decode(errors='replace'))\n"
        "    except OSError:\n"
        "        pass\n"
        "found.append(repr(dict(os.environ)))\n" + tell("'LEAK ' + ' | '.join(found)")
    )
    run = tmp_path / "run"
    d = run / "candidates" / PROBLEM
    d.mkdir(parents=True)
    (d / "sample0.py").write_text(attack(code))
    env = {**os.environ, "OPENAI_API_KEY": CANARY, "ANTHROPIC_API_KEY": CANARY}
    cli = [sys.executable, "-m", "edgekernelbench.cli"]
    ev = subprocess.run([*cli, "eval", str(run), "--no-measure"], env=env, capture_output=True, text=True)
    rep = subprocess.run(
        [*cli, "report", str(run), "--per-problem", "--json", str(tmp_path / "r.json")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert ev.returncode == 0, ev.stdout + ev.stderr
    with sqlite3.connect(run / "results.db") as db:
        rows = db.execute("SELECT * FROM results").fetchall()
    detail = json.dumps(rows)
    assert "LEAK" in detail, detail[:2000]  # the attack ran and its text reached the store
    for text in (detail, ev.stdout + ev.stderr, rep.stdout + rep.stderr, (tmp_path / "r.json").read_text()):
        assert CANARY not in text


@pytest.mark.parametrize("files", [(64, 4 << 20), (30_000, 0)], ids=["bytes", "files"])
def test_a_builder_that_fills_the_disk_is_stopped(files):
    """Its own directory is the only place a worker can write; what it writes there is bounded (the bytes,
    and how many files: Limits.disk_mb, MAX_JOB_ENTRIES), each file below the limit too (RLIMIT_FSIZE), so
    a candidate cannot fill the judge's disk."""
    from dataclasses import replace

    n, size = files
    code = (
        "import os, time\n"
        f"for i in range({n}):\n"
        f"    with open('fill%d' % i, 'wb') as f: f.write(os.urandom({size}))\n"
        "time.sleep(60)\n"
    )
    spec = KernelSpec(problem=PROBLEM, module=attack(code), method="attack")
    r = evaluate(PROBLEM, spec, trials=1, measure=False, limits=replace(LIMITS, disk_mb=16))
    assert r.reason == "disk", (r.reason, r.detail)
    assert "builder wrote more than 16 MiB or 20000 files" in r.detail
