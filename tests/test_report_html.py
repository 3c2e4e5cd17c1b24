"""`ekb report RUN [RUN ...] --html`: a small real run (two agent methods and `ekb eval` of failing and
reference candidates on tiny problems) rendered to one static page and opened in headless Chromium: no
console errors, the tables and plots are there, the sorting and the source viewer work, a screenshot is
kept (tests/artifacts/, not committed); the page loads nothing from outside; several runs are compared
on the problems they all have; bad output paths are one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import chromium
import pytest
from test_cli import assert_one_line_error, ekb, write_candidates
from test_harness import CORRECT, prim

from edgekernelbench import metrics
from edgekernelbench.report.html import build_html, fast_curve, load_run
from edgekernelbench.store import ENV_KEY, RunStore

TINY = "L1/tiny_scale_add"
MATMUL = "L1/tiny_matmul_128"
ARTIFACTS = Path(__file__).parent / "artifacts"  # gitignored: the screenshot a run of the tests leaves


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run "agents": LEKA on the tiny problem (budget 2), then `ekb eval` of two failing
    candidates of it and of the reference + rule-based candidates of a 128x128 matmul. Run "other": one
    correct candidate of the tiny problem only."""
    from edgekernelbench.generators.reference_candidates import write_reference_candidates
    from edgekernelbench.problems import get_problem

    root = tmp_path_factory.mktemp("html")
    agents, other = root / "agents", root / "other"
    cmd = [sys.executable, "-m", "edgekernelbench.cli", "agent", "--problem", TINY, "--methods", "leka"]
    cmd += ["--budget", "2", "--quick", "--check-trials", "2", "--out", str(agents)]
    p = subprocess.run([*cmd, "--kernel-db", str(root / "kernels.db")], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    write_candidates(agents, {10: "{not json", 11: prim("T.evaluate(0)")})
    write_reference_candidates([get_problem(MATMUL)], agents)
    ekb("eval", agents, "--quick", "--trials", "2", check=True)
    write_candidates(other, {0: CORRECT})
    with RunStore(agents) as a, RunStore(other) as b:  # the same machine: its peaks measured once
        for key in a.meta_keys("peak:"):
            b.set_meta(key, a.get_meta(key))
    ekb("eval", other, "--quick", "--trials", "2", check=True)
    return agents, other


@pytest.fixture(scope="module")
def page(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("page") / "report.html"
    p = ekb("report", runs[0], "--html", out, check=True)
    assert f"wrote {out}" in p.stdout.replace("\n", "")
    return out


@pytest.fixture(scope="module")
def browser():
    if chromium.find() is None:
        if os.geteuid() != 0:
            pytest.skip("no chromium here and not root to install it (`make browser` as root installs it)")
        pytest.fail("chromium is missing: `make test` as root installs it (`make browser`)")
    return chromium


class _Doc(HTMLParser):
    """Tags with their attributes, and the text of each table's cells, of a page."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.tables: dict[str, list[list[str]]] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "table" and a.get("id"):
            self._table = a["id"]
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._table and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def count(self, tag: str, **attrs) -> int:
        return sum(1 for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items()))


def _rows(doc: _Doc, table: str) -> list[dict[str, str]]:
    head, *body = doc.tables[table]
    return [dict(zip(head, row, strict=True)) for row in body]


def test_the_page_in_headless_chromium(runs, page, browser):
    with RunStore(runs[0]) as s:
        results = s.results()
    dom, console = browser.dump_dom(page, "#selftest")
    assert console == []
    doc = _Doc(dom)
    ids = {a.get("id") for _, a in doc.tags}
    assert {"summary", "fast", "roofline", "agents", "failures", "problems", "metadata"} <= ids
    # plots: Fast@p (one backend), the roofline, the agents' anytime curves, the failure reasons
    assert doc.count("svg", **{"class": "plot"}) == 4
    assert doc.count("table", **{"class": "summary"}) >= 1 + 4  # the run's table, and one per method
    samples = _rows(doc, "problems-table")
    assert len(samples) == len(results)
    status = {(r["problem"], r["sample"]): r["status"] for r in samples}
    assert status[(TINY, "10")] == "parse_error" and status[(TINY, "11")] == "nan_output"
    assert status[(MATMUL, "0")] == "correct"
    # the page's own script ran: it sorted the samples by problem (twice: descending; the table starts
    # ascending) and opened a candidate in the viewer
    selftest = json.loads(re.search(r'data-selftest="([^"]*)"', dom).group(1).replace("&quot;", '"'))
    initial = [r["problem"] for r in _rows(_Doc(page.read_text()), "problems-table")]
    assert initial == sorted(initial)
    assert selftest["sorted"] == sorted(selftest["sorted"], reverse=True) != sorted(selftest["sorted"])
    assert len(selftest["sorted"]) == len(results)
    assert selftest["open"] and selftest["viewer"] > 0
    # a screenshot, kept as the test's artifact
    shot = ARTIFACTS / "report_html.png"
    shot.unlink(missing_ok=True)
    assert browser.screenshot(page, shot, 1400, 3000) == []
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


def test_console_error_detection_catches_a_throw(page, browser, tmp_path):
    """The check above can fail: the same page with a script that throws is caught."""
    broken = tmp_path / "broken.html"
    text = page.read_text()
    assert text.count("<script>") == 1
    broken.write_text(text.replace("<script>", '<script>throw new Error("injected failure");', 1))
    dom, console = browser.dump_dom(broken, "#selftest")
    assert any("injected failure" in m for m in console), console
    assert "data-selftest" not in dom  # the page's own script never ran


def outside_references(text: str) -> list[str]:
    """What in a page would be fetched or point outside it: src/href not to an id on the page, elements
    that load things, CSS url() and @import, and any address but the inline SVG's namespace names."""
    doc = _Doc(text)
    found = [
        f"{t} {k}={v}"
        for t, a in doc.tags
        for k, v in a.items()
        if k in ("src", "href", "xlink:href", "data", "srcset", "poster", "action")
        and v
        and not v.startswith("#")
    ]
    found += [t for t, _ in doc.tags if t in ("link", "iframe", "img", "object", "embed", "base", "frame")]
    found += re.findall(r"url\((?!#)[^)]*\)", text) + re.findall(r"@import[^;]*", text)
    rest = re.sub(r'\bxmlns(:\w+)?="[^"]*"', "", text)  # namespace names: never fetched
    found += re.findall(r"(?:https?:)?//[\w.-]+\.\w[^\s\"'<>]*", rest)
    return found


def test_the_page_loads_nothing_from_outside(page):
    text = page.read_text()
    assert outside_references(text) == []
    assert text.count("<svg") >= 4 and "<script>" in text  # the plots and the script are inline
    assert len(text.encode()) < 2 * 2**20
    # the check sees what a CDN-built page would have
    for bad in (
        '<script src="https://cdn.jsdelivr.net/npm/plotly.js"></script>',
        '<link rel="stylesheet" href="//fonts.googleapis.com/css?family=Roboto">',
        "<style>body { background: url(https://example.org/bg.png); }</style>",
        '<img src="plot.png">',
    ):
        assert outside_references(text.replace("</head>", bad + "</head>", 1)), bad


def test_the_page_holds_what_the_run_holds(runs, page):
    doc = _Doc(page.read_text())
    text = page.read_text()
    failures = {r["method"]: r for r in _rows(doc, "failures-table")}
    assert failures["tvmscript-file"]["nan_output"] == "1" and failures["unknown"]["parse_error"] == "1"
    assert failures["agent:leka"]["correct"] == "1" and failures["agent:leka"]["samples"] == "1"
    assert "agents: one budget per problem and method" in text and "Anytime curves" in text
    assert "ceilings: measured" in text  # the run's own peak record drew the ceilings
    with RunStore(runs[0]) as s:
        env = s.get_meta(ENV_KEY)
    assert len(env) == 1 and env[0]["tvm"] and env[0]["onnxruntime"]  # agent and eval: the same machine
    assert f"TVM {env[0]['tvm']}, ONNX Runtime {env[0]['onnxruntime']}" in text
    assert "namespaces user, pid" in text and "interleaved rounds" in text
    # the candidate's decisions are one click away: its text is on the page
    run = load_run(runs[0])
    leka = next(r for r in run.results if r.method == "agent:leka")
    spec = json.loads(Path(runs[0], "candidates", TINY, f"sample{leka.sample}.json").read_text())
    # (with a budget of 2 on a noisy machine, LEKA may keep no decision at all: every layer then shows empty)
    shown = text.replace("&#34;", '"')
    for layer, entries in spec["decisions"].items():
        assert f'"{layer}"' in shown and all(f'"{name}"' in shown for name in entries)


def test_fast_curve_steps_are_fast_at_p(runs):
    """Between the steps, the curve is the Fast@p of the metrics module at every p."""
    results = load_run(runs[0]).results
    for baseline in ("tvm-default", "onnxruntime"):
        ps, values = fast_curve(results, baseline)
        assert (
            ps[0] == 0.0 and ps == sorted(ps) and ps[-1] >= max(r.speedups.get(baseline, 0) for r in results)
        )
        for a, b, v in zip(ps, ps[1:], values, strict=False):
            for q in (a, (a + b) / 2):
                assert metrics.fast_at_k(results, q, baseline, 1).value == pytest.approx(v)


def test_two_runs_are_compared_on_the_problems_they_share(runs, tmp_path):
    text = build_html(list(runs))
    doc = _Doc(text)
    samples = _rows(doc, "problems-table")
    assert {r["problem"] for r in samples} == {TINY}
    assert {r["run"] for r in samples} == {"agents", "other"}
    assert "Compared on the 1 problem every run has" in text and f"Left out of agents: {MATMUL}" in text
    assert "agents · host-cpu" in text and "other · host-cpu" in text  # the side-by-side table


def test_bad_output_and_runs_without_results_are_one_line(runs, tmp_path):
    assert_one_line_error(
        ekb("report", runs[1], "--html", tmp_path / "no" / "such" / "r.html"), "no such directory"
    )
    assert_one_line_error(ekb("report", runs[1], "--html", tmp_path), "is a directory")
    RunStore(tmp_path / "empty").close()
    assert_one_line_error(ekb("report", tmp_path / "empty", "--html", tmp_path / "r.html"), "no results yet")
    assert_one_line_error(ekb("report", *runs, "--json", tmp_path / "r.json"), "take one run directory")


def test_the_run_store_records_each_machine_once(tmp_path):
    env = {"host": "a", "cpu": "x", "tvm": "0.27"}
    with RunStore(tmp_path) as s:
        assert s.created_range() is None and s.meta_keys("peak:") == []
        s.record_environment(env)
        s.record_environment(env)
        (first,) = s.get_meta(ENV_KEY)
        s.record_environment({**env, "tvm": "0.28"})  # the run resumed after an upgrade
        seen = s.get_meta(ENV_KEY)
        s.set_meta("peak:host-cpu:1", {"flops": 1.0})
        assert s.meta_keys("peak:") == ["peak:host-cpu:1"]
    assert first["last_seen"] >= first["first_seen"] and first["host"] == "a"
    assert [e["tvm"] for e in seen] == ["0.27", "0.28"]
