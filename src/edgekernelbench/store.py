"""The run store: every result of a run, in SQLite, inside the run directory.

``run_dir/results.db`` holds three tables::

    results(problem, sample, backend, status, record JSON, created)   key (problem, sample, backend)
    baselines(problem, backend, baseline, record JSON, created)        key (problem, backend, baseline)
    meta(key, value JSON)
    generations(problem, sample, record JSON, created)                  key (problem, sample)
      (one record per LLM-generated sample: model, template + hash, tokens, cost, error; llm/generate.py)
    agent_steps(problem, method, step, record JSON, created)           key (problem, method, step)
      (an agent's trajectory: kernel, layer, proposal, verdict, budget used; agents/)
    agent_runs(problem, method, record JSON, created)                  key (problem, method)

The database runs in WAL mode with ``synchronous=NORMAL`` and every write is its own committed
transaction, so a process killed mid-run (even by SIGKILL) loses at most the item it was
writing; the store reopens with everything committed before. Several processes may write the
same store (the busy timeout makes them wait for each other). Records are only ever replaced by
an explicit upsert of the same key; nothing is deleted.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import platform
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .errors import RunDirError
from .records import Result

__all__ = ["DB_NAME", "ENV_KEY", "SCHEMA_VERSION", "RunStore", "host_environment", "result_status"]

DB_NAME = "results.db"
SCHEMA_VERSION = 1
_SCHEMA_KEY = "schema_version"
_SQLITE_MAGIC = b"SQLite format 3\x00"

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS results (
        problem TEXT NOT NULL,
        sample INTEGER NOT NULL,
        backend TEXT NOT NULL,
        status TEXT NOT NULL,
        record TEXT NOT NULL,
        created REAL NOT NULL,
        PRIMARY KEY (problem, sample, backend)
    )""",
    """CREATE TABLE IF NOT EXISTS baselines (
        problem TEXT NOT NULL,
        backend TEXT NOT NULL,
        baseline TEXT NOT NULL,
        record TEXT NOT NULL,
        created REAL NOT NULL,
        PRIMARY KEY (problem, backend, baseline)
    )""",
    """CREATE TABLE IF NOT EXISTS meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS results_backend ON results (backend)",
    """CREATE TABLE IF NOT EXISTS generations (
        problem TEXT NOT NULL,
        sample INTEGER NOT NULL,
        record TEXT NOT NULL,
        created REAL NOT NULL,
        PRIMARY KEY (problem, sample)
    )""",
    """CREATE TABLE IF NOT EXISTS agent_steps (
        problem TEXT NOT NULL,
        method TEXT NOT NULL,
        step INTEGER NOT NULL,
        record TEXT NOT NULL,
        created REAL NOT NULL,
        PRIMARY KEY (problem, method, step)
    )""",
    """CREATE TABLE IF NOT EXISTS agent_runs (
        problem TEXT NOT NULL,
        method TEXT NOT NULL,
        record TEXT NOT NULL,
        created REAL NOT NULL,
        PRIMARY KEY (problem, method)
    )""",
)


ENV_KEY = "environments"  # meta: the machines and software a run was evaluated with (record_environment)
_SEEN = ("first_seen", "last_seen")
# distributions whose version a run records; the first one installed of each group
_VERSIONED = {
    "edgekernelbench": ("edgekernelbench",),
    "tvm": ("apache-tvm", "tvm", "mlc-ai-nightly"),
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino"),
    "onnx": ("onnx",),
}


def _cpu_model() -> str:
    """The CPU's name from /proc/cpuinfo ("model name", or an ARM board's "Hardware" / "Model"), else
    platform.processor(), else ""."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    for key in ("model name", "Hardware", "Model", "cpu model", "uarch"):
        for line in text.splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() == key and value.strip():
                return value.strip()
    return platform.processor()


