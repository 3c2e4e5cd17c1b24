"""LLM generation: prompts (snapshot), parsing of messy answers, providers through the real SDKs against a
local fake server, the response cache, replay, and generate -> eval -> report end to end."""

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from llm_fake_server import FakeLLM

from edgekernelbench.backends.registry import get_profile
from edgekernelbench.errors import EKBError, MalformedCandidate
from edgekernelbench.ir.spec import KernelSpec, load_candidate
from edgekernelbench.llm.parse import ParseError, extract_code
from edgekernelbench.llm.prompts import build_prompt, template_info
from edgekernelbench.llm.providers import (
    ProviderError,
    Request,
    RetryPolicy,
    make_provider,
    parse_model,
    price,
)
from edgekernelbench.problems import get_problem
from edgekernelbench.reference import build_reference

pytest.importorskip("openai")
pytest.importorskip("anthropic")

TINY = "L1/tiny_scale_add"
REAL = "L1/dense_ae_128x8"
SNAPSHOTS = Path(__file__).parent / "snapshots"
SECRET = "sk-ekb-test-SECRET-0123456789abcdef"


def ekb(*args, env=None, timeout=600):
    full = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k != "ANTHROPIC_BASE_URL"}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "edgekernelbench.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full,
    )


def ref_script(pid=TINY) -> str:
    return build_reference(get_problem(pid)).script()


def fenced(code: str, lang="python") -> str:
    return f"```{lang}\n{code}\n```"


def wrong_script() -> str:
    s = ref_script()
    assert "+ b3[v_ax1]" in s
    return s.replace("+ b3[v_ax1]", "- b3[v_ax1]")


SCHEDULE_CODE = """def schedule(name, sch):
    if name != "fused_multiply_add":
        return
    sch.compute_inline(sch.get_sblock("T_multiply"))
    i, j = sch.get_loops(sch.get_sblock("T_add"))
    sch.vectorize(j)
"""


# ------------------------------------------------------------------------------------- prompts
def test_prompt_snapshot():
    from edgekernelbench.tvm_env import host_cpu_name

    profile = get_profile("host-cpu")
    prompt = build_prompt(get_problem(TINY), profile, "direct")
    assert f'"mcpu": "{host_cpu_name()}"' in prompt.user  # the model is told the real CPU
    bits = f"{profile.vector_bits} bits ({profile.vector_lanes} float32 lanes)"
    caches = "caches: " + (", ".join(f"{k} = {v}" for k, v in sorted(profile.caches.items())) or "-")
    assert bits in prompt.user and caches in prompt.user  # ... its vector width and caches, as detected
    # the snapshot holds on any machine: the host's CPU name, the ISA attributes that make it this host,
    # its vector width and caches
    text = re.sub(r'"mattr": \[[^\]]*\], ', "", prompt.user.replace(host_cpu_name(), "HOST_CPU"))
    text = text.replace(bits, "HOST_BITS bits (HOST_LANES float32 lanes)").replace(
        caches, "caches: HOST_CACHES"
    )
    path = SNAPSHOTS / "prompt_direct_tiny_scale_add.txt"
    if os.environ.get("EKB_UPDATE_SNAPSHOTS"):
        path.write_text(text)
    assert text == path.read_text(), "prompt changed: rerun with EKB_UPDATE_SNAPSHOTS=1 and review"
    version, thash = template_info("direct")
    assert prompt.template_version == version == 2 and prompt.template_hash == thash
    for needle in (
        "fused_multiply_add",
        "float32[4, 8]",
        "T.sblock",
        "get_sblock",
        "@I.ir_module",
    ):
        assert needle in prompt.user


def test_schedule_prompt_asks_for_schedule_function():
    prompt = build_prompt(get_problem(TINY), get_profile("rpi4"), "schedule")
    assert "def schedule(name: str, sch)" in prompt.user and "cortex-a72" in prompt.user
    assert "128 bits" in prompt.user and prompt.template_hash != template_info("direct")[1]


