"""Renders results/*.json (each benchmark's latest run: benchmarks/results_io.py) into docs/results.md and
the README's headline table (between its `results:start` and `results:end` markers).

    python benchmarks/render_results.py            # writes both
    python benchmarks/render_results.py --check    # exit 1 when either differs from what the JSON says

tests/test_results_page.py runs the check, so the pages people read always say what the JSON files say.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
PAGE = ROOT / "docs" / "results.md"
README = ROOT / "README.md"
START, END = "<!-- results:start (python benchmarks/render_results.py) -->", "<!-- results:end -->"
ORDER = (
    "identical_code",
    "judge_overhead",
    "suite_l1",
    "suite_l3_leka",
    "suite_l3_leka_host_avx2",
    "leka_vs_metaschedule",
    "zoo",
    "zoo_host_avx2",
    "zoo_avx512",
)


def load(results: Path = RESULTS) -> list[dict]:
    """Every results file, in ORDER and then by name."""
    reports = [json.loads(p.read_text()) for p in sorted(results.glob("*.json"))]
    rank = {name: i for i, name in enumerate(ORDER)}
    return sorted(reports, key=lambda r: (rank.get(r["benchmark"], len(ORDER)), r["benchmark"]))


def _vectors(m: dict) -> str:
    """What a figure's code was built for: a hypervisor may hide AVX-512 from a CPU that has it."""
    return f"; {m['vector_bits']}-bit vectors" if m.get("vector_bits") else ""


def machine_line(m: dict) -> str:
    isa = ", ".join(m.get("isa") or []) or "?"
    backend = m.get("backend") or "host-cpu"
    vectors = _vectors(m)
    built = "" if backend == "host-cpu" else f", built for {backend}"
    return (
        f"{m.get('cpu') or '?'} (LLVM {m.get('llvm_cpu', '?')}: {isa}{vectors}){built}, "
        f"{m.get('threads', 1)} thread(s)"
    )


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    return "-" if v is None else str(v)


def section(r: dict) -> list[str]:
    lines = [
        f"## {r.get('title', r['benchmark'])}",
        "",
        r.get("about", "").strip(),
        "",
        f"- **{r['headline']['what']}: {r['headline']['figure']}**",
        f"- machine: {machine_line(r.get('machine') or {})}; {r['date']}, commit {r['commit']}",
        f"- protocol: {r.get('protocol', '-')}",
        f"- command: `{r['command']}`",
    ]
    for note in r.get("notes") or []:
        lines.append(f"- {note}")
    table = r.get("table")
    if table and table.get("rows"):
        lines += ["", "| " + " | ".join(table["columns"]) + " |", "|" + "---|" * len(table["columns"])]
        lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in table["rows"]]
    return [ln for ln in lines if ln is not None] + [""]


def page(reports: list[dict]) -> str:
    head = [
        "# Results",
        "",
        "The latest run of each benchmark, rendered from results/*.json by `python benchmarks/render_results.py`"
        " (do not edit by hand; rerun the benchmark's command, then the renderer). Every figure names the"
        " machine it ran on: speedups are paired ratios measured side by side in one run, with their 95%"
        " interval where the benchmark has one. History: `git log -p results/`.",
        "",
    ]
    body = [ln for r in reports for ln in section(r)]
    return "\n".join(head + body).rstrip() + "\n"


def headline_table(reports: list[dict]) -> str:
    lines = ["| what | figure | machine | date |", "|---|---|---|---|"]
    for r in reports:
        m = r.get("machine") or {}
        where = f"{m.get('cpu') or '?'}, {', '.join(m.get('isa') or []) or '?'}{_vectors(m)}"
        lines.append(f"| {r['headline']['what']} | {r['headline']['figure']} | {where} | {r['date']} |")
    return "\n".join(lines)


def readme(text: str, reports: list[dict]) -> str:
    if START not in text or END not in text:
        raise SystemExit(f"README.md has no {START} ... {END} block")
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    return before + START + "\n" + headline_table(reports) + "\n" + END + after


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 when a page is stale")
    args = ap.parse_args(argv)
    reports = load()
    want = {PAGE: page(reports), README: readme(README.read_text(), reports)}
    stale = [p for p, text in want.items() if not p.exists() or p.read_text() != text]
    if args.check:
        for p in stale:
            print(
                f"{p.relative_to(ROOT)} is not what results/*.json say: run python benchmarks/render_results.py"
            )
        return 1 if stale else 0
    for p in stale:
        p.write_text(want[p])
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
