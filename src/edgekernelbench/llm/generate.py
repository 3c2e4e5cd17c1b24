"""One-shot LLM generation of a run directory's candidates (the direct and schedule tracks).

For every (problem, sample) whose candidate file does not exist yet (so an interrupted generation
resumes), the prompt is sent (at most `concurrency` calls at once), the answer cached, recorded in
RUN_DIR/responses.jsonl (for `replay:`), parsed, and written as RUN_DIR/candidates/<problem>/sample<k>.json:
a KernelSpec with the module (direct) or schedule_code (schedule track) and the generation metadata
(model, template + hash, prompt hash, tokens, cost). An answer without usable code is still written, with
metadata.parse_error and the answer's text: `ekb eval` records it as a parse_error. A call that fails for
good (provider errors after retries) writes no candidate (a rerun tries again); it is recorded in the
run store's generations table like every other sample.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from ..ir.spec import KernelSpec
from ..rundir import RESPONSES, existing_candidate, write_candidate
from ..store import RunStore
from .cache import ResponseCache
from .parse import ParseError, extract_code
from .prompts import build_prompt
from .providers import Completion, ProviderError, Request, RetryPolicy, make_provider, price

log = logging.getLogger(__name__)
KEY_VARS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_COMPATIBLE_API_KEY")


@dataclass
class GenConfig:
    model: str
    samples: int = 1
    track: str = "direct"
    temperature: float | None = 0.2
    max_tokens: int = 8192
    top_p: float | None = None
    concurrency: int = 4
    use_cache: bool = True  # False (--no-cache): call again; the new answers replace the cached ones
    cache_path: Path | None = None
    policy: RetryPolicy = field(default_factory=RetryPolicy)

    def params(self) -> dict:
        return {"temperature": self.temperature, "max_tokens": self.max_tokens, "top_p": self.top_p}


def redact(text: str) -> str:
    """Error texts may quote the request: no key value ever leaves this process."""
    for var in KEY_VARS:
        value = os.environ.get(var)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


def generate_run(
    run_dir: Path,
    problems: list,
    profile,
    cfg: GenConfig,
    on_result: Callable[[dict], None] | None = None,
) -> dict[str, int]:
    """Generates the missing samples of `problems`; returns counts (generated, cached, skipped,
    parse_errors, failed)."""
    run_dir = Path(run_dir)
    provider = make_provider(cfg.model, cfg.policy)
    ref = provider.ref
    replay = ref.provider == "replay"
    label = ref.label
    params = cfg.params()
    counts = {"generated": 0, "cached": 0, "skipped": 0, "parse_errors": 0, "failed": 0}
    cache = None if replay else ResponseCache(cfg.cache_path)
    lock = threading.Lock()

    def finish(store, problem, k, prompt, comp: Completion | None, error: str | None):
        cached = bool(comp and comp.extra.get("cached"))
        record = {
            "problem": problem.id,
            "sample": k,
            "model": label,
            "provider": ref.provider,
            "backend": profile.name,
            **prompt.meta(),
            "params": params,
            "cached": cached,
            "replayed": replay,
        }
        if comp is None:
            record.update(status="provider_error", error=redact(error or ""))
            store.put_generation(problem.id, k, record)
            counts["failed"] += 1
            return record
        if not replay and not cached and cache is not None:
            cache.put(ref, prompt.prompt_hash, params, k, comp)
        model_for_price = ref.model if not replay else ""
        record.update(
            input_tokens=comp.input_tokens,
            output_tokens=comp.output_tokens,
            cost=0.0 if replay else price(model_for_price, comp.input_tokens, comp.output_tokens),
            latency_s=round(comp.latency_s, 3),
            attempts=comp.attempts,
            finish_reason=comp.finish_reason,
        )
        if not cached and not replay:
            with open(run_dir / RESPONSES, "a") as f:
                line = {
                    k2: record[k2]
                    for k2 in ("problem", "sample", "model", "prompt_hash", "template_hash", "params")
                }
                line.update(
                    text=comp.text,
                    input_tokens=comp.input_tokens,
                    output_tokens=comp.output_tokens,
                    finish_reason=comp.finish_reason,
                )
                f.write(json.dumps(line) + "\n")
        meta = {k2: v for k2, v in record.items() if k2 not in ("problem", "sample")}
        spec = KernelSpec(
            problem=problem.id,
            method=f"llm:{label}",
            notes=f"{prompt.track} track, template {prompt.template} v{prompt.template_version} "
            f"({prompt.template_hash})",
            metadata=meta,
        )
        try:
            code = extract_code(comp.text, prompt.track)
            if prompt.track == "direct":
                spec.module = code
            else:
                spec.schedule_code = code
            record["status"] = "ok"
        except ParseError as e:
            spec.metadata = {**meta, "parse_error": str(e), "response": comp.text}
            record.update(status="parse_error", error=str(e))
            counts["parse_errors"] += 1
        store.put_generation(problem.id, k, record)
        write_candidate(run_dir, problem.id, k, ".json", spec.to_json() + "\n")
        counts["cached" if cached else "generated"] += 1
        return record

    def call(req: Request) -> tuple[Completion | None, str | None]:
        try:
            return provider.complete(req), None
        except ProviderError as e:
            return None, str(e)
        except Exception as e:  # an SDK surprise is the provider's failure, recorded, not a crash
            return None, f"{type(e).__name__}: {e}"

    with RunStore(run_dir) as store:
        store.set_meta(
            "generation_config",
            {
                "model": label,
                "track": cfg.track,
                "samples": cfg.samples,
                "params": params,
                "backend": profile.name,
            },
        )
        with ThreadPoolExecutor(max_workers=max(1, cfg.concurrency), thread_name_prefix="ekb-llm") as pool:
            futures = {}
            for problem in problems:
                todo = [k for k in range(cfg.samples) if existing_candidate(run_dir, problem.id, k) is None]
                counts["skipped"] += cfg.samples - len(todo)
                if not todo:
                    continue
                prompt = build_prompt(problem, profile, cfg.track)
                for k in todo:
                    hit = cache.get(ref, prompt.prompt_hash, params, k) if cache and cfg.use_cache else None
                    if hit is not None:
                        rec = finish(store, problem, k, prompt, hit, None)
                        if on_result:
                            on_result(rec)
                        continue
                    req = Request(prompt.system, prompt.user, params, problem.id, k, prompt.prompt_hash)
                    futures[pool.submit(call, req)] = (problem, k, prompt)
            for fut in as_completed(futures):
                problem, k, prompt = futures[fut]
                comp, error = fut.result()
                with lock:
                    rec = finish(store, problem, k, prompt, comp, error)
                if on_result:
                    on_result(rec)
    if cache is not None:
        cache.close()
    return counts


def generation_summary(records: list[dict]) -> list[dict]:
    """Per model: samples, failures, parse errors, cached answers, tokens in/out, cost (None when the
    price of some call is unknown), templates used."""
    by_model: dict[str, dict] = {}
    for r in records:
        m = by_model.setdefault(
            r.get("model", "?"),
            {
                "model": r.get("model", "?"),
                "samples": 0,
                "provider_errors": 0,
                "parse_errors": 0,
                "cached": 0,
                "input_tokens": 0,
                "output_tokens": 0,
                "cost": 0.0,
                "templates": [],
            },
        )
        m["samples"] += 1
        m["provider_errors"] += r.get("status") == "provider_error"
        m["parse_errors"] += r.get("status") == "parse_error"
        m["cached"] += bool(r.get("cached"))
        m["input_tokens"] += r.get("input_tokens") or 0
        m["output_tokens"] += r.get("output_tokens") or 0
        if r.get("status") != "provider_error":
            m["cost"] = None if m["cost"] is None or r.get("cost") is None else m["cost"] + r["cost"]
        t = f"{r.get('template')} v{r.get('template_version')} ({r.get('template_hash')})"
        if t not in m["templates"]:
            m["templates"].append(t)
    return list(by_model.values())


__all__ = ["GenConfig", "generate_run", "generation_summary", "redact"]