# ------------------------------------------------------------------------------------- parsing
OLD = "@I.ir_module\nclass Old:\n    pass"
IMPORTS = "from tvm.script import tirx as T\nimport tvm\n"
MODULE = '@I.ir_module\nclass Module:\n    @T.prim_func(s_tir=True)\n    def f(A: T.Buffer((4,), "float32")):\n        pass\n'


@pytest.mark.parametrize(
    "answer",
    [
        f"Here is the kernel:\n\n{fenced(MODULE)}\n\nIt vectorizes the loop.",
        f"First an idea:\n{fenced('x = 1')}\nThen the module:\n{fenced(MODULE)}\nDone.",
        f"{fenced(OLD)}\nBetter version:\n{fenced(MODULE)}",
        f"Sure! Without a fence:\n\n{MODULE}\nThis should be fast.",
        f"Unclosed fence:\n```python\n{MODULE}",
        "With imports:\n" + fenced(IMPORTS + MODULE),
        f"~~~py\n{MODULE}~~~",
    ],
)
def test_extract_direct_from_messy_answers(answer):
    code = extract_code(answer, "direct")
    assert code.startswith("@I.ir_module") and "class Module" in code and "import" not in code
    assert "vectorizes" not in code and "should be fast" not in code


@pytest.mark.parametrize(
    "answer, needle",
    [
        ("", "empty"),
        ("I cannot help with that, but tiling is a good idea.", "no code block"),
        (fenced("print('hello')"), "none with a TVMScript module"),
    ],
)
def test_extract_failures(answer, needle):
    with pytest.raises(ParseError, match=needle):
        extract_code(answer, "direct")


def test_extract_schedule_code():
    answer = f"Plan:\n{fenced(MODULE)}\nand the schedule:\n{fenced(SCHEDULE_CODE)}\nbye"
    assert extract_code(answer, "schedule") == SCHEDULE_CODE
    with pytest.raises(ParseError):
        extract_code(fenced(MODULE), "schedule")


def test_spec_fields_round_trip_and_parse_error():
    spec = KernelSpec(problem=TINY, schedule_code=SCHEDULE_CODE, metadata={"model": "m"})
    back = KernelSpec.from_json(spec.to_json())
    assert back.schedule_code == SCHEDULE_CODE and back.metadata == {"model": "m"}
    assert "schedule_code" not in KernelSpec(problem=TINY, module="x").to_dict()  # old hashes unchanged
    with pytest.raises(MalformedCandidate, match="'schedule_code' must be Python text"):
        KernelSpec.from_dict({"problem": TINY, "schedule_code": 3})
    with pytest.raises(MalformedCandidate, match="no usable code in the model's response: no code block"):
        KernelSpec.from_dict({"problem": TINY, "metadata": {"parse_error": "no code block"}})


# ------------------------------------------------------------------------------------- providers
def test_model_strings_and_prices():
    assert parse_model("openai:gpt-4o").model == "gpt-4o"
    r = parse_model("openai-compatible:http://127.0.0.1:8000/v1:qwen2.5-coder:7b")
    assert (r.base_url, r.model) == ("http://127.0.0.1:8000/v1", "qwen2.5-coder:7b")
    assert parse_model("anthropic:claude-sonnet-4-test").provider == "anthropic"
    for bad in ("gpt-4o", "foo:bar", "openai-compatible:nourl"):
        with pytest.raises(EKBError):
            parse_model(bad)
    assert price("gpt-4o-mini", 1_000_000, 0) == pytest.approx(0.15)
    assert price("claude-sonnet-4-test", 1000, 1000) == pytest.approx(0.018)
    assert price("my-local-model", 10, 10) is None


def _req(problem=TINY, sample=0):
    return Request("sys", f"problem `{problem}`", {"temperature": 0.0, "max_tokens": 100}, problem, sample)


FAST = RetryPolicy(retries=2, backoff_s=0.01, timeout_s=5)


