"""Model providers: OpenAI-compatible chat completions (official `openai` SDK: OpenAI, vLLM, Ollama,
llama.cpp, OpenRouter), Anthropic messages (official `anthropic` SDK), and `replay` (recorded responses).

Model strings: `openai:MODEL`, `anthropic:MODEL`, `openai-compatible:http://HOST:PORT/v1:MODEL`,
`replay:PATH.jsonl`. Keys come from the environment only (OPENAI_API_KEY, ANTHROPIC_API_KEY;
OPENAI_COMPATIBLE_API_KEY for a compatible server, else OPENAI_API_KEY, else a placeholder) and are never
written anywhere: not into records, the cache, logs, or worker processes (their env is an allow-list).
Transient failures (429, 5xx, timeouts, lost connections) are retried with exponential backoff.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import EKBError

log = logging.getLogger(__name__)
PROVIDERS = ("openai", "anthropic", "openai-compatible", "replay")

# USD per million tokens (input, output); longest matching prefix wins; unknown models cost None.
PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1": (2.00, 8.00),
    "o3-mini": (1.10, 4.40),
    "o4-mini": (1.10, 4.40),
    "o3": (2.00, 8.00),
    "claude-3-5-haiku": (0.80, 4.00),
    "claude-3-5-sonnet": (3.00, 15.00),
    "claude-3-7-sonnet": (3.00, 15.00),
    "claude-sonnet-4": (3.00, 15.00),
    "claude-opus-4": (15.00, 75.00),
    "claude-haiku-4": (1.00, 5.00),
}


class ProviderError(EKBError):
    """A call that failed for good (after retries): the provider's fault, not the model's answer."""


@dataclass(frozen=True)
class ModelRef:
    provider: str
    model: str
    base_url: str | None = None

    @property
    def label(self) -> str:
        """The model string without secrets (a base URL is kept: it names the server, not a key)."""
        if self.provider == "openai-compatible":
            return f"openai-compatible:{self.base_url}:{self.model}"
        return f"{self.provider}:{self.model}"


def parse_model(spec: str) -> ModelRef:
    provider, sep, rest = spec.partition(":")
    if not sep or not rest or provider not in PROVIDERS:
        raise EKBError(
            f"unknown model '{spec}': use builtin, openai:MODEL, anthropic:MODEL, "
            "openai-compatible:http://HOST:PORT/v1:MODEL or replay:PATH.jsonl"
        )
    if provider == "openai-compatible":
        m = re.match(r"^(https?://[^/\s]+(?:/[^:\s]*)?):(.+)$", rest)
        if not m:
            raise EKBError(f"model '{spec}': expected openai-compatible:http://HOST:PORT/v1:MODEL")
        return ModelRef(provider, m.group(2), m.group(1).rstrip("/"))
    return ModelRef(provider, rest)


def price(model: str, input_tokens: int | None, output_tokens: int | None) -> float | None:
    keys = [k for k in PRICES if model.split("/")[-1].startswith(k)]
    if not keys or input_tokens is None or output_tokens is None:
        return None
    pin, pout = PRICES[max(keys, key=len)]
    return round((input_tokens * pin + output_tokens * pout) / 1e6, 8)


@dataclass
class Request:
    system: str
    user: str
    params: dict  # temperature, max_tokens, top_p (what the cache keys on)
    problem: str = ""
    sample: int = 0
    prompt_hash: str = ""
    # earlier turns of a conversation, oldest first: [{"role": "user" | "assistant", "content": str}]
    history: list = field(default_factory=list)

    def messages(self) -> list[dict]:
        return [
            *({"role": m["role"], "content": m["content"]} for m in self.history),
            {"role": "user", "content": self.user},
        ]


@dataclass
class Completion:
    text: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    latency_s: float = 0.0
    attempts: int = 1
    extra: dict = field(default_factory=dict)


@dataclass
class RetryPolicy:
    retries: int = 4
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    timeout_s: float = 120.0


class Provider:
    ref: ModelRef

    def complete(self, req: Request) -> Completion:
        raise NotImplementedError


def _retry_after(e) -> float | None:
    resp = getattr(e, "response", None)
    try:
        value = resp.headers.get("retry-after") if resp is not None else None
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


class _SDKProvider(Provider):
    """Retries around one SDK call; the SDK's own retries are off so every try is counted here."""

    def __init__(self, ref: ModelRef, policy: RetryPolicy):
        self.ref, self.policy = ref, policy
        self.client = self._client()

    def _transient(self, e: Exception) -> bool:
        raise NotImplementedError

    def _call(self, req: Request) -> Completion:
        raise NotImplementedError

    def complete(self, req: Request) -> Completion:
        delay = self.policy.backoff_s
        for attempt in range(1, self.policy.retries + 2):
            t0 = time.monotonic()
            try:
                out = self._call(req)
                out.latency_s, out.attempts = time.monotonic() - t0, attempt
                return out
            except ProviderError:
                raise
            except Exception as e:
                if not self._transient(e) or attempt > self.policy.retries:
                    raise ProviderError(f"{self.ref.label}: {type(e).__name__}: {_short(e)}") from e
                wait = min(self.policy.max_backoff_s, _retry_after(e) or delay)
                log.warning("%s: %s (try %d); retrying in %.1fs", self.ref.label, _short(e), attempt, wait)
                time.sleep(wait)
                delay = min(self.policy.max_backoff_s, delay * 2)
        raise AssertionError("unreachable")


