"""The run store: every result of a run, in SQLite, inside the run directory.

``run_dir/results.db`` holds six tables (every one also has a ``mac`` column, see below)::

    results(problem, sample, backend, status, record JSON, created)   key (problem, sample, backend)
    baselines(problem, backend, baseline, record JSON, created)        key (problem, backend, baseline)
    meta(key, value JSON)                                               key (key)
    generations(problem, sample, record JSON, created)                  key (problem, sample)
      (one record per LLM-generated sample: model, template + hash, tokens, cost, error; llm/generate.py)
    agent_steps(problem, method, step, record JSON, created)           key (problem, method, step)
      (an agent's trajectory: kernel, layer, proposal, verdict, budget used; agents/)
    agent_runs(problem, method, record JSON, created)                  key (problem, method)

The database runs in WAL mode with ``synchronous=NORMAL`` and every write is its own committed
transaction, so a process killed mid-run (even by SIGKILL) loses at most the item it was
writing; the store reopens with everything committed before. Several processes may write the
same store (the busy timeout makes them wait for each other). Records are only ever replaced by
an explicit upsert of the same key; nothing is deleted but an interrupted agent's partial trajectory.

**Authentication.** Whoever works in the run directory (a coding agent, say) can write results.db, so a
row is believed only when it carries a valid ``mac``: HMAC-SHA256, under a key kept outside the run
directory (`store_key_path`: $EKB_STORE_KEY, else $XDG_CONFIG_HOME or ~/.config, then
edgekernelbench/store.key; 32 random bytes created on first use), over the canonical bytes of the row
(`row_mac`: the table's name, its key columns and every other column, as compact JSON). Every write
sets it. Every read returns only the rows whose MAC verifies unless called with
``trust_unauthenticated=True``; `unauthenticated()` lists the keys of the rows that fail. A row from a
version-1 store (no MAC), one edited or inserted by hand, and one written under another key (another
machine's) are all the same: unauthenticated.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import hmac
import importlib.metadata
import json
import os
import platform
import secrets
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .errors import EKBError, RunDirError
from .machine import cpu_model
from .records import Result
from .rundir import DB_NAME

__all__ = [
    "DB_NAME",
    "ENV_KEY",
    "KEY_ENV",
    "SCHEMA_VERSION",
    "TABLES",
    "RunStore",
    "StoreKeyError",
    "host_environment",
    "load_store_key",
    "result_status",
    "row_mac",
    "store_key_path",
]

# 1: no MACs; 2: every row carries `mac` (a version-1 store is migrated in place, its rows unauthenticated)
SCHEMA_VERSION = 2
_SCHEMA_KEY = "schema_version"
_MIGRATES_FROM = (1,)  # versions opened and migrated in place
_SQLITE_MAGIC = b"SQLite format 3\x00"

# table -> (key columns, the other columns): what a row's MAC covers, in this order
TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "results": (("problem", "sample", "backend"), ("status", "record", "created")),
    "baselines": (("problem", "backend", "baseline"), ("record", "created")),
    "meta": (("key",), ("value",)),
    "generations": (("problem", "sample"), ("record", "created")),
    "agent_steps": (("problem", "method", "step"), ("record", "created")),
    "agent_runs": (("problem", "method"), ("record", "created")),
}

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS results (
        problem TEXT NOT NULL,
        sample INTEGER NOT NULL,
        backend TEXT NOT NULL,
        status TEXT NOT NULL,
        record TEXT NOT NULL,
        created REAL NOT NULL,
        mac TEXT,
        PRIMARY KEY (problem, sample, backend)
    )""",
    """CREATE TABLE IF NOT EXISTS baselines (
        problem TEXT NOT NULL,
        backend TEXT NOT NULL,
        baseline TEXT NOT NULL,
        record TEXT NOT NULL,
        created REAL NOT NULL,
        mac TEXT,
        PRIMARY KEY (problem, backend, baseline)
    )""",
    """CREATE TABLE IF NOT EXISTS meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL,
        mac TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS results_backend ON results (backend)",
    """CREATE TABLE IF NOT EXISTS generations (
        problem TEXT NOT NULL,
        sample INTEGER NOT NULL,
        record TEXT NOT NULL,
        created REAL NOT NULL,
        mac TEXT,
        PRIMARY KEY (problem, sample)
    )""",
    """CREATE TABLE IF NOT EXISTS agent_steps (
        problem TEXT NOT NULL,
        method TEXT NOT NULL,
        step INTEGER NOT NULL,
        record TEXT NOT NULL,
        created REAL NOT NULL,
        mac TEXT,
        PRIMARY KEY (problem, method, step)
    )""",
    """CREATE TABLE IF NOT EXISTS agent_runs (
        problem TEXT NOT NULL,
        method TEXT NOT NULL,
        record TEXT NOT NULL,
        created REAL NOT NULL,
        mac TEXT,
        PRIMARY KEY (problem, method)
    )""",
)


# --------------------------------------------------------------------------------------- the key
KEY_ENV = "EKB_STORE_KEY"  # names the key file (tests, or a key shared by the machines of one user)
KEY_BYTES = 32


class StoreKeyError(EKBError):
    """The run-store key cannot be read or created (a file of the wrong size, a directory not writable)."""


def store_key_path() -> Path:
    """Where the key that authenticates run-store rows lives: $EKB_STORE_KEY, else
    $XDG_CONFIG_HOME/edgekernelbench/store.key, else ~/.config/edgekernelbench/store.key. Never inside a
    run directory: whoever writes the run directory must not be able to read it."""
    named = os.environ.get(KEY_ENV)
    if named:
        return Path(named).expanduser()
    config = os.environ.get("XDG_CONFIG_HOME") or ""
    base = Path(config) if os.path.isabs(config) else Path.home() / ".config"
    return base / "edgekernelbench" / "store.key"


def load_store_key(path: Path | None = None) -> bytes:
    """The run-store key at `path` (default `store_key_path()`), created on first use: 32 bytes from the
    OS's random source, mode 0600, written under a temporary name (O_EXCL) and linked into place, so that
    two processes creating it at once end with one key and no reader sees a partial one."""
    path = Path(path) if path is not None else store_key_path()
    for _ in range(100):
        try:
            with open(path, "rb") as f:
                key = f.read(KEY_BYTES + 1)
        except FileNotFoundError:
            _create_key(path)
            continue
        except OSError as e:
            raise StoreKeyError(f"cannot read the run-store key {path}: {e.strerror or e}") from None
        if len(key) == KEY_BYTES:
            return key
        if len(key) > KEY_BYTES:
            break
        time.sleep(0.01)  # a key being written where linking is not supported (see _create_key)
    raise StoreKeyError(
        f"{path} is not a run-store key ({KEY_BYTES} bytes expected); move it away and a new key is made "
        "(the rows the old key authenticated are then unauthenticated)"
    )


_KEY_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _create_key(path: Path) -> None:
    """Writes a new key at `path` unless one is there already (then nothing happens)."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:
        raise StoreKeyError(f"cannot create the run-store key {path}: {e.strerror or e}") from None
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(8)}")
    try:
        _write_new_key(tmp)
        os.link(tmp, path)  # atomic; the first process to link wins, the others read its key
    except FileExistsError:
        pass
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV):
            raise StoreKeyError(f"cannot create the run-store key {path}: {e.strerror or e}") from None
        with contextlib.suppress(FileExistsError):  # a filesystem without hard links: O_EXCL in place
            _write_new_key(path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _write_new_key(path: Path) -> None:
    """Creates `path` (O_EXCL, mode 0600) holding KEY_BYTES random bytes; FileExistsError if it exists."""
    try:
        fd = os.open(path, _KEY_FLAGS, 0o600)
    except FileExistsError:
        raise
    except OSError as e:
        raise StoreKeyError(f"cannot create the run-store key {path}: {e.strerror or e}") from None
    try:
        os.write(fd, secrets.token_bytes(KEY_BYTES))
        os.fsync(fd)
    except OSError as e:
        raise StoreKeyError(f"cannot write the run-store key {path}: {e.strerror or e}") from None
    finally:
        os.close(fd)


def _migrates(version: Any) -> bool:
    return isinstance(version, int) and not isinstance(version, bool) and version in _MIGRATES_FROM


def row_mac(key: bytes, table: str, keys: Sequence[Any], values: Sequence[Any]) -> str:
    """The MAC of one row (hex HMAC-SHA256 under `key`) over the canonical bytes of
    [table, [key columns], [other columns]] (TABLES gives the order) as compact JSON."""
    msg = json.dumps([table, list(keys), list(values)], separators=(",", ":"))  # ASCII: \u escapes
    return hmac.new(key, msg.encode(), hashlib.sha256).hexdigest()


# ------------------------------------------------------------------------------------ environment
ENV_KEY = "environments"  # meta: the machines and software a run was evaluated with (record_environment)
_SEEN = ("first_seen", "last_seen")
# distributions whose version a run records; the first one installed of each group
_VERSIONED = {
    "edgekernelbench": ("edgekernelbench",),
    "tvm": ("apache-tvm", "tvm", "mlc-ai-nightly"),
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino"),
    "onnx": ("onnx",),
}


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
        "cpu": cpu_model(),
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
    """The SQLite store of one run directory. Use as a context manager or call `close()`.

    Every reader takes ``trust_unauthenticated``: False (the default) returns only the rows whose MAC
    verifies under this user's key; True returns every row. `unauthenticated()` lists the others."""

    def __init__(self, run_dir: Path | str, *, timeout: float = 60.0):
        self.run_dir = Path(run_dir)
        if self.run_dir.exists() and not self.run_dir.is_dir():
            raise RunDirError(f"run directory {self.run_dir} exists and is not a directory")
        self._key = load_store_key()
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RunDirError(f"cannot create run directory {self.run_dir}: {e}") from e
        self.path = self.run_dir / DB_NAME
        self._check_header()
        self._conn: sqlite3.Connection | None = None
        try:
            self._conn = sqlite3.connect(str(self.path), timeout=timeout, isolation_level=None)
            # text that is not UTF-8 (written by hand) is read, and fails authentication, instead of
            # making every read of its table raise
            self._conn.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
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
        """WAL mode, then in one transaction (so that two processes opening one store agree): refuse a
        foreign database or a newer schema, migrate a version-1 store (each table gets its `mac` column;
        its rows stay unauthenticated), create what is missing, record the schema version."""
        c = self._db
        c.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        mode = c.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise RunDirError(f"{self.path}: cannot switch the database to WAL mode (got {mode!r})")
        c.execute("PRAGMA synchronous = NORMAL")
        c.execute("BEGIN IMMEDIATE")
        try:
            tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if tables and "meta" not in tables:
                raise RunDirError(
                    f"{self.path} is an SQLite database but not an EdgeKernelBench run store "
                    f"(tables: {', '.join(sorted(tables))})"
                )
            version = self._stored_version() if "meta" in tables else None
            if version is not None and not _migrates(version):
                self._check_version(version)
            for table in TABLES.keys() & tables:  # version 1, or a MAC column dropped by hand
                columns = {r[1] for r in c.execute(f"PRAGMA table_info({table})")}
                if "mac" not in columns:
                    c.execute(f"ALTER TABLE {table} ADD COLUMN mac TEXT")
            for stmt in _SCHEMA:
                c.execute(stmt)
            if version != SCHEMA_VERSION:
                self._write("meta", (_SCHEMA_KEY,), (json.dumps(SCHEMA_VERSION),))
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise

    def _stored_version(self) -> Any:
        """The schema version meta holds (None when it holds none: an interrupted first open)."""
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (_SCHEMA_KEY,)).fetchone()
        if row is None:
            return None
        try:
            return json.loads(row[0])
        except (TypeError, ValueError):
            return row[0]

    def _check_version(self, version: Any) -> None:
        if version != SCHEMA_VERSION or isinstance(version, bool):
            newer = isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION
            raise RunDirError(
                f"{self.path} has run-store schema version {version!r}; this EdgeKernelBench reads "
                f"versions 1 to {SCHEMA_VERSION}"
                + (" (it was written by a newer EdgeKernelBench; upgrade to read it)" if newer else "")
            )

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RunDirError(f"the run store {self.path} is closed")
        return self._conn

    # --- rows and their MACs ---------------------------------------------------------------------

    def _write(self, table: str, keys: tuple, values: tuple) -> None:
        """Inserts or replaces the row of `keys` in `table` with `values` (TABLES' order) and its MAC."""
        key_cols, value_cols = TABLES[table]
        cols = (*key_cols, *value_cols, "mac")
        mac = row_mac(self._key, table, keys, values)
        updates = ", ".join(f"{c} = excluded.{c}" for c in (*value_cols, "mac"))
        self._db.execute(
            f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
            f"ON CONFLICT ({', '.join(key_cols)}) DO UPDATE SET {updates}",
            (*keys, *values, mac),
        )

    def _authentic(self, table: str, keys: Sequence[Any], values: Sequence[Any], mac: Any) -> bool:
        if not isinstance(mac, str):
            return False
        return hmac.compare_digest(mac, row_mac(self._key, table, keys, values))

    def _scan(self, table: str, where: str = "", args: tuple = (), order: str = "") -> Iterator[tuple]:
        """(key columns, other columns, authentic) of each row of `table` matching `where`, in `order`."""
        key_cols, value_cols = TABLES[table]
        sql = f"SELECT {', '.join((*key_cols, *value_cols, 'mac'))} FROM {table}"
        sql += f" WHERE {where}" if where else ""
        sql += f" ORDER BY {order}" if order else ""
        n = len(key_cols)
        for row in self._db.execute(sql, args).fetchall():
            keys, values, mac = tuple(row[:n]), tuple(row[n:-1]), row[-1]
            yield keys, values, self._authentic(table, keys, values, mac)

    def _rows(
        self,
        table: str,
        where: str = "",
        args: tuple = (),
        order: str = "",
        trust_unauthenticated: bool = False,
    ) -> list[tuple[tuple, tuple]]:
        """(key columns, other columns) of the rows of `table` matching `where`, in `order`: those whose MAC
        verifies, or every row with `trust_unauthenticated`."""
        return [
            (keys, values)
            for keys, values, authentic in self._scan(table, where, args, order)
            if authentic or trust_unauthenticated
        ]

    def _decode(self, table: str, keys: tuple, text: Any) -> Any:
        """A row's JSON column, decoded; RunDirError (one line) for one that is not JSON, which only a row
        that fails authentication can hold (returned because its reader was told to trust it)."""
        try:
            return json.loads(text)
        except (TypeError, ValueError) as e:
            raise RunDirError(
                f"{self.path}: row {keys} of table {table} is not a JSON record ({e})"
            ) from None

    def unauthenticated(self) -> dict[str, list[tuple]]:
        """table -> the key columns of each of its rows whose MAC does not verify under this user's key
        (none, wrong, or another key's), in key order; tables without such rows are left out."""
        out: dict[str, list[tuple]] = {}
        for table, (key_cols, _values) in TABLES.items():
            bad = [
                keys for keys, _v, authentic in self._scan(table, order=", ".join(key_cols)) if not authentic
            ]
            if bad:
                out[table] = bad
        return out

    # --- results -------------------------------------------------------------------------------

    def put(self, result: Result) -> None:
        """Inserts or replaces the result for (problem, sample, backend); committed on return."""
        self._write(
            "results",
            (result.problem, int(result.sample), result.backend),
            (result_status(result), _dumps(result.to_dict()), time.time()),
        )

    def has(self, problem: str, sample: int, backend: str, *, trust_unauthenticated: bool = False) -> bool:
        rows = self._rows(
            "results",
            "problem = ? AND sample = ? AND backend = ?",
            (problem, int(sample), backend),
            trust_unauthenticated=trust_unauthenticated,
        )
        return bool(rows)

    def done_keys(self, backend: str, *, trust_unauthenticated: bool = False) -> set[tuple[str, int]]:
        """The (problem, sample) pairs stored for `backend`."""
        rows = self._rows("results", "backend = ?", (backend,), trust_unauthenticated=trust_unauthenticated)
        return {(p, s) for (p, s, _b), _ in rows}

    def results(
        self,
        backend: str | None = None,
        problems: Iterable[str] | None = None,
        *,
        trust_unauthenticated: bool = False,
    ) -> list[Result]:
        """Stored results, ordered by (backend, problem, sample), optionally filtered."""
        where, args = ("backend = ?", (backend,)) if backend is not None else ("", ())
        wanted = set(problems) if problems is not None else None
        out = []
        for keys, (_status, rec, _created) in self._rows(
            "results", where, args, "backend, problem, sample", trust_unauthenticated
        ):
            r = self._result(keys, rec)
            if wanted is None or r.problem in wanted:
                out.append(r)
        return out

    def _result(self, keys: tuple, rec: Any) -> Result:
        try:
            return Result.from_dict(self._decode("results", keys, rec))
        except (TypeError, ValueError, AttributeError) as e:  # JSON, but not a Result's fields
            raise RunDirError(
                f"{self.path}: row {keys} of table results is not a result record ({e})"
            ) from None

    def statuses(
        self, backend: str | None = None, *, trust_unauthenticated: bool = False
    ) -> dict[tuple[str, int, str], str]:
        """(problem, sample, backend) -> status, without decoding the records."""
        where, args = ("backend = ?", (backend,)) if backend is not None else ("", ())
        rows = self._rows("results", where, args, trust_unauthenticated=trust_unauthenticated)
        return {(p, s, b): status for (p, s, b), (status, _rec, _created) in rows}

    # --- baselines -----------------------------------------------------------------------------

    def put_baseline(
        self, problem: str, backend: str, baseline: str, timing: Any, extra: dict | None = None
    ) -> None:
        """Inserts or replaces one baseline measurement. `timing` is a Timing or its dict."""
        if dataclasses.is_dataclass(timing) and not isinstance(timing, type):
            timing = dataclasses.asdict(timing)
        record = {"timing": timing, "extra": dict(extra or {})}
        self._write("baselines", (problem, backend, baseline), (_dumps(record), time.time()))

    def baselines(
        self, backend: str | None = None, *, trust_unauthenticated: bool = False
    ) -> dict[tuple[str, str, str], dict]:
        """(problem, backend, baseline) -> {"timing": dict | None, "extra": dict, "created": float}."""
        where, args = ("backend = ?", (backend,)) if backend is not None else ("", ())
        order = "problem, baseline" if backend is not None else "backend, problem, baseline"
        out = {}
        for keys, (rec, created) in self._rows("baselines", where, args, order, trust_unauthenticated):
            d = self._decode("baselines", keys, rec)
            out[keys] = {"timing": d.get("timing"), "extra": d.get("extra") or {}, "created": created}
        return out

    def get_baseline(
        self, problem: str, backend: str, baseline: str, *, trust_unauthenticated: bool = False
    ) -> dict | None:
        """One baseline record (as in `baselines()`), or None."""
        rows = self._rows(
            "baselines",
            "problem = ? AND backend = ? AND baseline = ?",
            (problem, backend, baseline),
            trust_unauthenticated=trust_unauthenticated,
        )
        if not rows:
            return None
        keys, (rec, created) = rows[0]
        d = self._decode("baselines", keys, rec)
        return {"timing": d.get("timing"), "extra": d.get("extra") or {}, "created": created}

    # --- generations ---------------------------------------------------------------------------

    def put_generation(self, problem: str, sample: int, record: dict) -> None:
        """Inserts or replaces the generation record of (problem, sample)."""
        self._write("generations", (problem, int(sample)), (_dumps(record), time.time()))

    def generations(self, *, trust_unauthenticated: bool = False) -> list[dict]:
        """Every generation record, ordered by (problem, sample)."""
        rows = self._rows("generations", order="problem, sample", trust_unauthenticated=trust_unauthenticated)
        return [self._decode("generations", keys, rec) for keys, (rec, _created) in rows]

    # --- agents --------------------------------------------------------------------------------

    def put_agent_step(self, problem: str, method: str, step: int, record: dict) -> None:
        """One step of an agent's trajectory (agents/): kernel, layer, proposal, verdict, budget used."""
        self._write("agent_steps", (problem, method, int(step)), (_dumps(record), time.time()))

    def agent_steps(
        self, problem: str | None = None, method: str | None = None, *, trust_unauthenticated: bool = False
    ) -> list[dict]:
        rows = self._rows(
            "agent_steps", order="problem, method, step", trust_unauthenticated=trust_unauthenticated
        )
        return [
            {"problem": p, "method": m, "step": k, **self._decode("agent_steps", (p, m, k), rec)}
            for (p, m, k), (rec, _created) in rows
            if (problem is None or p == problem) and (method is None or m == method)
        ]

    def clear_agent_steps(self, problem: str, method: str) -> None:
        """An interrupted (problem, method) starts over: its partial trajectory goes."""
        self._db.execute("DELETE FROM agent_steps WHERE problem = ? AND method = ?", (problem, method))

    def put_agent_run(self, problem: str, method: str, record: dict) -> None:
        """How one method did on one problem: budget used (calls, evaluations, tokens, cost, wall time),
        why it stopped, its final sample."""
        self._write("agent_runs", (problem, method), (_dumps(record), time.time()))

    def agent_runs(self, *, trust_unauthenticated: bool = False) -> dict[tuple[str, str], dict]:
        rows = self._rows("agent_runs", trust_unauthenticated=trust_unauthenticated)
        return {keys: self._decode("agent_runs", keys, rec) for keys, (rec, _created) in rows}

    # --- meta ----------------------------------------------------------------------------------

    def set_meta(self, key: str, value: Any) -> None:
        """Stores a JSON-serializable value under `key` (replacing the previous value)."""
        if key == _SCHEMA_KEY:
            raise ValueError(f"{_SCHEMA_KEY!r} is managed by the run store")
        self._write("meta", (key,), (_dumps(value),))

    def get_meta(self, key: str, default: Any = None, *, trust_unauthenticated: bool = False) -> Any:
        """The value under `key`; `default` when there is none (or only an unauthenticated one)."""
        rows = self._rows("meta", "key = ?", (key,), trust_unauthenticated=trust_unauthenticated)
        return self._decode("meta", rows[0][0], rows[0][1][0]) if rows else default

    def meta_keys(self, prefix: str = "", *, trust_unauthenticated: bool = False) -> list[str]:
        """The meta keys that start with `prefix`, sorted ("peak:" -> every backend's cached peaks)."""
        rows = self._rows("meta", order="key", trust_unauthenticated=trust_unauthenticated)
        return [k for (k,), _ in rows if k.startswith(prefix)]

    def record_environment(self, env: dict | None = None) -> None:
        """Notes the machine a command evaluates on (`host_environment()` by default) in meta
        "environments": one entry per distinct machine and software, with the first and last time seen
        (a run resumed elsewhere, or after an upgrade, lists both; an unauthenticated list starts over)."""
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

    def created_range(self, *, trust_unauthenticated: bool = False) -> tuple[float, float] | None:
        """(first, last) time a result was stored (seconds since the epoch); None without results."""
        rows = self._rows("results", trust_unauthenticated=trust_unauthenticated)
        times = [float(v[2]) for _k, v in rows if isinstance(v[2], int | float)]
        return (min(times), max(times)) if times else None

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
