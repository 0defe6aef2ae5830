"""How the GNU assembler reads the candidate's strings: the text model behind ``source_scans.scan_asm_text``.

The host compiler copies the text of host asm statements (``asm``/``__asm``/``__asm__``, with ``volatile``, ``goto``,
``inline``; at file scope too) and some other strings (a ``section`` attribute's name, newlines and all) into the .s
file that GNU as reads at build time, as the user. Some of its directives read files (``.incbin "/home/u/.ssh/id_rsa"``
puts the file's bytes into the built library; ``.include``), build text no static scan sees (``.macro`` and its kin,
whose ``\\()`` pasting spells ``cudaGetDriver\\()EntryPoint``), change how the rest is read (``.mri``), or bind one
name to another (``.set``, ``.symver``, ...). What gas does to the text first (binutils 2.40, measured on nvcc 13's
host builds; tests/test_asm_directives.py):

- directive names are case-insensitive (``.INCBIN``) and may follow a label or a ``;`` on the same line;
- a ``/* */`` comment is removed whole, so ``.inc/**/bin`` is ``.incbin`` and ``cudaGetDriver/**/EntryPoint`` one
  name; a comment left open runs on into whatever the compiler writes next (another statement's text), and a ``/*``
  inside a quoted piece is no comment to gas;
- a quoted name is read without its quotes, adjacent quoted pieces joined: ``".inc""bin"`` is the directive,
  ``call "cudaGetDriver""EntryPoint"`` calls that function (a backslash in one is kept, with a warning that this
  may change: it is dropped here);
- in an extended asm statement's template gcc first prints the operands (``%c0`` of ``"i"(&sym)`` is the bare name
  ``sym``, so ``.%c0`` makes ``.incbin`` of a variable named ``incbin``) and keeps the first of each dialect
  alternative (``.inc{bin|x}`` is ``.incbin``); ``%%``, ``%{``, ``%|``, ``%}`` print the character, ``%=`` a number.

:func:`assembler_views` gives the texts gas may read from one string (a superset: more is removed than gas removes, so
a name gas joins is joined here too), and the checks judge every view: :func:`denied_directives`,
:func:`pastes_operand`, :func:`opens_comment` (any ``/*`` at all: how gas pairs comments across quotes and statements
is then never needed). #APP / #NO_APP lines only switch gas's comment and whitespace pre-pass, which the views
already assume on.
"""

from __future__ import annotations

import re

__all__ = [
    "DENIED_DIRECTIVES",
    "OPERAND",
    "assembler_views",
    "denied_directives",
    "gcc_template",
    "opens_comment",
    "pastes_operand",
]

_READS = "makes the assembler read a file at build time, as the user (its bytes go into the library)"
_BUILDS = "builds assembler text at build time that no source scan reads (a macro can paste any name or directive)"
_BINDS = ("binds one symbol name to another in assembler text (an alias the source scans do not judge; name the "
          "symbol itself)")

#: Directives refused in the candidate's strings (GNU as names, without the dot, lower case; gas ignores case), and
#: why. Aliases included: ``.rep`` = ``.rept``, ``.irep``/``.irepc`` = ``.irp``/``.irpc``, ``.mexit`` = ``.exitm``.
DENIED_DIRECTIVES: dict[str, str] = {
    "include": _READS, "incbin": _READS,
    **dict.fromkeys(("macro", "irp", "irep", "irpc", "irepc", "rept", "rep", "altmacro", "purgem", "exitm", "mexit"),
                    _BUILDS),
    "mri": "switches the assembler to another syntax (MRI mode) that the policy does not read",
    **dict.fromkeys(("set", "equ", "equiv", "eqv", "lsym", "weakref", "symver"), _BINDS),
}

#: Stands for an operand gcc prints into a template (:func:`gcc_template`): it is no name character itself, so a
#: directive right before it is still found, and a name character beside it is a paste (:func:`pastes_operand`).
OPERAND = "\ue000"

_DIRECTIVE_RE = re.compile(r"(?<![A-Za-z0-9_])\.(" + "|".join(sorted(DENIED_DIRECTIVES, key=len, reverse=True))
                           + r")(?![A-Za-z0-9_])", re.IGNORECASE | re.ASCII)
