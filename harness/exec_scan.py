"""The library's executable code, byte by byte: no system call instruction anywhere, no way to write code at run time
(:func:`scan_executable`, called by ``harness.policy.check_library``; split out of harness/policy.py in session 21).

A raw system call bypasses the import check, and a linear disassembly (``objdump -d``) can be fooled, so every byte of
every executable LOAD segment is read: ``0f 05`` (syscall), ``0f 34`` (sysenter) and ``cd 80`` (int $0x80) may appear
nowhere, not even inside a jump's or a RIP-relative operand's displacement (red team, session 21: ``lea
0xc3050f(%rip)`` in inline asm, or ``&big[N]`` with N chosen after a first build, puts ``syscall; ret`` in a
displacement; entered one byte in, it read /etc/hostname). An honest build holds such bytes in a displacement only by
chance of layout; ``harness.compile`` then relinks with the code moved (:data:`RELAYOUT_FLAGS`), and refuses only
when every layout still holds them (the bytes are the candidate's, not the layout's).
"""

from __future__ import annotations

import bisect
import re
from pathlib import Path

from harness.violations import PolicyViolation

__all__ = ["RELAYOUT_FLAGS", "layout_only", "scan_executable"]

#: The host-code layouts a policy build tries, in order, while the only refusal is system call bytes inside a
#: displacement (:func:`layout_only`): the first is nvcc_flags() alone; the others move every function, jump target and
#: loop head (host code only: the device code and the preprocessed text are the same), some also align the segments
#: to 16 or 64 KiB, which moves the data and the GOT relative to the code (the PLT's and the RIP-relative
#: displacements: tests/adversarial/race_head_replay.cu's fatbin puts its GOT 0x50fxx past its PLT, `ff 25 xx 0f 05 00`
#: in every PLT entry, whatever the host code's alignment). An honest build of the fast kernel holds ~4,000 relative
#: branches and RIP-relative operands, so a layout has some chance of `0f 05`, `0f 34` or `cd 80` in one of them; each
#: layout after the first is a relink (harness/relink.py, ~1 s), so six layouts cost little where one is needed. More
#: layouts cannot help a candidate: a library is accepted only where no executable byte holds those bytes.
RELAYOUT_FLAGS: tuple[tuple[str, ...], ...] = (
    (),
    ("-Xcompiler", "-falign-functions=64", "-Xcompiler", "-falign-jumps=32", "-Xcompiler", "-falign-loops=32"),
    ("-Xcompiler", "-falign-functions=32", "-Xcompiler", "-falign-jumps=8", "-Xcompiler", "-falign-loops=8",
     "-Xlinker", "-z", "-Xlinker", "max-page-size=0x10000"),
    ("-Xcompiler", "-falign-functions=16", "-Xcompiler", "-falign-jumps=16", "-Xcompiler", "-falign-loops=16",
     "-Xlinker", "-z", "-Xlinker", "max-page-size=0x4000"),
    ("-Xcompiler", "-falign-functions=128", "-Xcompiler", "-falign-jumps=64", "-Xcompiler", "-falign-loops=64"),
    ("-Xcompiler", "-falign-functions=64", "-Xcompiler", "-falign-jumps=32", "-Xcompiler", "-falign-loops=32",
     "-Xlinker", "-z", "-Xlinker", "max-page-size=0x10000"),
)
_IN_DISPLACEMENT = " (inside a displacement)"
_DISPLACEMENT_SYSCALL = ("the bytes of a system call instruction lie inside a jump's or a RIP-relative operand's "
                         "displacement: entered there, past the instruction's first bytes, they make a raw system call "
                         "that no import shows. The candidate can choose these bytes (inline asm `lea 0xc3050f(%rip)`, "
                         "an offset into a large array chosen after a first build: red team, session 21); the build "
                         "moved its host code (RELAYOUT_FLAGS) and they stayed: they are the source's, not the layout's")


#: The bytes of the x86-64 system call instructions: ``syscall``, ``sysenter``, ``int $0x80``.
_SYSCALL_BYTES_RE = re.compile(rb"\x0f\x05|\x0f\x34|\xcd\x80")
#: ``objdump -d -w`` instruction lines: address, raw bytes, mnemonic and operands (a data dump of an object symbol in a
#: code section has no mnemonic column and does not match).
_INSN_RE = re.compile(r"^[ \t]*([0-9a-f]+):\t((?:[0-9a-f]{2} )+)[ \t]*\t(.+?)[ \t]*$", re.MULTILINE)
_RIP_RE = re.compile(r"(-?0x[0-9a-f]+)\(%rip\)")
_BRANCH_RE = re.compile(r"^(?:(?:bnd|notrack)\s+)*(?:j\w+|call\w?|loop\w*|xbegin)\s+([0-9a-f]+) <")
_LOAD_RE = re.compile(r"^[ \t]*(LOAD|GNU_STACK)[ \t]+0x([0-9a-f]+)[ \t]+0x([0-9a-f]+)[ \t]+0x[0-9a-f]+[ \t]+0x([0-9a-f]+)"
                      r"[ \t]+0x[0-9a-f]+[ \t]+([RWE ]{3})", re.MULTILINE)
_HIDDEN_SYSCALL = ("the bytes of a system call instruction (`0f 05` syscall, `0f 34` sysenter, `cd 80` int $0x80) lie in "
                   "the library's executable code where a disassembly shows no such instruction (inside another "
                   "instruction's immediate, in data placed in a code section, across two instructions): entered "
                   "there they make a raw system call that no import shows (red team, session 20); change the constant")
_WRITABLE_CODE = ("a segment of the library is writable and executable (a function placed in a data section, "
                  "`section(\".data...\")`): the library could write instructions at run time that no check read "
                  "(red team, session 20)")
