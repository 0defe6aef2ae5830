"""Compiler messages: the :class:`Diagnostic` model and the parser of nvcc's, cudafe's, gcc's and ptxas's output."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel

__all__ = ["Diagnostic", "parse_diagnostics"]


class Diagnostic(BaseModel):
    """One compiler message. ``line``/``column`` 1-based (None when the tool gives none)."""

    file: str
    line: int | None = None
    column: int | None = None
    severity: Literal["error", "warning"]
    message: str


_CUDAFE_RE = re.compile(r"^(?P<file>\S[^(]*?)\((?P<line>\d+)\): (?P<sev>catastrophic error|error|warning)"
                        r"(?: #[\w-]+)?: (?P<msg>.*)$")
_GCC_RE = re.compile(r"^(?P<file>[^:\s][^:]*?):(?P<line>\d+):(?:(?P<col>\d+):)? "
                     r"(?P<sev>fatal error|error|warning): (?P<msg>.*)$")
_TOOL_RE = re.compile(r"^(?P<file>ptxas|nvlink|nvcc|fatbinary|collect2)(?::)?\s*(?P<sev>fatal|error|warning)\s*: ?"
                      r"(?P<msg>.*)$")


def parse_diagnostics(text: str) -> list[Diagnostic]:
    """Errors (in order) then warnings from nvcc/cudafe ``file(line): error: msg``, gcc
    ``file:line:col: error: msg`` and ``ptxas error : msg`` lines; duplicates dropped."""
    errors: list[Diagnostic] = []
    warnings: list[Diagnostic] = []
    seen: set[tuple] = set()
    lines = text.splitlines()
    for i, raw in enumerate(lines):
        line = raw.rstrip()
        d = None
        if m := _CUDAFE_RE.match(line):
            d = Diagnostic(file=m["file"], line=int(m["line"]), severity="warning" if m["sev"] == "warning" else "error",
                           message=m["msg"].strip(), column=_caret_column(lines[i + 1:i + 3]))
        elif m := _GCC_RE.match(line):
            d = Diagnostic(file=m["file"], line=int(m["line"]), column=int(m["col"]) if m["col"] else None,
                           severity="warning" if m["sev"] == "warning" else "error", message=m["msg"].strip())
        elif m := _TOOL_RE.match(line):
            d = Diagnostic(file=m["file"], severity="warning" if m["sev"] == "warning" else "error",
                           message=m["msg"].strip())
        if d is None:
            continue
        key = (d.file, d.line, d.column, d.severity, d.message)
        if key not in seen:
            seen.add(key)
            (errors if d.severity == "error" else warnings).append(d)
    return errors + warnings


_CARET_RE = re.compile(r"^ *\^\s*$")


def _caret_column(following: list[str]) -> int | None:
    """The 1-based column of a cudafe diagnostic from the two lines after it, or None.

    cudafe prints the offending source line indented by two spaces (a tab shown as one space) and,
    under it, a caret at the column: ``  int y = undefined_thing;`` / ``          ^``.
    """
    if len(following) == 2 and following[0].startswith("  ") and _CARET_RE.match(following[1]):
        return max(1, following[1].index("^") - 1)
    return None
