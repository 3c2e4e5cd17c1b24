"""The response cache: SQLite, keyed by provider, model (and base URL), prompt hash, sampling parameters and
sample index, so rerunning a generation costs nothing. Holds the answers and token counts, never a key.

Default location: $EKB_LLM_CACHE, else ~/.cache/edgekernelbench/llm_cache.db.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path

from .providers import Completion, ModelRef

_SCHEMA = """CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    prompt_hash TEXT NOT NULL,
    params TEXT NOT NULL,
    sample INTEGER NOT NULL,
    text TEXT NOT NULL,
    input_tokens INTEGER,
    output_tokens INTEGER,
    finish_reason TEXT,
    created REAL NOT NULL
)"""


def default_cache_path() -> Path:
    env = os.environ.get("EKB_LLM_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "edgekernelbench" / "llm_cache.db"


def cache_key(ref: ModelRef, prompt_hash: str, params: dict, sample: int) -> str:
    blob = json.dumps(
        [ref.provider, ref.model, ref.base_url, prompt_hash, params, int(sample)], sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()


class ResponseCache:
    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path else default_cache_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), timeout=60, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute(_SCHEMA)

    def get(self, ref: ModelRef, prompt_hash: str, params: dict, sample: int) -> Completion | None:
        with self._lock:
            row = self._db.execute(
                "SELECT text, input_tokens, output_tokens, finish_reason FROM responses WHERE key = ?",
                (cache_key(ref, prompt_hash, params, sample),),
            ).fetchone()
        if row is None:
            return None
        return Completion(row[0], row[1], row[2], row[3], attempts=0, extra={"cached": True})

    def put(self, ref: ModelRef, prompt_hash: str, params: dict, sample: int, c: Completion) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    cache_key(ref, prompt_hash, params, sample),
                    ref.provider,
                    ref.model if ref.base_url is None else f"{ref.base_url}:{ref.model}",
                    prompt_hash,
                    json.dumps(params, sort_keys=True),
                    int(sample),
                    c.text,
                    c.input_tokens,
                    c.output_tokens,
                    c.finish_reason,
                    time.time(),
                ),
            )

    def close(self) -> None:
        self._db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
