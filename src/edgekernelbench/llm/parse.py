"""Code out of a model's answer: prose around it, several code blocks, a missing or unclosed fence.

Pure text work (no exec, no TVM): the parent process only picks the text; the worker parses it.
"""

from __future__ import annotations

import re

from ..errors import EKBError

_FENCE = re.compile(r"^[ \t]*(```+|~~~+)[ \t]*([\w+.-]*)[^\n]*$", re.M)
_CODE_START = re.compile(
    r"^(@I\.ir_module|@tvm\.script\.ir_module|@T\.prim_func|from tvm|import tvm|def schedule\b|class \w+)"
)


class ParseError(EKBError):
    """The model's answer holds no code of the kind asked for."""


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of each fenced block, in order; an unclosed last fence runs to the end."""
    blocks, pos = [], 0
    while True:
        m = _FENCE.search(text, pos)
        if not m:
            break
        fence, lang = m.group(1), m.group(2).lower()
        close = re.compile(rf"^[ \t]*{re.escape(fence[0]) * len(fence)}[ \t]*$", re.M)
        end = close.search(text, m.end())
        body = text[m.end() + 1 : end.start() if end else len(text)]
        blocks.append((lang, body.rstrip() + "\n"))
        if not end:
            break
        pos = end.end()
    return blocks


def _unfenced(text: str) -> str | None:
    """Code written without a fence: from the first line that starts code to the last code-like line."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if _CODE_START.match(ln)), None)
    if start is None:
        return None
    end = start
    for i in range(start, len(lines)):
        ln = lines[i]
        if (
            not ln.strip()
            or ln[0] in " \t#@)]}"
            or _CODE_START.match(ln)
            or re.match(r"^(def|class|return)\b", ln)
        ):
            if ln.strip():
                end = i
            continue
        break  # an unindented line of prose: the code ended
    return "\n".join(lines[start : end + 1]).rstrip() + "\n"


def _wanted(track: str):
    if track == "direct":
        return lambda code: "ir_module" in code or "prim_func" in code, "a TVMScript module (@I.ir_module)"
    if track == "schedule":
        return (
            lambda code: re.search(r"^def schedule\s*\(", code, re.M) is not None,
            "def schedule(name, sch)",
        )
    raise ValueError(f"unknown track {track!r}")


def extract_code(text: str, track: str = "direct") -> str:
    """The code the answer gives for `track`: the last fenced block that defines what the track needs
    (a module with @I.ir_module, preferred over bare PrimFuncs; or `def schedule`), else unfenced code
    that does; raises ParseError when there is none."""
    if not isinstance(text, str) or not text.strip():
        raise ParseError("empty response")
    ok, what = _wanted(track)
    blocks = [code for _, code in code_blocks(text)]
    if track == "direct":
        modules = [c for c in blocks if "ir_module" in c]
        if modules:
            return _strip_prompt_imports(modules[-1])
    good = [c for c in blocks if ok(c)]
    if good:
        return _strip_prompt_imports(good[-1]) if track == "direct" else good[-1]
    loose = _unfenced(text)
    if loose and ok(loose):
        return _strip_prompt_imports(loose) if track == "direct" else loose
    found = f"{len(blocks)} code block(s), none with {what}" if blocks else "no code block"
    raise ParseError(f"{found} in the response")


def _strip_prompt_imports(code: str) -> str:
    """Import lines are not TVMScript (the worker drops them too); keep the rest as written."""
    kept = [ln for ln in code.splitlines() if not re.match(r"^(from tvm\S* import|import tvm)", ln.strip())]
    return "\n".join(kept).strip("\n") + "\n"
