"""An agent's model: one provider for the run (the same `--model` for every method), the shared response
cache, every call charged to the episode's budget, answers kept in RUN_DIR/responses.jsonl (`replay:`)."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Answer:
    """A model call's answer: the completion and whether it came from the cache, or the provider's error."""

    completion: Completion | None
    cached: bool = False
    error: str = ""  # a ProviderError's message (then completion is None)


class ModelService:
    """Where an agent's model calls are made: the provider (with the API keys of the process that holds it),
    the shared response cache, and RUN_DIR/responses.jsonl. In `ekb agent` on one machine, the episode's
    own; on a cluster, the driver's, reached through cluster/mailbox.py: workers never hold a key."""

    _lock = threading.Lock()

    def __init__(self, model: str, run_dir: Path, cache_path: Path | None = None, use_cache: bool = True):
        self.provider = make_provider(model)
        self.ref = self.provider.ref
        self.replay = self.ref.provider == "replay"
        self.cache = None if self.replay else ResponseCache(cache_path)
        self.use_cache, self.run_dir = use_cache, Path(run_dir)

    def answer(self, req: Request, method: str) -> Answer:
        """One call through the cache (`req.sample`: the call's key, see METHOD_KEYS)."""
        if self.cache is not None and self.use_cache:
            comp = self.cache.get(self.ref, req.prompt_hash, req.params, req.sample)
            if comp is not None:
                return Answer(comp, cached=True)
        try:
            comp = self.provider.complete(req)
        except ProviderError as e:
            return Answer(None, error=str(e))
        if self.cache is not None:
            self.cache.put(self.ref, req.prompt_hash, req.params, req.sample, comp)
        if not self.replay:
            self._log(req, method, comp)
        return Answer(comp)

    def _log(self, req: Request, method: str, comp: Completion) -> None:
        line = {
            "problem": req.problem,
            "sample": req.sample,
            "model": self.ref.label,
            "method": method,
            "prompt_hash": req.prompt_hash,
            "text": comp.text,
            "input_tokens": comp.input_tokens,
            "output_tokens": comp.output_tokens,
            "finish_reason": comp.finish_reason,
        }
        with self._lock, open(self.run_dir / RESPONSES, "a") as f:
            f.write(json.dumps(line) + "\n")

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()


class ModelClient:
    """An episode's model: every call charged to its budget and recorded in its trajectory; the calls made
    by `service` (default: a ModelService of the episode's own)."""

    def __init__(self, model: str, episode: Episode, service=None):
        self.ep = episode
        cfg = episode.cfg
        self.own = service is None
        self.service = service or ModelService(model, episode.run_dir, cfg.cache_path, cfg.use_cache)
        self.ref, self.replay = self.service.ref, self.service.replay
        self.params = {"temperature": cfg.temperature, "max_tokens": cfg.max_tokens, "top_p": None}

    def ask(self, system: str, user: str, history: list | None = None) -> str:
        """One call (charged first), through the cache; the answer's text."""
        ep = self.ep
        ep.usage.charge_call()
        key = METHOD_KEYS.get(ep.method.split("@")[0], 9) * 10000 + ep.usage.calls
        history = list(history or [])
        prompt_hash = hashlib.sha256(json.dumps([system, history, user]).encode()).hexdigest()[:16]
        req = Request(system, user, self.params, ep.problem.id, key, prompt_hash, history)
        ans = self.service.answer(req, ep.method)
        if ans.completion is None:
            ep.record(kind="model", error=ans.error[:500])
            raise ModelError(ans.error)
        comp = ans.completion
        cost = 0.0 if self.replay else price(self.ref.model, comp.input_tokens, comp.output_tokens)
        ep.usage.record_tokens(comp.input_tokens, comp.output_tokens, cost, ans.cached)
        ep.record(kind="model", tokens_in=comp.input_tokens, tokens_out=comp.output_tokens, cached=ans.cached)
        return comp.text

    def close(self) -> None:
        if self.own:
            self.service.close()


def schedule_code(text: str) -> str:
    """The `schedule(name, sch)` code in a model's answer; raises ParseError."""
    return extract_code(text, "schedule")


__all__ = ["Answer", "ModelClient", "ModelError", "ModelService", "ParseError", "schedule_code"]
