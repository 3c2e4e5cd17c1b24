"""The kernel database: decisions that were judged correct and faster, reusable by workload.

One row per kernel decision: the workload key of the PrimFunc it was recorded on (a structural hash that
ignores the function's name: the same workload in another problem has the same key), the backend target it
was judged on, its layers (loop / memory / target traces, replayed in that order on one schedule of the
PrimFunc), and its provenance: problem, method, speedup over the baseline it was measured against, TVM
version, date. LEKA looks every kernel up before it spends budget on it (agents/leka.py); `ekb deploy`
builds artifacts from it. `ekb db list | show | export | import` reads and writes it.

Location: $EKB_KERNEL_DB, else ~/.cache/edgekernelbench/kernels.db (beside the LLM response cache)."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import EKBError

LAYER_ORDER = ("loop", "memory", "target")

SCHEMA = """
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workload TEXT NOT NULL,
    target TEXT NOT NULL,
    func TEXT NOT NULL,
    layers TEXT NOT NULL,
    digest TEXT NOT NULL,
    problem TEXT NOT NULL,
    method TEXT NOT NULL,
    speedup REAL,
    baseline TEXT NOT NULL,
    tvm_version TEXT NOT NULL,
    created TEXT NOT NULL,
    UNIQUE (workload, target, digest)
);
CREATE INDEX IF NOT EXISTS decisions_by_workload ON decisions (workload, target);
"""


def default_db_path() -> Path:
    env = os.environ.get("EKB_KERNEL_DB")
    return Path(env) if env else Path.home() / ".cache" / "edgekernelbench" / "kernels.db"


def target_key(target: dict) -> str:
    """A backend target as a key: its TVM target JSON with sorted keys (mcpu already resolved)."""
    return json.dumps(target, sort_keys=True, separators=(",", ":"))


@dataclass
class Entry:
    workload: str
    target: str  # target_key()
    func: str  # the PrimFunc's name where it was recorded (informational: look-ups go by workload)
    layers: dict  # layer -> trace JSON [insts, decisions]
    problem: str
    method: str
    speedup: float | None = None
    baseline: str = "tvm-default"
    tvm_version: str = ""
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S"))
    id: int | None = None

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.layers, sort_keys=True).encode()).hexdigest()[:16]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Entry:
        known = {f for f in cls.__dataclass_fields__}
        if not isinstance(d, dict) or not {
            "workload",
            "target",
            "func",
            "layers",
            "problem",
            "method",
        } <= set(d):
            raise EKBError("a kernel database entry needs workload, target, func, layers, problem and method")
        layers = d["layers"]
        if not isinstance(layers, dict) or not set(layers) <= set(LAYER_ORDER) or not layers:
            raise EKBError(f"entry layers must be a non-empty subset of {LAYER_ORDER}")
        return cls(**{k: v for k, v in d.items() if k in known and k != "id"})


class KernelDB:
    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path else default_db_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = sqlite3.connect(str(self.path), timeout=30.0)
            self._conn.executescript(SCHEMA)
        except sqlite3.DatabaseError as e:
            raise EKBError(f"{self.path}: not a kernel database ({e})") from None

    def put(self, e: Entry) -> int | None:
        """Stores `e` (a decision already stored for that workload and target is kept once; a better
        speedup updates its provenance). Returns the row id."""
        with self._conn:
            row = self._conn.execute(
                "SELECT id, speedup FROM decisions WHERE workload = ? AND target = ? AND digest = ?",
                (e.workload, e.target, e.digest),
            ).fetchone()
            if row:
                if e.speedup is not None and (row[1] is None or e.speedup > row[1]):
                    self._conn.execute(
                        "UPDATE decisions SET speedup = ?, problem = ?, method = ?, created = ? WHERE id = ?",
                        (e.speedup, e.problem, e.method, e.created, row[0]),
                    )
                return int(row[0])
            cur = self._conn.execute(
                "INSERT INTO decisions (workload, target, func, layers, digest, problem, method, speedup, "
                "baseline, tvm_version, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    e.workload,
                    e.target,
                    e.func,
                    json.dumps(e.layers),
                    e.digest,
                    e.problem,
                    e.method,
                    e.speedup,
                    e.baseline,
                    e.tvm_version,
                    e.created,
                ),
            )
            return cur.lastrowid

    def _entries(self, where: str = "", args: tuple = ()) -> list[Entry]:
        rows = self._conn.execute(
            "SELECT id, workload, target, func, layers, problem, method, speedup, baseline, tvm_version, "
            f"created FROM decisions {where} ORDER BY workload, speedup DESC, id",
            args,
        ).fetchall()
        return [
            Entry(
                workload=r[1],
                target=r[2],
                func=r[3],
                layers=json.loads(r[4]),
                problem=r[5],
                method=r[6],
                speedup=r[7],
                baseline=r[8],
                tvm_version=r[9],
                created=r[10],
                id=r[0],
            )
            for r in rows
        ]

    def lookup(self, workload: str, target: str) -> list[Entry]:
        """The decisions stored for this workload on this target, best speedup first."""
        return self._entries("WHERE workload = ? AND target = ?", (workload, target))

    def get(self, entry_id: int) -> Entry:
        found = self._entries("WHERE id = ?", (int(entry_id),))
        if not found:
            raise EKBError(f"{self.path}: no entry {entry_id} (see `ekb db list`)")
        return found[0]

    def entries(self) -> list[Entry]:
        return self._entries()

    def import_entries(self, entries: Iterable[dict]) -> int:
        n = 0
        for d in entries:
            self.put(Entry.from_dict(d))
            n += 1
        return n

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> KernelDB:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