def _supported(create, params: dict, label: str) -> dict:
    """The sampling parameters this SDK's create() takes (newer SDKs dropped some, e.g. Anthropic's
    temperature); the others are left out, with a warning, rather than sent as unknown fields."""
    import inspect

    try:
        names = set(inspect.signature(create).parameters)
    except (TypeError, ValueError):
        return params
    dropped = sorted(k for k in params if k not in names)
    if dropped:
        log.warning("%s: this SDK's create() takes no %s; not sent", label, ", ".join(dropped))
    return {k: v for k, v in params.items() if k in names}


def _short(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]


def _status_transient(e, sdk) -> bool:
    if isinstance(e, sdk.APIStatusError):
        return e.status_code == 429 or e.status_code >= 500
    return isinstance(e, sdk.APITimeoutError | sdk.APIConnectionError)


class OpenAIProvider(_SDKProvider):
    def _client(self):
        try:
            import openai
        except ImportError as e:
            raise EKBError("the openai SDK is not installed: pip install -e '.[llm]'") from e
        self.sdk = openai
        if self.ref.provider == "openai-compatible":
            key = os.environ.get("OPENAI_COMPATIBLE_API_KEY") or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        else:
            key = os.environ.get("OPENAI_API_KEY")
            if not key:
                raise EKBError("OPENAI_API_KEY is not set")
        return openai.OpenAI(
            api_key=key, base_url=self.ref.base_url, timeout=self.policy.timeout_s, max_retries=0
        )

    def _transient(self, e):
        return _status_transient(e, self.sdk)

    def _call(self, req: Request) -> Completion:
        kwargs = {k: v for k, v in req.params.items() if v is not None}
        kwargs = _supported(self.client.chat.completions.create, kwargs, self.ref.label)
        r = self.client.chat.completions.create(
            model=self.ref.model,
            messages=[{"role": "system", "content": req.system}, *req.messages()],
            **kwargs,
        )
        if isinstance(r, str) or not getattr(r, "choices", None):
            raise ProviderError(f"{self.ref.label}: malformed response (no choices): {str(r)[:200]}")
        choice = r.choices[0]
        text = getattr(getattr(choice, "message", None), "content", None)
        if not isinstance(text, str):
            raise ProviderError(f"{self.ref.label}: malformed response (no message content)")
        usage = getattr(r, "usage", None)
        return Completion(
            text=text,
            input_tokens=getattr(usage, "prompt_tokens", None),
            output_tokens=getattr(usage, "completion_tokens", None),
            finish_reason=getattr(choice, "finish_reason", None),
        )


class AnthropicProvider(_SDKProvider):
    def _client(self):
        try:
            import anthropic
        except ImportError as e:
            raise EKBError("the anthropic SDK is not installed: pip install -e '.[llm]'") from e
        self.sdk = anthropic
        key = os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise EKBError("ANTHROPIC_API_KEY is not set")
        # base URL: the SDK's default, or $ANTHROPIC_BASE_URL (which the SDK reads itself)
        return anthropic.Anthropic(api_key=key, timeout=self.policy.timeout_s, max_retries=0)

    def _transient(self, e):
        return _status_transient(e, self.sdk)

    def _call(self, req: Request) -> Completion:
        params = dict(req.params)
        kwargs = {k: v for k, v in params.items() if v is not None and k != "max_tokens"}
        kwargs = _supported(self.client.messages.create, kwargs, self.ref.label)
        r = self.client.messages.create(
            model=self.ref.model,
            system=req.system,
            messages=req.messages(),
            max_tokens=int(params.get("max_tokens") or 8192),
            **kwargs,
        )
        content = getattr(r, "content", None)
        if isinstance(r, str) or not isinstance(content, list):
            raise ProviderError(f"{self.ref.label}: malformed response (no content): {str(r)[:200]}")
        text = "".join(getattr(b, "text", "") or "" for b in content if getattr(b, "type", "") == "text")
        usage = getattr(r, "usage", None)
        return Completion(
            text=text,
            input_tokens=getattr(usage, "input_tokens", None),
            output_tokens=getattr(usage, "output_tokens", None),
            finish_reason=getattr(r, "stop_reason", None),
        )


class ReplayProvider(Provider):
    """Answers from recorded responses (RUN_DIR/responses.jsonl of a published run): one JSON object per
    line with problem, sample, text (and tokens); no network, no key."""

    def __init__(self, ref: ModelRef):
        self.ref = ref
        path = Path(ref.model)
        if not path.is_file():
            raise EKBError(f"replay: {path}: no such file")
        self.records: dict[tuple[str, int], dict] = {}
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                self.records[(d["problem"], int(d["sample"]))] = d
            except (ValueError, KeyError, TypeError) as e:
                raise EKBError(f"replay: {path}:{n}: not a response record ({e})") from e
        self.model_of_record = next((d.get("model") for d in self.records.values() if d.get("model")), None)

    def complete(self, req: Request) -> Completion:
        d = self.records.get((req.problem, req.sample))
        if d is None:
            raise ProviderError(f"replay: no recorded response for {req.problem} sample {req.sample}")
        if d.get("prompt_hash") and req.prompt_hash and d["prompt_hash"] != req.prompt_hash:
            log.warning("replay: %s#%d was recorded with another prompt", req.problem, req.sample)
        return Completion(
            text=d.get("text", ""),
            input_tokens=d.get("input_tokens"),
            output_tokens=d.get("output_tokens"),
            finish_reason=d.get("finish_reason"),
            extra={"replayed_from": d.get("model")},
        )


def make_provider(spec: str | ModelRef, policy: RetryPolicy | None = None) -> Provider:
    ref = parse_model(spec) if isinstance(spec, str) else spec
    policy = policy or RetryPolicy()
    if ref.provider == "replay":
        return ReplayProvider(ref)
    if ref.provider == "anthropic":
        return AnthropicProvider(ref, policy)
    return OpenAIProvider(ref, policy)