_COMMENT_RE = re.compile(r"/\*.*?\*/", re.DOTALL)
_OPERAND_RE = re.compile(r"[A-Za-z]*(?:\d+|\[[^\]]*\])")
#: Characters that would join an operand's printed text into one assembler token with its neighbour: gas name
#: characters, quotes (quoted names join), a backslash, another operand; anything beyond ASCII is judged as one too.
_PASTE_RE = re.compile(r"[A-Za-z0-9_.$\"\\" + OPERAND + r"]|[^\x00-\x7f]")


def gcc_template(text: str) -> str:
    """The text gcc writes for an extended asm template ``text`` (its first, AT&T dialect): ``%%``, ``%{``, ``%|``,
    ``%}`` as the character, ``%=`` as a number (``0``), every other ``%`` reference (``%0``, ``%c0``, ``%l[done]``,
    ``%&``) as :data:`OPERAND`; of ``{a|b}`` only ``a`` (the braces dropped). Stops at a NUL, as gcc does."""
    out: list[str] = []
    i, n, alternative = 0, len(text), False
    while i < n:
        c = text[i]
        i += 1
        if c == "\0":
            break
        if c == "%":
            d = text[i] if i < n else ""
            if d and d in "%{}|":
                out.append(d)
                i += 1
            elif d == "=":
                out.append("0")
                i += 1
            else:
                m = _OPERAND_RE.match(text, i)
                i = m.end() if m and m.end() > i else i + (1 if d else 0)
                out.append(OPERAND)
        elif c == "{":
            alternative = True
        elif c == "|" and alternative:  # skip the other dialects' text up to the closing brace
            while i < n and text[i] != "}":
                i += 2 if text[i] == "%" and i + 1 < n else 1
            i += 1
            alternative = False
        elif c == "}" and alternative:
            alternative = False
        else:
            out.append(c)
    return "".join(out)


def _gas_names(text: str) -> str:
    """``text`` with every ``/* */`` comment, quote and backslash removed: quoted names joined as gas joins them."""
    return re.sub(r'["\\]', "", _COMMENT_RE.sub("", text))


def assembler_views(text: str, template: bool) -> list[str]:
    """The texts GNU as may read from the string ``text``: as written (basic asm, a section name), and, for an asm
    statement's template (``template``), as gcc prints it (:func:`gcc_template`); each also with its ``/* */``
    comments removed, and with its comments, quotes and backslashes removed (gas's quoted names)."""
    bases = [text, gcc_template(text)] if template else [text]
    views: list[str] = []
    for base in bases:
        for view in (base, _COMMENT_RE.sub("", base), _gas_names(base)):
            if view not in views:
                views.append(view)
    return views


def denied_directives(text: str, template: bool) -> list[str]:
    """The refused directives (``.incbin``, lower case, in order of first appearance) in any view of ``text``
    (:func:`assembler_views`): a ``.`` and the name, case ignored, with no letter, digit or ``_`` on either side."""
    found: list[str] = []
    for view in assembler_views(text, template):
        for m in _DIRECTIVE_RE.finditer(view):
            if (name := "." + m.group(1).lower()) not in found:
                found.append(name)
    return found


def pastes_operand(text: str) -> bool:
    """Whether an asm template ``text`` pastes an operand's printed text onto a name (``.%c0``, ``%c0EntryPoint``,
    ``%c0%c1``, ``"%c0"x``) in any view of gcc's output: an operand of ``"i"(&sym)`` printed with ``%c``/``%P``/``%p``/
    ``%a`` is the bare name ``sym``, so a paste can spell a directive or a symbol that no scan reads. Operands set
    apart (``[%0]``, ``{%0, %1}``, ``%0;``, ``%%laneid``) do not paste."""
    for view in assembler_views(text, True):
        for i, c in enumerate(view):
            if c == OPERAND and any(_PASTE_RE.fullmatch(x) for x in (view[i - 1:i], view[i + 1:i + 2]) if x):
                return True
    return False


def opens_comment(text: str, template: bool) -> bool:
    """Whether ``text`` (as written, or as gcc prints it when it is an asm ``template``) holds a ``/*``: gas removes a
    comment whole, joining the text on either side (``.inc/**/bin``), pairs it across quoted pieces otherwise than a
    plain reading does (``"/*" x: .inc/**/bin``), and reads one left open on into the compiler's next output (another
    statement's text). Any comment in assembler text is refused: no reading of it is then needed."""
    return "/*" in text or (template and "/*" in gcc_template(text))
