"""Headless Chromium for the HTML report: the DOM after the page's scripts ran, the console messages it
logged, and screenshots. Used by tests/test_report_html.py and for the README's screenshot::

    python tests/chromium.py screenshot report.html docs/report.png --size 1400x2200 --colors 128
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# Chromium's own log lines for what a page writes to its console (log, warn, error, uncaught exceptions):
# [pid:tid:time:INFO:CONSOLE(12)] "message", source: file:///... (12)   (older: CONSOLE(12), newer: CONSOLE:12)
CONSOLE_RE = re.compile(r":CONSOLE[(:]\d*\)?\]\s*(.*)")


def find() -> str | None:
    """The Chromium executable on PATH, or None."""
    for name in NAMES:
        if path := shutil.which(name):
            return path
    return None


def _run(page: Path, *args: str, fragment: str = "", timeout: float = 120) -> subprocess.CompletedProcess:
    exe = find()
    if exe is None:
        raise FileNotFoundError(
            "chromium is not installed (Debian: apt-get install chromium; `make browser`)"
        )
    with tempfile.TemporaryDirectory(prefix="ekb-chromium-") as profile:
        cmd = [
            exe,
            "--headless=new",
            "--no-sandbox",  # root in CI; the page is our own file
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            *args,
            Path(page).resolve().as_uri() + fragment,
        ]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def console_messages(stderr: str) -> list[str]:
    """The page's console messages in Chromium's stderr log."""
    return [m.group(1) for line in stderr.splitlines() if (m := CONSOLE_RE.search(line))]


def dump_dom(page: Path, fragment: str = "") -> tuple[str, list[str]]:
    """(the DOM after load, serialized; the console messages logged while loading)."""
    p = _run(page, "--dump-dom", "--virtual-time-budget=5000", fragment=fragment)
    if p.returncode != 0:
        raise RuntimeError(f"chromium --dump-dom failed ({p.returncode}): {p.stderr[-2000:]}")
    return p.stdout, console_messages(p.stderr)


def screenshot(page: Path, out: Path, width: int = 1400, height: int = 3000, colors: int = 0) -> list[str]:
    """Writes a PNG of the page's first `height` pixels to `out`; returns the console messages. `colors`:
    quantize to that many colours (Pillow) to keep the file small; 0 keeps it as taken."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    p = _run(page, f"--screenshot={out.resolve()}", f"--window-size={width},{height}", "--hide-scrollbars")
    if p.returncode != 0 or not out.is_file():
        raise RuntimeError(f"chromium --screenshot failed ({p.returncode}): {p.stderr[-2000:]}")
    if colors:
        from PIL import Image

        with Image.open(out) as im:
            small = im.convert("RGB").quantize(colors=colors, method=Image.Quantize.MEDIANCUT)
        small.save(out, optimize=True)
    return console_messages(p.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("screenshot", help="a PNG of a page")
    s.add_argument("page", type=Path)
    s.add_argument("out", type=Path)
    s.add_argument("--size", default="1400x3000", help="WIDTHxHEIGHT of the window (px)")
    s.add_argument("--colors", type=int, default=0, help="quantize to this many colours (0: no)")
    args = ap.parse_args(argv)
    width, height = (int(x) for x in args.size.lower().split("x"))
    messages = screenshot(args.page, args.out, width, height, args.colors)
    for m in messages:
        print(f"console: {m}", file=sys.stderr)
    print(f"{args.out}: {args.out.stat().st_size / 1024:.0f} KiB")
    return 1 if messages else 0


if __name__ == "__main__":
    sys.exit(main())