def _version(dists: tuple[str, ...]) -> str | None:
    for d in dists:
        try:
            return importlib.metadata.version(d)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def host_environment() -> dict:
    """The machine this process runs on, as a run records it: host name, OS, architecture, CPU model and
    logical CPUs, Python, and the versions of EdgeKernelBench, TVM, ONNX Runtime and onnx (from the
    package metadata: nothing is imported)."""
    return {
        "host": platform.node(),
        "system": platform.platform(),
        "machine": platform.machine(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        **{name: _version(dists) for name, dists in _VERSIONED.items()},
    }


def result_status(result: Result) -> str:
    """The status column: "correct", else the failure reason, else "incorrect"."""
    if result.correct:
        return "correct"
    return result.reason or "incorrect"


def _json_default(o: Any) -> Any:
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    if hasattr(o, "tolist"):  # numpy arrays and scalars, without importing numpy
        return o.tolist()
    if isinstance(o, set | frozenset):
        return sorted(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"cannot store a {type(o).__name__} in the run store: {o!r}")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, default=_json_default)


class RunStore:
    """The SQLite store of one run directory. Use as a context manager or call `close()`."""

    def __init__(self, run_dir: Path | str, *, timeout: float = 60.0):
        self.run_dir = Path(run_dir)
        if self.run_dir.exists() and not self.run_dir.is_dir():
            raise RunDirError(f"run directory {self.run_dir} exists and is not a directory")
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RunDirError(f"cannot create run directory {self.run_dir}: {e}") from e
        self.path = self.run_dir / DB_NAME
        self._check_header()
        self._conn: sqlite3.Connection | None = None
        try:
            self._conn = sqlite3.connect(str(self.path), timeout=timeout, isolation_level=None)
            self._setup(timeout)
        except sqlite3.DatabaseError as e:
            self.close()
            raise RunDirError(f"{self.path} is not a usable EdgeKernelBench run store: {e}") from e
        except BaseException:
            self.close()
            raise

    # --- opening -------------------------------------------------------------------------------

    def _check_header(self) -> None:
        if not self.path.exists():
            return
        if not self.path.is_file():
            raise RunDirError(f"{self.path} is not a file")
        with open(self.path, "rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
        if head and head != _SQLITE_MAGIC:
            raise RunDirError(
                f"{self.path} is not an SQLite database; it is not a run store this version can open "
                "(move it away or choose another run directory)"
            )

    def _setup(self, timeout: float) -> None:
        c = self._db
        c.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        mode = c.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise RunDirError(f"{self.path}: cannot switch the database to WAL mode (got {mode!r})")
        c.execute("PRAGMA synchronous = NORMAL")
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
        if tables and "meta" not in tables:
            raise RunDirError(
                f"{self.path} is an SQLite database but not an EdgeKernelBench run store "
                f"(tables: {', '.join(sorted(tables))})"
            )
        if "meta" in tables:
            self._check_version()
        c.execute("BEGIN IMMEDIATE")
        try:
            for stmt in _SCHEMA:
                c.execute(stmt)
            c.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
                (_SCHEMA_KEY, json.dumps(SCHEMA_VERSION)),
            )
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        self._check_version()

    def _check_version(self) -> None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (_SCHEMA_KEY,)).fetchone()
        if row is None:
            return  # created just below (an empty meta table from an interrupted first open)
        try:
            version = json.loads(row[0])
        except ValueError:
            version = row[0]
        if version != SCHEMA_VERSION or isinstance(version, bool):
            newer = isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION
            raise RunDirError(
                f"{self.path} has run-store schema version {version!r}; this EdgeKernelBench reads "
                f"version {SCHEMA_VERSION}"
                + (" (it was written by a newer EdgeKernelBench; upgrade to read it)" if newer else "")
            )

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RunDirError(f"the run store {self.path} is closed")
        return self._conn

    # --- results -------------------------------------------------------------------------------

    def put(self, result: Result) -> None:
        """Inserts or replaces the result for (problem, sample, backend); committed on return."""
        self._db.execute(
            "INSERT INTO results (problem, sample, backend, status, record, created) "
            "VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (problem, sample, backend) DO UPDATE SET "
            "status = excluded.status, record = excluded.record, created = excluded.created",
            (
                result.problem,
                int(result.sample),
                result.backend,
                result_status(result),
                _dumps(result.to_dict()),
                time.time(),
            ),
        )

    def has(self, problem: str, sample: int, backend: str) -> bool:
        row = self._db.execute(
            "SELECT 1 FROM results WHERE problem = ? AND sample = ? AND backend = ?",
            (problem, int(sample), backend),
        ).fetchone()
        return row is not None

    def done_keys(self, backend: str) -> set[tuple[str, int]]:
        """The (problem, sample) pairs already stored for `backend` (what a resumed run skips)."""
        rows = self._db.execute("SELECT problem, sample FROM results WHERE backend = ?", (backend,))
        return {(p, s) for p, s in rows}

    def results(self, backend: str | None = None, problems: Iterable[str] | None = None) -> list[Result]:
        """Stored results, ordered by (backend, problem, sample), optionally filtered."""
        sql = "SELECT record FROM results"
        args: tuple = ()
        if backend is not None:
            sql += " WHERE backend = ?"
            args = (backend,)
        sql += " ORDER BY backend, problem, sample"
        wanted = set(problems) if problems is not None else None
        out = []
        for (rec,) in self._db.execute(sql, args):
            r = Result.from_dict(json.loads(rec))
            if wanted is None or r.problem in wanted:
                out.append(r)
        return out

    def statuses(self, backend: str | None = None) -> dict[tuple[str, int, str], str]:
        """(problem, sample, backend) -> status, without decoding the records."""
        sql = "SELECT problem, sample, backend, status FROM results"
        rows = (
            self._db.execute(sql + " WHERE backend = ?", (backend,))
            if backend is not None
            else self._db.execute(sql)
        )
        return {(p, s, b): st for p, s, b, st in rows}

    # --- baselines -----------------------------------------------------------------------------

    def put_baseline(
        self, problem: str, backend: str, baseline: str, timing: Any, extra: dict | None = None
    ) -> None:
        """Inserts or replaces one baseline measurement. `timing` is a Timing or its dict."""
        if dataclasses.is_dataclass(timing) and not isinstance(timing, type):
            timing = dataclasses.asdict(timing)
        record = {"timing": timing, "extra": dict(extra or {})}
        self._db.execute(
            "INSERT INTO baselines (problem, backend, baseline, record, created) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (problem, backend, baseline) DO UPDATE SET "
            "record = excluded.record, created = excluded.created",
            (problem, backend, baseline, _dumps(record), time.time()),
        )

    def baselines(self, backend: str | None = None) -> dict[tuple[str, str, str], dict]:
        """(problem, backend, baseline) -> {"timing": dict | None, "extra": dict, "created": float}."""
        sql = "SELECT problem, backend, baseline, record, created FROM baselines"
        rows = (
            self._db.execute(sql + " WHERE backend = ? ORDER BY problem, baseline", (backend,))
            if backend is not None
            else self._db.execute(sql + " ORDER BY backend, problem, baseline")
        )
        out = {}
        for p, b, bl, rec, created in rows:
            d = json.loads(rec)
            out[(p, b, bl)] = {"timing": d.get("timing"), "extra": d.get("extra") or {}, "created": created}
        return out

    def get_baseline(self, problem: str, backend: str, baseline: str) -> dict | None:
        """One baseline record (as in `baselines()`), or None."""
        row = self._db.execute(
            "SELECT record, created FROM baselines WHERE problem = ? AND backend = ? AND baseline = ?",
            (problem, backend, baseline),
        ).fetchone()
        if row is None:
            return None
        d = json.loads(row[0])
        return {"timing": d.get("timing"), "extra": d.get("extra") or {}, "created": row[1]}

    # --- generations ---------------------------------------------------------------------------

    def put_generation(self, problem: str, sample: int, record: dict) -> None:
        """Inserts or replaces the generation record of (problem, sample)."""
        self._db.execute(
            "INSERT INTO generations (problem, sample, record, created) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (problem, sample) DO UPDATE SET "
            "record = excluded.record, created = excluded.created",
            (problem, int(sample), _dumps(record), time.time()),
        )

    def generations(self) -> list[dict]:
        """Every generation record, ordered by (problem, sample)."""
        rows = self._db.execute("SELECT record FROM generations ORDER BY problem, sample")
        return [json.loads(r) for (r,) in rows]

    # --- meta ----------------------------------------------------------------------------------

    def put_agent_step(self, problem: str, method: str, step: int, record: dict) -> None:
        """One step of an agent's trajectory (agents/): kernel, layer, proposal, verdict, budget used."""
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO agent_steps (problem, method, step, record, created) "
                "VALUES (?, ?, ?, ?, ?)",
                (problem, method, int(step), _dumps(record), time.time()),
            )

    def agent_steps(self, problem: str | None = None, method: str | None = None) -> list[dict]:
        rows = self._db.execute(
            "SELECT problem, method, step, record FROM agent_steps ORDER BY problem, method, step"
        ).fetchall()
        return [
            {"problem": p, "method": m, "step": k, **json.loads(r)}
            for p, m, k, r in rows
            if (problem is None or p == problem) and (method is None or m == method)
        ]

    def clear_agent_steps(self, problem: str, method: str) -> None:
        """An interrupted (problem, method) starts over: its partial trajectory goes."""
        with self._db:
            self._db.execute("DELETE FROM agent_steps WHERE problem = ? AND method = ?", (problem, method))

    def put_agent_run(self, problem: str, method: str, record: dict) -> None:
        """How one method did on one problem: budget used (calls, evaluations, tokens, cost, wall time),
        why it stopped, its final sample."""
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO agent_runs (problem, method, record, created) VALUES (?, ?, ?, ?)",
                (problem, method, _dumps(record), time.time()),
            )

    def agent_runs(self) -> dict[tuple[str, str], dict]:
        rows = self._db.execute("SELECT problem, method, record FROM agent_runs").fetchall()
        return {(p, m): json.loads(r) for p, m, r in rows}

    def set_meta(self, key: str, value: Any) -> None:
        """Stores a JSON-serializable value under `key` (replacing the previous value)."""
        if key == _SCHEMA_KEY:
            raise ValueError(f"{_SCHEMA_KEY!r} is managed by the run store")
        self._db.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, _dumps(value)),
        )

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else json.loads(row[0])

    def meta_keys(self, prefix: str = "") -> list[str]:
        """The meta keys that start with `prefix`, sorted ("peak:" -> every backend's cached peaks)."""
        rows = self._db.execute("SELECT key FROM meta ORDER BY key").fetchall()
        return [k for (k,) in rows if k.startswith(prefix)]

    def record_environment(self, env: dict | None = None) -> None:
        """Notes the machine a command evaluates on (`host_environment()` by default) in meta
        "environments": one entry per distinct machine and software, with the first and last time seen
        (a run resumed elsewhere, or after an upgrade, lists both)."""
        env = dict(host_environment() if env is None else env)
        now = time.time()
        seen = self.get_meta(ENV_KEY, [])
        for entry in seen:
            if {k: v for k, v in entry.items() if k not in _SEEN} == env:
                entry["last_seen"] = now
                break
        else:
            seen.append({**env, "first_seen": now, "last_seen": now})
        self.set_meta(ENV_KEY, seen)

    def created_range(self) -> tuple[float, float] | None:
        """(first, last) time a result was stored (seconds since the epoch); None without results."""
        lo, hi = self._db.execute("SELECT MIN(created), MAX(created) FROM results").fetchone()
        return None if lo is None else (float(lo), float(hi))

    # --- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        """Closes the connection (idempotent)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    @property
    def closed(self) -> bool:
        return self._conn is None

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunStore({str(self.run_dir)!r})"
