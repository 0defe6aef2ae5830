"""Where in a suite TOML file a table or key is: tomllib gives values without lines, so a bad key is
found again in the text to name its line (``suite bugs.toml line 42: ...``)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any

_HEADER = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.-]+)\s*\]\]?")


class SuiteText:
    """The lines of one suite file with the positions of its table headers."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        #: (line index, table name, is array table) per header, in order
        self.headers: list[tuple[int, str, bool]] = []
        for i, line in enumerate(self.lines):
            m = _HEADER.match(line)
            if m and not line.lstrip().startswith("#"):
                self.headers.append((i, m.group(1), line.lstrip().startswith("[[")))

    def table_span(self, kind: str, index: int) -> tuple[int, int] | None:
        """``(first, end)`` line indexes (0-based, end exclusive) of the ``index``-th ``[[kind]]`` table
        (or of ``[kind]`` for index 0), its sub-tables (``[kind.inputs.v]``) included, or None when not found."""
        seen = -1
        for n, (i, name, _) in enumerate(self.headers):
            if name != kind:
                continue
            seen += 1
            if seen == index:
                after = (h for h in self.headers[n + 1:] if not (h[1].startswith(kind + ".") and not h[2]))
                return i, next((h[0] for h in after), len(self.lines))
        return None

    def line_of(self, kind: str, index: int, keys: Iterable[str] = ()) -> int | None:
        """1-based line of the innermost of ``keys`` (a path such as ``("inputs", "q", "value")``) found in
        the ``index``-th ``[[kind]]`` table, searching from the line of the outer key on; else the line of
        the outermost key found; else the table's header; None if the table is not found."""
        span = self.table_span(kind, index)
        if span is None:
            return None
        first, end = span
        best = first
        start = first
        for key in keys:
            k = re.escape(str(key))
            # `key =`, `key.sub =`, `{ key = ...`; or a sub-table header naming it: `[scenario.inputs.v]`
            pat = re.compile(r'(^|[\s{,])"?' + k + r'"?\s*[.=]|^\s*\[[^\]]*\.' + k + r'\s*[.\]]')
            hit = next((i for i in range(start, end) if pat.search(_strip_comment(self.lines[i]))), None)
            if hit is None:
                break
            best = start = hit
        return best + 1


def _strip_comment(line: str) -> str:
    out, quote = [], None
    for ch in line:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            break
        out.append(ch)
    return "".join(out)


def suggest(word: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest known word, or an empty string."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def describe_error(err: dict[str, Any], tags: Iterable[str] = ()) -> tuple[list[str], str]:
    """``(key path, message)`` of one pydantic error: union tags (a distribution's name) dropped from the
    path, 'extra_forbidden' as ``unknown key``, the ``Value error,`` prefix removed."""
    tags = set(tags)
    path = [str(p) for p in err.get("loc", ()) if not isinstance(p, int) and str(p) not in tags]
    msg = str(err.get("msg", "invalid"))
    if err.get("type") == "extra_forbidden":
        key = path[-1] if path else "?"
        inside = ".".join(path[:-1])
        return path, f"{inside + ': ' if inside else ''}unknown key {key!r}"
    msg = msg.removeprefix("Value error, ")
    return path, (f"{'.'.join(path)}: {msg}" if path else msg)


def not_utf8_text(raw: bytes, exc: UnicodeDecodeError) -> str:
    """Where a file stops being UTF-8, for a person: ``line 2, column 9: byte 0xff is not UTF-8 (save the file
    as UTF-8)``, instead of the codec's byte offset."""
    before = raw[:exc.start]
    line = before.count(b"\n") + 1
    column = exc.start - (before.rfind(b"\n") + 1) + 1
    return f"line {line}, column {column}: byte 0x{raw[exc.start]:02x} is not UTF-8 (save the file as UTF-8)"
