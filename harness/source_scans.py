"""The policy's scans of the candidate's preprocessed code for names of controlled symbols (harness/policy.py).

Both read ``nvcc -E`` output (either preprocessor pass: harness/nvcc_passes.py), only the lines of the candidate's
own files, after the preprocessor: comments are gone, macros expanded, token pasting and stringification done.
String literals are judged as the compiler reads them: adjacent literals concatenated, escapes decoded.

- :func:`scan_driver_entry_points`: ``cudaGetDriverEntryPoint*`` only as a direct call naming a ``cuTensorMap*``
  function; and no string literal naming the entry-point functions, however it is spelled (concatenated, escaped):
  such a string can only make the symbol reachable under another name (an asm label, ``weakref``/``alias``
  attributes, ``.set``/``.symver`` in assembler text).
- :func:`scan_asm_labels`: an asm label (``asm``/``__asm``/``__asm__`` right after a declarator, e.g.
  ``extern "C" int f(...) __asm__("cudaGetDriverEntryPoint");``) binds the declared function to the symbol its
  string names, so a call of ``f`` is a call of that symbol (red team, session 17). A label must be one plain
  string literal whose value is a plain symbol name, and that name must not be one the policy forbids or controls
  (the judge comes from harness.policy). Inline asm *statements* (``asm volatile("mma.sync...")``, PTX in device
  code) are not labels; their text is judged by the entry-point rule and :func:`scan_asm_text`.
- :func:`scan_asm_text`: every string literal of the candidate's own code, read as GNU as reads it
  (harness/asm_text.py: case ignored, ``/* */`` comments, quotes and backslashes removed; an asm statement's template
  also as gcc prints it, operands and dialect alternatives resolved), may not hold a directive that reads a file
  (``.incbin``, ``.include``), builds text (``.macro``, ``.irp``, ``.rept``, ...) or binds one name to another
  (``.set``, ``.symver``, ...); an asm template may not paste an operand onto a name (``.%c0``), no string may hold
  a ``/*`` comment, an asm statement's text must be a string literal, and no assembler reading of a string may name
  the driver entry points (``"cudaGetDriver""EntryPoint"``, ``cudaGetDriver/**/EntryPoint``).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass

from harness.asm_text import DENIED_DIRECTIVES, assembler_views, denied_directives, opens_comment, pastes_operand
from harness.violations import PolicyViolation

__all__ = [
    "ENTRY_POINT_ALLOWED_RE",
    "ENTRY_POINT_FAMILY",
    "MARKER_RE",
    "LiteralRun",
    "Token",
    "asm_labels",
    "asm_statements",
    "decode_literal",
    "entry_point_name_allowed",
    "literal_runs",
    "owned_lines",
    "scan_asm_labels",
    "scan_asm_text",
    "scan_driver_entry_points",
    "tokens",
]

#: A GNU line marker of ``-E`` output: ``# N "file" flags``.
MARKER_RE = re.compile(r'^# (\d+) "((?:[^"\\]|\\.)*)"((?: \d)*)\s*$')
#: The one family of driver functions a candidate may resolve: TMA tensor maps (cuTensorMapEncodeTiled, ...).
ENTRY_POINT_ALLOWED_RE = re.compile(r"cuTensorMap[A-Za-z0-9_]*")
ENTRY_POINT_FAMILY = "cudaGetDriverEntryPoint"
_ENTRY_POINT_RE = re.compile(r"\bcudaGetDriverEntryPoint\w*")

_TOKEN_RE = re.compile(r"""
    (?P<raw>(?:u8|u|U|L)?R"(?P<delim>[^()\\\s"]{0,16})\((?P<rawbody>.*?)\)(?P=delim)")
  | (?P<str>(?P<prefix>u8|u|U|L)?"(?P<body>(?:\\.|[^"\\\n])*)")
  | (?P<chr>(?:u8|u|U|L)?'(?:\\.|[^'\\\n])*')
  | (?P<num>\.?\d(?:[eEpP][+-]|'\w|[\w.])*)
  | (?P<id>[A-Za-z_$][\w$]*)
  | (?P<ws>\s+)
  | (?P<punct>.)""", re.VERBOSE | re.DOTALL)
_ESCAPE_RE = re.compile(r"\\(?:([0-7]{1,3})|x([0-9A-Fa-f]+)|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))", re.DOTALL)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "e": "\x1b",
                   "E": "\x1b"}  # \E: ESC too (a GNU escape nvcc's front end reads as gcc does)


def entry_point_name_allowed(name: str) -> bool:
    """True when ``name`` (the whole driver function name) may be resolved: ``cuTensorMap*`` only."""
    return ENTRY_POINT_ALLOWED_RE.fullmatch(name) is not None


def decode_literal(body: str) -> str:
    """The characters a plain (not raw) string literal's ``body`` (between the quotes) stands for: simple, octal,
    hex and universal-character escapes decoded as the compiler does (``"\\x50"`` is ``P``)."""

    def repl(m: re.Match[str]) -> str:
        octal, hexa, u4, u8, other = m.groups()
        if other is not None:
            return _SIMPLE_ESCAPES.get(other, other)
        code = int(octal, 8) if octal else int(hexa or u4 or u8, 16)
        return chr(code) if code <= 0x10FFFF else "\ufffd"

    return _ESCAPE_RE.sub(repl, body)


@dataclass(frozen=True)
class Token:
    """One preprocessing token of the scanned text (whitespace dropped): ``kind`` and its ``text`` at
    ``start``/``end``; for a string literal also its characters (``value``) and whether it is ``plain``;
    ``directive``: on a line that starts with ``#`` (a ``#pragma`` the preprocessor passed on)."""

    kind: str  # raw | str | chr | num | id | punct (whitespace is dropped)
    text: str
    start: int
    end: int
    value: str = ""  # a string literal's characters (decoded); its undecoded body for a raw literal
    plain: bool = False  # a string literal without prefix, not raw
    directive: bool = False


@dataclass(frozen=True)
class LiteralRun:
    """Adjacent string literals, one string for the compiler: ``value`` (concatenated, escapes decoded), ``body``
    (the undecoded bodies concatenated), ``plain`` (every part an unprefixed, non-raw literal), ``start``/``end``
    (offsets in the scanned text), ``first``/``last`` (indexes of its first and last token)."""

    value: str
    body: str
    plain: bool
    start: int
    end: int
    first: int
    last: int


def tokens(text: str) -> list[Token]:
    """The preprocessing tokens of ``text`` (preprocessed C++: no comments), whitespace dropped."""
    starts, directive = [0], []
    for line in text.split("\n"):
        directive.append(line.lstrip().startswith("#"))
        starts.append(starts[-1] + len(line) + 1)
    out = []
    for m in _TOKEN_RE.finditer(text):
        kind = m.lastgroup  # the outer group of an alternative closes last
        if kind == "ws":
            continue
        on_directive = directive[bisect.bisect_right(starts, m.start()) - 1]
        if kind == "raw":
            out.append(Token("raw", m.group(0), m.start(), m.end(), m.group("rawbody"), directive=on_directive))
        elif kind == "str":
            out.append(Token("str", m.group(0), m.start(), m.end(), decode_literal(m.group("body")),
                             plain=m.group("prefix") is None, directive=on_directive))
        else:
            out.append(Token(kind, m.group(0), m.start(), m.end(), directive=on_directive))
    return out


def literal_runs(tokens: list[Token]) -> list[LiteralRun]:
    """Every maximal run of adjacent string literals among ``tokens``."""
    runs: list[LiteralRun] = []
    i = 0
    while i < len(tokens):
        if tokens[i].kind not in ("str", "raw"):
            i += 1
            continue
        j = i
        while j < len(tokens) and tokens[j].kind in ("str", "raw"):
            j += 1
        part = tokens[i:j]
        runs.append(LiteralRun(
            value="".join(t.value for t in part),
            body="".join(t.text[1:-1] for t in part if t.plain),
            plain=all(t.plain for t in part), start=part[0].start, end=part[-1].end, first=i, last=j - 1))
        i = j
    return runs


def owned_lines(text: str, is_owned: Callable[[str], bool]) -> list[tuple[str, int, str]]:
    """``(file, line, text)`` of every line of ``nvcc -E`` output that comes from a candidate-owned file
    (line markers ``# N "file" flags`` followed; ownership by path, as in ``policy.scan_preprocessed``: a system flag
    on the candidate's own file, from a pasted system_header pragma, is not trusted)."""
    cur, line = "", 1
    out: list[tuple[str, int, str]] = []
    for raw in text.splitlines():
        m = MARKER_RE.match(raw) if raw.startswith("# ") else None
        if m:
            cur, line = m.group(2), int(m.group(1))
            continue
        if cur and is_owned(cur):
            out.append((cur, line, raw))
        line += 1
    return out


class _Owned:
    """The candidate's own lines of one ``-E`` output, joined, with their tokens and a way back to file:line."""

    def __init__(self, preprocessed: str, is_owned: Callable[[str], bool]) -> None:
        self.lines = owned_lines(preprocessed, is_owned)
        self.text = "\n".join(t for _, _, t in self.lines)
        self.starts = [0]
        for _, _, t in self.lines:
            self.starts.append(self.starts[-1] + len(t) + 1)
        self.tokens = tokens(self.text)
        self.token_starts = [t.start for t in self.tokens]
        self.runs = literal_runs(self.tokens)
        self.run_at = {r.first: r for r in self.runs}

    def where(self, pos: int) -> tuple[str, int]:
        file, line, _ = self.lines[bisect.bisect_right(self.starts, pos) - 1]
        return file, line


# --------------------------------------------------------------------------------------------------
# asm labels
# --------------------------------------------------------------------------------------------------

ASM_KEYWORDS = frozenset({"asm", "__asm", "__asm__"})
#: After the keyword these make an asm *statement* (a label takes none).
_ASM_QUALIFIERS = frozenset({"volatile", "__volatile", "__volatile__", "goto", "inline", "__inline", "__inline__"})
#: ``<kw> (...) asm(...)`` is a statement: the parenthesis is a condition, not a parameter list.
_CONDITION_KEYWORDS = frozenset({"if", "while", "for", "switch", "catch", "constexpr"})
#: ``<kw> asm(...)`` is a statement.
_STATEMENT_KEYWORDS = frozenset({"else", "do", "return", "__extension__", "case", "default"})
_SYMBOL_NAME_RE = re.compile(r"([A-Za-z_.$][\w.$]*)(?:@{1,3}[\w.$]+)?")


def _opener(tokens: list[Token], close_at: int, opener: str, closer: str) -> int:
    """Index of the ``opener`` punctuator that matches the ``closer`` at ``tokens[close_at]``, scanning backwards
    (nested pairs skipped); -1 when there is none."""
    depth, k = 0, close_at
    while k >= 0:
        if tokens[k].kind == "punct":
            depth += {closer: 1, opener: -1}.get(tokens[k].text, 0)
        if depth == 0:
            return k
        k -= 1
    return -1


def _after_declarator(tokens: list[Token], i: int) -> bool:
    """Whether ``tokens[i]`` (an asm keyword) follows a declarator: an identifier, a parameter list's ``)``, an
    array's ``]``, a template's ``>`` or a ref-qualifier ``&``; not ``{ } ; :``, a condition's ``)`` or ``else`` (a
    statement follows those). An attribute list ``[[...]]`` is judged by what precedes it (``int f() [[gnu::used]]
    asm("x")`` is a label, ``[[likely]] asm("nop")`` a statement)."""
    while i >= 2 and tokens[i - 1].text == "]" and tokens[i - 2].text == "]":  # step over an attribute list
        k = _opener(tokens, i - 1, "[", "]")
        if k < 0:
            return False
        i = k  # the list's first '['
    if i == 0 or tokens[i - 1].directive and not tokens[i].directive:  # a #pragma line ends what came before
        return False
    prev = tokens[i - 1]
    if prev.kind == "id":
        return prev.text not in _STATEMENT_KEYWORDS
    if prev.text == "]":
        return True
    if prev.text in (">", "&"):
        return True
    if prev.text != ")":
        return False
    k = _opener(tokens, i - 1, "(", ")")
    before = tokens[k - 1] if k >= 1 else None
    return not (before is not None and before.kind == "id" and before.text in _CONDITION_KEYWORDS)


def asm_labels(tokens: list[Token], runs: list[LiteralRun]) -> list[tuple[Token, LiteralRun | None]]:
    """``(keyword token, its literal run or None)`` for every asm label among ``tokens`` (see the module doc)."""
    by_first = {r.first: r for r in runs}
    out: list[tuple[Token, LiteralRun | None]] = []
    for i, tok in enumerate(tokens):
        if tok.kind != "id" or tok.text not in ASM_KEYWORDS:
            continue
        if i + 1 >= len(tokens) or tokens[i + 1].text != "(" or not _after_declarator(tokens, i):
            continue  # a qualifier (asm volatile ...), or a statement's position: an asm statement
        out.append((tok, by_first.get(i + 2)))
    return out


def asm_statements(tokens: list[Token], runs: list[LiteralRun]) -> list[tuple[Token, LiteralRun | None]]:
    """``(keyword token, its template's literal run or None)`` for every asm statement among ``tokens``: an asm
    keyword, its qualifiers (``volatile``, ``goto``, ``inline``), ``(``, and not an asm label (:func:`asm_labels`), in
    a function or at file scope; None when what follows the ``(`` is not a string literal."""
    by_first = {r.first: r for r in runs}
    out: list[tuple[Token, LiteralRun | None]] = []
    for i, tok in enumerate(tokens):
        if tok.kind != "id" or tok.text not in ASM_KEYWORDS:
            continue
        j = i + 1
        while j < len(tokens) and tokens[j].kind == "id" and tokens[j].text in _ASM_QUALIFIERS:
            j += 1
        if j >= len(tokens) or tokens[j].text != "(" or (j == i + 1 and _after_declarator(tokens, i)):
            continue  # not followed by a parenthesis, or a label
        out.append((tok, by_first.get(j + 1)))
    return out


def scan_asm_labels(preprocessed: str, is_owned: Callable[[str], bool],
                    symbol_reason: Callable[[str], str | None]) -> list[PolicyViolation]:
    """asm labels in the candidate's own code that are refused: not one plain string literal, not a plain symbol
    name (``name`` or ``name@VERSION``; a quoted, starred or spaced name is read by the assembler in ways the policy
    does not judge), or naming a symbol for which ``symbol_reason(name)`` gives a reason (harness.policy: the
    driver entry points, refused imports, forbidden libraries). The whole literal is judged: ``"cudaGetDriver"
    "EntryPoint"`` and ``"cudaGetDriverEntry\\x50oint"`` are ``cudaGetDriverEntryPoint``."""
    owned = _Owned(preprocessed, is_owned)
    out = []
    for tok, run in asm_labels(owned.tokens, owned.runs):
        if run is None:
            continue  # not a string: the compiler refuses it
        file, line = owned.where(tok.start)
        if not run.plain:
            name, reason = owned.text[run.start:run.end], ("an asm label must be one plain string literal (no "
                                                           "prefix, not raw): it names the symbol the declaration binds to")
        elif not (m := _SYMBOL_NAME_RE.fullmatch(run.value)):
            name, reason = run.value, ("an asm label must be a plain symbol name (letters, digits, _ . $, an @VERSION): "
                                       "it names the symbol the declaration binds to, and the assembler reads quotes, "
                                       "spaces and escapes in it")
        else:
            name, reason = run.value, symbol_reason(m.group(1))
            if reason is None:
                continue
            reason = (f"it binds the declared function to `{m.group(1)}`, which the policy controls: {reason}; "
                      "a call under the declared name would escape the source checks")
        out.append(PolicyViolation(kind="asm_label", name=name, reason=reason, file=file, line=line))
    return out


# --------------------------------------------------------------------------------------------------
# Driver entry points
# --------------------------------------------------------------------------------------------------


def _first_argument(owned: _Owned, pos: int) -> str | None:
    """The first call argument after the ``(`` at ``pos`` when it is made only of adjacent plain string literals
    (their undecoded bodies concatenated, as the compiler does), else None."""
    idx = bisect.bisect_left(owned.token_starts, pos)
    run = owned.run_at.get(idx + 1)
    if run is None or not run.plain or run.last + 1 >= len(owned.tokens):
        return None
    return run.body if owned.tokens[run.last + 1].text in (",", ")") else None


def scan_driver_entry_points(preprocessed: str, is_owned: Callable[[str], bool]) -> list[PolicyViolation]:
    """Uses of ``cudaGetDriverEntryPoint*`` in the candidate's own code, judged on the preprocessed
    source (``nvcc -E``: comments are gone, macros expanded, token pasting done), other than a direct
    call whose first argument is a string literal (adjacent literals concatenated, as the compiler
    does) naming a ``cuTensorMap*`` function as a WHOLE (``"cuTensorMap" "X"`` is judged as
    ``cuTensorMapX``; an escape, a prefix, a computed or stringified-other name is refused). The
    allow-list admits the entry-point API only to build TMA tensor maps: any other driver function
    (stream creation, memory, module loading) would bypass the symbol policy, and so would an alias
    or a function pointer. The launcher enforces the same rule at run time (harness/launcher.py).

    Since session 18 a string literal naming the entry-point functions is refused too, judged whole (adjacent
    literals concatenated, escapes decoded: ``"cudaGetDriver" "EntryPoint"``, ``"cudaGetDriverEntry\\x50oint"``):
    it can only reach the function under another name (``weakref``/``alias`` attributes, ``.set`` or ``.symver`` in
    assembler text). Asm labels are left to :func:`scan_asm_labels`, which names them as such."""
    owned = _Owned(preprocessed, is_owned)
    labels = [(r.start, r.end) for _, r in asm_labels(owned.tokens, owned.runs) if r is not None]

    def in_label(pos: int) -> bool:
        return any(a <= pos < b for a, b in labels)

    out = []
    for m in _ENTRY_POINT_RE.finditer(owned.text):
        if in_label(m.start()):
            continue
        nxt = re.compile(r"\s*\(").match(owned.text, m.end())
        name = _first_argument(owned, nxt.end() - 1) if nxt else None
        if name is not None and entry_point_name_allowed(name):
            continue
        file, line = owned.where(m.start())
        shown = f" (resolves {name!r})" if name is not None else ""
        out.append(PolicyViolation(kind="entry_point", name=m.group(0), file=file, line=line, reason=(
            f"driver entry points are allowed only as a direct call whose name is a string literal naming a "
            f"cuTensorMap* function{shown}; other driver functions bypass the symbol policy")))
    for run in owned.runs:
        found = _ENTRY_POINT_RE.search(run.value)
        if found is None or in_label(run.start) or _ENTRY_POINT_RE.search(owned.text, run.start, run.end):
            continue  # no name, a label's, or spelled out (refused above)
        file, line = owned.where(run.start)
        out.append(PolicyViolation(kind="entry_point", name=found.group(0), file=file, line=line, reason=(
            "a string naming a driver entry-point function (here spelled in pieces or with escapes) can only "
            "reach it under another name (an alias, weakref or assembler text); call it directly, by name, "
            "with a string literal naming a cuTensorMap* function")))
    return out


# --------------------------------------------------------------------------------------------------
# Assembler text
# --------------------------------------------------------------------------------------------------

_PASTE = ("an asm template pastes an operand onto a name: gcc prints a symbol operand (`%c0`, `%P0`) as its bare "
          "name, so the assembler would read a directive or a symbol name that no source scan sees; keep operands "
          "apart from names (`[%0]`, `%0,`)")
_COMMENT = ("a `/*` comment in a string: the assembler removes a comment whole, joining the text around it into "
            "names no scan reads (`.inc/**/bin`), and reads one left open on into the next statement's text; comment "
            "assembler text with `//` (PTX) or `#` (host), or not at all")
_NOT_LITERAL = ("an asm statement's text must be a string literal: a text computed at compile time (GCC 15's "
                "`asm((constant-expression))`) is not read by the policy")
_GAS_ENTRY_POINT = ("a string that the assembler reads as a driver entry-point function's name (its `/* */` comments, "
                    "quotes or backslashes removed, or gcc's operands and dialect alternatives resolved) reaches it "
                    "under no name the source scans read; call it directly, by name, with a string literal naming a "
                    "cuTensorMap* function")


def _shown(text: str, limit: int = 48) -> str:
    """``text`` on one line (whitespace runs as one space), cut to ``limit`` characters."""
    one = " ".join(text.split())
    return one if len(one) <= limit else one[:limit - 3] + "..."


def scan_asm_text(preprocessed: str, is_owned: Callable[[str], bool]) -> list[PolicyViolation]:
    """Assembler text in the candidate's own code that is refused (see the module doc and harness/asm_text.py).

    Every string literal (adjacent literals concatenated, escapes decoded, macros expanded) is judged, not only asm
    statements' templates: gcc copies other strings into the assembler's input too (a ``section`` attribute's name,
    newlines and all). Refused: a directive of :data:`harness.asm_text.DENIED_DIRECTIVES` in any assembler reading of
    the string (``asm(".INC" "BIN \\"/home/u/.ssh/id_rsa\\"")``, ``".inc{bin|}"``, ``".inc/**/bin"``,
    ``"\\x2eincbin"``); in an asm template, an operand pasted onto a name (``.%c0``); a ``/*`` comment; an asm
    statement whose text is not a string literal; and a string whose assembler reading, but not its own text, names
    the driver entry points (the plain text is :func:`scan_driver_entry_points`'s). Honest inline PTX (device code)
    uses none of these."""
    owned = _Owned(preprocessed, is_owned)
    out: list[PolicyViolation] = []
    templates: set[int] = set()
    for tok, run in asm_statements(owned.tokens, owned.runs):
        if run is None:
            file, line = owned.where(tok.start)
            out.append(PolicyViolation(kind="asm_text", name=f"{tok.text}(...)", reason=_NOT_LITERAL, file=file,
                                       line=line))
        else:
            templates.add(run.first)
    for run in owned.runs:
        template = run.first in templates
        file, line = owned.where(run.start)
        found = [(d, f"the directive `{d}` {DENIED_DIRECTIVES[d[1:]]}") for d in denied_directives(run.value, template)]
        found += [(_shown(run.value), _PASTE)] if template and pastes_operand(run.value) else []
        found += [("/*", _COMMENT)] if opens_comment(run.value, template) else []
        out += [PolicyViolation(kind="asm_text", name=name, reason=why, file=file, line=line) for name, why in found]
        if _ENTRY_POINT_RE.search(run.value) is None:
            for view in assembler_views(run.value, template):
                if m := _ENTRY_POINT_RE.search(view):
                    out.append(PolicyViolation(kind="entry_point", name=m.group(0), reason=_GAS_ENTRY_POINT,
                                               file=file, line=line))
                    break
    return out