@pytest.fixture
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.delenv("OPENAI_COMPATIBLE_API_KEY", raising=False)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_providers_through_real_sdks(kind, keys, monkeypatch):
    script = {
        "L1/ok": [{"text": "hello"}],
        "L1/flaky": [{"status": 429}, {"status": 503}, {"text": "after retries"}],
        "L1/down": [{"status": 500}],
        "L1/bad": [{"malformed": True}],
        "L1/slow": [{"sleep": 1.5, "text": "late"}],
        "L1/denied": [{"status": 401}],
    }
    with FakeLLM(script) as fake:
        if kind == "openai":
            spec = f"openai-compatible:{fake.openai_url}:local-model"
        else:
            monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.anthropic_url)
            spec = "anthropic:claude-sonnet-4-test"
        prov = make_provider(spec, FAST)
        c = prov.complete(_req("L1/ok"))
        assert c.text == "hello" and (c.input_tokens, c.output_tokens) == (1000, 200) and c.attempts == 1
        assert fake.calls[-1]["auth"].endswith(SECRET)  # the key is used (and only sent to the server)
        c = prov.complete(_req("L1/flaky"))
        assert c.text == "after retries" and c.attempts == 3
        with pytest.raises(ProviderError, match="InternalServerError"):
            prov.complete(_req("L1/down"))
        assert sum(1 for x in fake.calls if x["problem"] == "L1/down") == 3  # 1 + 2 retries
        with pytest.raises(ProviderError):
            prov.complete(_req("L1/bad"))
        slow = make_provider(spec, RetryPolicy(retries=1, backoff_s=0.01, timeout_s=0.3))
        with pytest.raises(ProviderError, match="Timeout"):
            slow.complete(_req("L1/slow"))
        n = len(fake.calls)
        with pytest.raises(ProviderError):
            prov.complete(_req("L1/denied"))
        assert len(fake.calls) == n + 1  # a 401 is not retried


