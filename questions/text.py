"""Text that people and agents hand to the campaign store: one set of rules for every edge.

Questions (``attnq questions add``, MCP ``add_question``), claims (``declare``, ``reflect(claim=...)``)
and bank files all pass through :func:`clean_text`: whitespace runs collapse to one space, and
characters that would reach a reader's terminal as something other than text are refused:

- control characters (Unicode category Cc: NUL, ESC of an ANSI colour sequence, DEL, C1 controls),
- lone surrogates (category Cs: what Python makes of non-UTF-8 bytes in ``argv``),
- bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069, U+200E/U+200F, U+061C), the
  "Trojan Source" characters (CVE-2021-42574) that make a line read differently from what it stores.

Text already stored by an older attnq is shown through :func:`printable`, which escapes the same
characters (``\\x1b``, ``\\u202e``) instead of printing them raw.
"""

from __future__ import annotations

import unicodedata

from harness.errors import InputError

#: Bidirectional formatting characters refused in stored text (Unicode TR9; CVE-2021-42574).
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
#: Question marks of the world's scripts: ASCII, full-width (CJK), Arabic, Armenian, Ethiopic, Vai, Greek.
QUESTION_MARKS = frozenset("?\uff1f\u061f\u055e\u1367\ua60f\u037e")
#: Longest claim (``declare``, ``reflect(claim=...)``), characters after whitespace collapses; CLI and MCP alike.
MAX_CLAIM_CHARS = 4000


def unsafe_char(ch: str) -> bool:
    """True for a character that must not be stored or printed raw (see the module docstring)."""
    return ch in BIDI_CONTROLS or unicodedata.category(ch) in ("Cc", "Cs")


def describe_char(ch: str) -> str:
    """``U+001B (ESC)``-style name of a character for an error message."""
    name = unicodedata.name(ch, "")
    if not name:
        name = {"\x00": "NUL", "\x1b": "ESC", "\x7f": "DEL"}.get(ch, "control character")
    return f"U+{ord(ch):04X} ({name})"


def clean_text(text: str, *, what: str, min_chars: int = 1, max_chars: int) -> str:
    """``text`` with whitespace runs collapsed to one space, checked.

    Args:
        what: the thing named in errors ("the question", "the claim").
        min_chars, max_chars: bounds on the cleaned length, in characters.

    Raises:
        InputError: not a string, a control / surrogate / bidi-override character (named with its code
            point), or a cleaned length outside ``[min_chars, max_chars]``.
    """
    if not isinstance(text, str):
        raise InputError(f"{what} must be text")
    clean = " ".join(text.split())
    for ch in clean:
        if unsafe_char(ch):
            raise InputError(f"{what} contains {describe_char(ch)}, a control or direction-override character; "
                             "write it without one")
    if not min_chars <= len(clean) <= max_chars:
        raise InputError(f"{what} must have {min_chars} to {max_chars} characters (got {len(clean)})")
    return clean


def printable(text: str) -> str:
    """``text`` safe for a terminal: unsafe characters (see :func:`unsafe_char`) as ``\\xNN`` / ``\\uNNNN``."""
    if not any(unsafe_char(ch) for ch in text):
        return text
    return "".join(ch.encode("unicode_escape").decode("ascii") if unsafe_char(ch) else ch for ch in text)


def is_one_question(text: str) -> bool:
    """True when ``text`` holds exactly one question mark (:data:`QUESTION_MARKS`, any script) and ends with it."""
    return bool(text) and text[-1] in QUESTION_MARKS and sum(ch in QUESTION_MARKS for ch in text) == 1
