"""The candidate's source text as the preprocessor reads it, for the raw policy scans (harness/policy.py).

The raw scans run before nvcc reads anything, on the candidate's own files. They must see what the preprocessor
sees, not the physical lines: a line splice (``#\\`` then a new line), the digraph ``%:`` for ``#`` and a ``#``
token that a macro carries into the preprocessed text (``#define H # include "/etc/passwd"``; nvcc's later passes
read such a line as a directive) hid line markers, system_header pragmas and includes from the scans of session 16
(red team, session 17). Translation phases as in C++17 [lex.phases]: splices (phase 2) before comments and tokens
(phase 3); trigraphs are gone in C++17.
"""

from __future__ import annotations

import re

__all__ = ["logical_text", "stray_hashes"]

_COMMENT_OR_LITERAL_RE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.DOTALL)
_DEFINE_RE = re.compile(r"^\s*#\s*define\s+[A-Za-z_]\w*(?P<params>\([^)]*\))?(?P<body>.*)$")
_HASH_PARAM_RE = re.compile(r"#\s*([A-Za-z_]\w*)")


def logical_text(text: str) -> tuple[str, list[int], str]:
    """The text after line splicing, with comments blanked and digraphs spelled as ``#`` / ``##``.

    Returns ``(kept, lines, blank)``: ``kept`` keeps string and character literals (include names, ``_Pragma``
    strings), ``blank`` has their contents blanked too (for :func:`stray_hashes`); both have one line per logical
    line, and ``lines[i]`` is the 1-based physical line where logical line ``i`` starts.
    """
    logical: list[str] = []
    lines: list[int] = []
    pending = ""
    start = 1
    for number, physical in enumerate(text.split("\n"), start=1):
        physical = physical.removesuffix("\r")
        if not pending:
            start = number
        if physical.endswith("\\"):
            pending += physical[:-1]
            continue
        logical.append(pending + physical)
        lines.append(start)
        pending = ""
    if pending:
        logical.append(pending)
        lines.append(start)
    joined = "\n".join(logical)

    def kept_repl(m: re.Match[str]) -> str:
        s = m.group(0)
        return s if s[0] in "\"'" else re.sub(r"[^\n]", " ", s)

    def blank_repl(m: re.Match[str]) -> str:
        s = m.group(0)
        if s[0] in "\"'":
            return s[0] + " " * (len(s) - 2) + s[-1]
        return re.sub(r"[^\n]", " ", s)

    kept = _COMMENT_OR_LITERAL_RE.sub(kept_repl, joined)
    blank = _COMMENT_OR_LITERAL_RE.sub(blank_repl, joined)
    return _digraphs(kept), lines, _digraphs(blank)


def _digraphs(s: str) -> str:
    return s.replace("%:%:", "##").replace("%:", "#")


def stray_hashes(blank: str, lines: list[int]) -> list[int]:
    """Physical lines holding a ``#`` that is neither a directive's own nor a macro operator (``##``, or ``#``
    before a parameter of a function-like macro): a ``#`` carried into the preprocessed text as a token (in an
    object-like macro's body or a macro argument) can become a directive for nvcc's later passes.

    ``blank``/``lines``: from :func:`logical_text`.
    """
    out = []
    for i, line in enumerate(blank.split("\n")):
        body = line
        params: set[str] = set()
        stripped = line.lstrip()
        if stripped.startswith("#"):
            m = _DEFINE_RE.match(line)
            if not m:
                continue  # another directive: its '#' is the directive's own
            body = m.group("body")
            if m.group("params") is not None:
                params = {p.strip() for p in m.group("params")[1:-1].split(",")} | {"__VA_ARGS__", "__VA_OPT__"}
        rest = body.replace("##", "  ")
        for hm in re.finditer("#", rest):
            pm = _HASH_PARAM_RE.match(rest, hm.start())
            if not (pm and pm.group(1) in params):
                out.append(lines[i])
                break
    return out