def test_missing_key_is_an_error(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(EKBError, match="OPENAI_API_KEY is not set"):
        make_provider("openai:gpt-4o")


# ------------------------------------------------------------------------------------- end to end
def _script():
    return {
        TINY: [
            {"text": f"Here you go:\n{fenced(ref_script())}\nThis is the reference, unchanged."},
            {"status": 429},
            {"text": f"A faster one:\n{fenced(wrong_script())}"},
            {"text": "I would tile the loops and vectorize the inner one."},
        ],
        REAL: [{"text": fenced(ref_script(REAL))}],
    }


def _files(root: Path):
    return [p for p in root.rglob("*") if p.is_file()]


def test_generate_eval_report_end_to_end(tmp_path):
    run, cache = tmp_path / "run", tmp_path / "cache.db"
    env = {"OPENAI_API_KEY": SECRET, "EKB_LLM_CACHE": str(cache)}
    with FakeLLM(_script()) as fake:
        model = f"openai-compatible:{fake.openai_url}:local-model"
        gen = [
            "generate",
            "--model",
            model,
            "--level",
            "1",
            "--problem",
            TINY,
            "--problem",
            REAL,
            "--samples",
            "3",
            "--concurrency",
            "1",
            "--retries",
            "2",
            "--out",
            run,
        ]
        p = ekb(*gen, env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "1 without usable code" in p.stdout, p.stdout
        n_calls = len(fake.calls)
        assert n_calls == 7  # tiny: ok, 429 + retry, prose; real: 3 samples
        assert all(c["auth"] == f"Bearer {SECRET}" for c in fake.calls)

        # resumed: every candidate exists, nothing is called
        p = ekb(*gen, env=env)
        assert p.returncode == 0 and "skipped 6 existing" in p.stdout, p.stdout
        assert len(fake.calls) == n_calls

        # cached: a fresh run directory costs no calls; --no-cache calls again
        p = ekb(*[a if a != run else tmp_path / "run2" for a in gen], env=env)
        assert p.returncode == 0 and "(6 from the cache" in p.stdout, p.stdout
        assert len(fake.calls) == n_calls
        p = ekb(
            *[a if a != run else tmp_path / "run3" for a in gen], "--problem", REAL, "--no-cache", env=env
        )
        assert len(fake.calls) > n_calls

    spec = json.loads((run / "candidates" / TINY / "sample0.json").read_text())
    assert "@I.ir_module" in spec["module"] and spec["method"].startswith("llm:")
    assert spec["metadata"]["template_hash"] == template_info("direct")[1]
    assert spec["metadata"]["input_tokens"] == 1000
    bad = json.loads((run / "candidates" / TINY / "sample2.json").read_text())
    assert bad["metadata"]["parse_error"] and "tile the loops" in bad["metadata"]["response"]
    with pytest.raises(MalformedCandidate, match="no usable code"):
        load_candidate(run / "candidates" / TINY / "sample2.json", TINY)

    p = ekb("eval", run, "--no-measure", "--trials", "1", env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    with sqlite3.connect(run / "results.db") as db:
        status = {(pr, s): st for pr, s, st in db.execute("SELECT problem, sample, status FROM results")}
    assert status == {
        (TINY, 0): "correct",
        (TINY, 1): "wrong_output",
        (TINY, 2): "parse_error",
        (REAL, 0): "correct",
        (REAL, 1): "correct",
        (REAL, 2): "correct",
    }
    p = ekb("report", run, "--json", tmp_path / "r.json", env=env)
    assert p.returncode == 0, p.stderr
    assert "generation openai-compatible:" in p.stdout and "6,000 in / 1,200 out" in p.stdout, p.stdout
    assert "cost unknown" in p.stdout
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["generation"][0]["samples"] == 6 and data["generation"][0]["parse_errors"] == 1

    # replay: the recorded answers, no server, same candidates
    replay = tmp_path / "replay"
    p = ekb(
        "generate",
        "--model",
        f"replay:{run / 'responses.jsonl'}",
        "--problem",
        TINY,
        "--problem",
        REAL,
        "--samples",
        "3",
        "--out",
        replay,
        env={"EKB_LLM_CACHE": str(cache)},
    )
    assert p.returncode == 0, p.stdout + p.stderr
    for k in range(3):
        a = json.loads((run / "candidates" / TINY / f"sample{k}.json").read_text())
        b = json.loads((replay / "candidates" / TINY / f"sample{k}.json").read_text())
        assert a["module"] == b["module"] and b["metadata"]["replayed"]

    # the key is nowhere: run directories (candidates, results.db, responses.jsonl) and the cache
    for root in (run, tmp_path / "run2", replay):
        for f in _files(root):
            assert SECRET.encode() not in f.read_bytes(), f
    for f in tmp_path.glob("cache.db*"):
        assert SECRET.encode() not in f.read_bytes(), f


def test_schedule_track_and_anthropic_run(tmp_path):
    """`ekb run --method schedule` with Anthropic: the model's schedule code runs in the worker, the
    trace it made is recorded; a provider failure writes no candidate and is retried by a rerun."""
    run = tmp_path / "run"
    script = {TINY: [{"text": f"Schedule:\n{fenced(SCHEDULE_CODE)}"}], REAL: [{"status": 500}]}
    with FakeLLM(script) as fake:
        env = {
            "ANTHROPIC_API_KEY": SECRET,
            "ANTHROPIC_BASE_URL": fake.anthropic_url,
            "EKB_LLM_CACHE": str(tmp_path / "c.db"),
        }
        p = ekb(
            "run",
            "--method",
            "schedule",
            "--model",
            "anthropic:claude-sonnet-4-test",
            "--problem",
            TINY,
            "--problem",
            REAL,
            "--retries",
            "0",
            "--out",
            run,
            "--no-measure",
            "--trials",
            "1",
            env=env,
        )
        assert p.returncode == 0, p.stdout + p.stderr
        assert fake.calls[0]["path"] == "/v1/messages"
    spec = json.loads((run / "candidates" / TINY / "sample0.json").read_text())
    assert spec["schedule_code"] == SCHEDULE_CODE and spec.get("module") is None
    assert not (run / "candidates" / REAL).exists()
    with sqlite3.connect(run / "results.db") as db:
        (rec,) = [json.loads(r) for (r,) in db.execute("SELECT record FROM results")]
        gens = {
            json.loads(r)["problem"]: json.loads(r) for (r,) in db.execute("SELECT record FROM generations")
        }
    assert rec["correct"], rec["detail"]
    insts = rec["extra"]["schedule_traces"]["fused_multiply_add"][0]
    assert [i[0] for i in insts if i[0] in ("ComputeInline", "Vectorize")] == ["ComputeInline", "Vectorize"]
    assert gens[REAL]["status"] == "provider_error" and SECRET not in json.dumps(gens)
    assert gens[TINY]["cost"] == pytest.approx(0.006)  # 1000 in x $3/M + 200 out x $15/M
    assert "cost $0.0060" in p.stdout
    for f in _files(run):
        assert SECRET.encode() not in f.read_bytes(), f


@pytest.mark.parametrize(
    "model, needle",
    [("foo:bar", "unknown model 'foo:bar'"), ("openai:gpt-4o", "OPENAI_API_KEY is not set")],
)
def test_bad_model_is_one_line_error(tmp_path, model, needle):
    p = ekb("generate", "--model", model, "--problem", TINY, "--out", tmp_path / "r")
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and needle in lines[0], p.stderr
    assert not (tmp_path / "r").exists()


CONSTANTS = "L1/convint_kws_stem"  # an int8 stem: its Relax constants print as ~55 kB of metadata


@pytest.mark.parametrize("track", ["direct", "schedule"])
def test_prompts_leave_out_the_values_of_constants(track):
    ref = build_reference(get_problem(CONSTANTS))
    assert len(ref.script()) > 50_000  # what the prompt would hold with the values
    prompt = build_prompt(get_problem(CONSTANTS), get_profile("host-cpu"), track)
    assert len(prompt.user) < 25_000, len(prompt.user)
    assert "load_json" not in prompt.user and 'metadata["' in prompt.user
    assert "Relax constant(s) (`metadata[...]`) are left out" in prompt.user


def test_a_module_that_uses_the_references_constants_without_their_values_is_judged():
    """A model that copies `main` from the prompt (with `metadata[...]` references, no values) gets the
    reference's constants; a reference to a constant the reference does not have is a parse error."""
    from edgekernelbench.harness.api import evaluate
    from edgekernelbench.harness.isolation import Limits

    text, n = build_reference(get_problem(CONSTANTS)).brief_script()
    assert n >= 1 and "metadata = " not in text
    kw = dict(trials=2, measure=False, limits=Limits(timeout_s=180))
    r = evaluate(CONSTANTS, KernelSpec(problem=CONSTANTS, module=text), **kw)
    assert r.correct, (r.reason, r.detail)
    bad = text.replace('metadata["ir.GenericConst"][0]', 'metadata["ir.GenericConst"][7]')
    assert bad != text
    r = evaluate(CONSTANTS, KernelSpec(problem=CONSTANTS, module=bad), **kw)
    assert not r.correct and r.reason == "parse_error", (r.reason, r.detail)


@pytest.mark.parametrize("concurrency", [1, 3])
def test_generation_sends_at_most_concurrency_calls_at_once(tmp_path, monkeypatch, concurrency):
    from edgekernelbench.llm.generate import GenConfig, generate_run

    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    problems = [get_problem(TINY), get_problem(REAL)]
    answer = {"sleep": 0.4, "text": "no code, just prose"}
    with FakeLLM({TINY: [answer], REAL: [answer]}) as fake:
        cfg = GenConfig(
            model=f"openai-compatible:{fake.openai_url}:local-model",
            samples=3,
            concurrency=concurrency,
            use_cache=False,
            policy=FAST,
        )
        counts = generate_run(tmp_path, problems, get_profile("host-cpu"), cfg)
    assert len(fake.calls) == 6 and counts["parse_errors"] == 6, counts
    assert fake.max_inflight == concurrency  # 6 slow answers: the pool fills up, and never overflows
    for p in problems:
        assert sorted(f.name for f in (tmp_path / "candidates" / p.id).iterdir()) == [
            f"sample{k}.json" for k in range(3)
        ]
