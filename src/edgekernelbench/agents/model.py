"""An agent's model: one provider for the run (the same `--model` for every method), the shared response
cache, every call charged to the episode's budget, answers kept in RUN_DIR/responses.jsonl (`replay:`)."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

from ..errors import EKBError
from ..llm.cache import ResponseCache
from ..llm.parse import ParseError, extract_code
from ..llm.providers import Completion, ProviderError, Request, make_provider, price
from ..rundir import RESPONSES
from .episode import Episode

# the sample number of a call in the cache and in responses.jsonl: method and call index, so that the
# calls of one problem never share a cache entry
METHOD_KEYS = {"direct": 1, "flat": 2, "leka": 3, "cli": 4}


class ModelError(EKBError):
    """The provider failed for good on one call (after its retries); the call still counts."""


class ModelClient:
    _lock = threading.Lock()

    def __init__(self, model: str, episode: Episode):
        self.ep = episode
        self.provider = make_provider(model)
        self.ref = self.provider.ref
        self.replay = self.ref.provider == "replay"
        cfg = episode.cfg
        self.params = {"temperature": cfg.temperature, "max_tokens": cfg.max_tokens, "top_p": None}
        self.cache = None if self.replay else ResponseCache(cfg.cache_path)
        self.use_cache = cfg.use_cache

    def ask(self, system: str, user: str, history: list | None = None) -> str:
        """One call (charged first), through the cache; the answer's text."""
        ep = self.ep
        ep.usage.charge_call()
        key = METHOD_KEYS.get(ep.method.split("@")[0], 9) * 10000 + ep.usage.calls
        history = list(history or [])
        prompt_hash = hashlib.sha256(json.dumps([system, history, user]).encode()).hexdigest()[:16]
        comp: Completion | None = None
        cached = False
        if self.cache is not None and self.use_cache:
            comp = self.cache.get(self.ref, prompt_hash, self.params, key)
            cached = comp is not None
        if comp is None:
            req = Request(system, user, self.params, ep.problem.id, key, prompt_hash, history)
            try:
                comp = self.provider.complete(req)
            except ProviderError as e:
                ep.record(kind="model", error=str(e)[:500])
                raise ModelError(str(e)) from e
            if self.cache is not None:
                self.cache.put(self.ref, prompt_hash, self.params, key, comp)
            if not self.replay:
                self._log(key, prompt_hash, comp)
        cost = 0.0 if self.replay else price(self.ref.model, comp.input_tokens, comp.output_tokens)
        ep.usage.record_tokens(comp.input_tokens, comp.output_tokens, cost, cached)
        ep.record(kind="model", tokens_in=comp.input_tokens, tokens_out=comp.output_tokens, cached=cached)
        return comp.text

    def _log(self, key: int, prompt_hash: str, comp: Completion) -> None:
        line = {
            "problem": self.ep.problem.id,
            "sample": key,
            "model": self.ref.label,
            "method": self.ep.method,
            "prompt_hash": prompt_hash,
            "text": comp.text,
            "input_tokens": comp.input_tokens,
            "output_tokens": comp.output_tokens,
            "finish_reason": comp.finish_reason,
        }
        with self._lock, open(Path(self.ep.run_dir) / RESPONSES, "a") as f:
            f.write(json.dumps(line) + "\n")

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()


def schedule_code(text: str) -> str:
    """The `schedule(name, sch)` code in a model's answer; raises ParseError."""
    return extract_code(text, "schedule")


__all__ = ["ModelClient", "ModelError", "ParseError", "schedule_code"]