_EXEC_STACK = ("the library asks for an executable stack (`.note.GNU-stack` marked \"x\", or missing): loading it makes "
               "the process's stack executable, and the library could run instructions it writes there (red team, "
               "session 20)")
_TEXTREL = ("the library has text relocations: the dynamic linker writes into its code at load time, bytes no check "
            "read (red team, session 20)")


def _disp_span(start: int, raw: bytes, text: str) -> tuple[int, int] | None:
    """``(first, end)`` addresses of the displacement of one instruction (``objdump -d -w``: its address ``start``, its
    bytes ``raw``, its mnemonic and operands ``text``): a relative branch's (its target minus the next address) or a
    RIP-relative operand's; None when it has neither. Such bytes are NOT safe (red team, session 21: the candidate
    chooses them, in inline asm or through a constant offset from a large array); :func:`scan_executable` tells them
    apart only so that the build can move the code (:data:`RELAYOUT_FLAGS`)."""
    if m := _BRANCH_RE.match(text):
        if "*" in text:
            return None
        le = ((int(m.group(1), 16) - start - len(raw)) & 0xFFFFFFFF).to_bytes(4, "little")
        return (start + len(raw) - 4, start + len(raw)) if raw.endswith(le) else None
    if m := _RIP_RE.search(text):
        le = (int(m.group(1), 16) & 0xFFFFFFFF).to_bytes(4, "little")
        at = raw.find(le, 1)
        return (start + at, start + at + 4) if at >= 1 else None
    return None


def layout_only(violations: list[dict]) -> bool:
    """Whether a refusal (``PolicyError.details["violations"]``) is only system call bytes inside displacements, which
    another layout of the host code may clear (:data:`RELAYOUT_FLAGS`)."""
    return bool(violations) and all(v.get("name", "").endswith(_IN_DISPLACEMENT) for v in violations)


def scan_executable(library: Path, dynamic: str = "") -> list[PolicyViolation]:
    """The library's executable code, byte by byte (the objdump scan of ``policy.scan_host_code`` reads a linear
    disassembly, which a candidate can desynchronize). Refused: a LOAD segment both writable and executable, an
    executable stack (GNU_STACK with E, or none), text relocations (``dynamic``: its ``readelf -d`` text), and the bytes
    of a system call instruction anywhere in an executable segment. Red team, session 20: a constant ``x ^ 0xc3050f``
    compiles to an immediate whose bytes, entered one past the opcode, are ``syscall; ret`` (with a variadic call
    setting %eax); an object in a ``.text.*`` section is printed by objdump as data; a function in a data section makes
    its segment RWX; ``.note.GNU-stack,"x"`` makes the stack executable. Red team, session 21: the same bytes inside a
    displacement (session 20 let those pass as "chosen by the linker"): ``lea 0xc3050f(%rip)`` in inline asm, or
    ``&big[N]`` whose N makes the linker's displacement ``0x00c3050f``. Each read /etc/hostname with no import and no
    syscall in objdump's text. Bytes inside a displacement (:func:`_disp_span`) are named apart (``... (inside a
    displacement)``, :func:`layout_only`) so that the build can try another layout before refusing them."""
    from harness.policy import run_tool  # the binutils runner lives with the rest of the policy

    segments = run_tool(["readelf", "-lW", str(library)])
    out: list[PolicyViolation] = []
    spans: list[tuple[int, int, int]] = []
    stack = None
    for m in _LOAD_RE.finditer(segments):
        kind, off, vaddr, size, flags = m.group(1), int(m.group(2), 16), int(m.group(3), 16), int(m.group(4), 16), \
            m.group(5)
        if kind == "GNU_STACK":
            stack = flags
        elif "E" in flags:
            spans.append((off, vaddr, size))
            if "W" in flags:
                out.append(PolicyViolation(kind="instruction", name="writable code", reason=_WRITABLE_CODE))
    if stack is None or "E" in stack:
        out.append(PolicyViolation(kind="instruction", name="executable stack", reason=_EXEC_STACK))
    if re.search(r"\(TEXTREL\)|\(FLAGS\).*\bTEXTREL\b", dynamic):
        out.append(PolicyViolation(kind="instruction", name="text relocations", reason=_TEXTREL))
    data = library.read_bytes()
    hits = sorted({(vaddr + m.start() - off, m.group(0)) for off, vaddr, size in spans
                   for m in _SYSCALL_BYTES_RE.finditer(data, off, min(off + size, len(data)))})
    if not hits:
        return out
    insns = sorted((int(a, 16), bytes.fromhex(r), t) for a, r, t in
                   _INSN_RE.findall(run_tool(["objdump", "-d", "-w", str(library)])))
    starts = [i[0] for i in insns]
    first: dict[bool, tuple[int, bytes]] = {}
    for hit, found in hits:
        k = bisect.bisect_right(starts, hit) - 1
        span = _disp_span(*insns[k]) if k >= 0 and hit + 2 <= insns[k][0] + len(insns[k][1]) else None
        first.setdefault(span is not None and span[0] <= hit and hit + 2 <= span[1], (hit, found))
    if (hidden := first.get(False)) is not None:
        out.append(PolicyViolation(kind="instruction", name=f"bytes {hidden[1].hex(' ')} at {hidden[0]:#x}",
                                   reason=_HIDDEN_SYSCALL))
    if (disp := first.get(True)) is not None:
        out.append(PolicyViolation(kind="instruction", name=f"bytes {disp[1].hex(' ')} at {disp[0]:#x}{_IN_DISPLACEMENT}",
                                   reason=_DISPLACEMENT_SYSCALL))
    return out
