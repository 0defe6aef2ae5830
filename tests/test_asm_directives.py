"""Session 18's review, closed in session 19: host inline asm made the GNU assembler read any file at build time, as
the user (``asm(".incbin \\"/home/user/.ssh/id_rsa\\"")``, ``.include``: file reads past the include rule), and a gas
``.macro`` (or ``.irp``, ``.irpc``, ``.rept``, ``.altmacro``, ``\\()`` pasting) built names the static scans never
saw. Every string literal of the candidate's own code is now read as gas reads it (harness/asm_text.py) and refused
when it holds such a directive, however it is spelled (case, adjacent literals, escapes, comments, quoted names,
gcc's dialect alternatives, an operand pasted onto a name, a section attribute); honest inline PTX passes, and so do
the shipped kernels (tests/test_asm_labels.py runs compile's scans on them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.asm_text import (
    DENIED_DIRECTIVES,
    OPERAND,
    assembler_views,
    denied_directives,
    gcc_template,
    opens_comment,
    pastes_operand,
)
from harness.errors import PolicyError
from harness.policy import scan_asm_text
from harness.source_scans import decode_literal
from harness.violations import PolicyViolation
from tests.test_policy import _nvcc_or_skip


def _pre(body: str) -> str:
    """``body`` as ``nvcc -E`` shows a candidate's own lines (a line marker naming the file, then line 1)."""
    return '# 1 "/ws/k.cu"\nint first_line;\n' + body + "\n"


def _owned(path: str) -> bool:
    return path.startswith("/ws/")


def _scan(body: str) -> list[PolicyViolation]:
    return scan_asm_text(_pre(body), _owned)


def _spellings(d: str) -> list[str]:
    """Ways to write the directive ``.d`` (``d`` without the dot) into assembler text, as C++ source."""
    head, tail = d[0], d[1:]
    return [
        f'asm(".{d} x");',  # file-scope asm
        f'asm(".{d.upper()} x");',  # gas ignores the case of directive names
        f'asm(".{d.title()} x");',
        f'asm(".{head}" "{tail} x");',  # adjacent literals: one string
        f'asm("." "{d}"\n    " x");',  # across lines
        f'asm("\\x2e" "{d} x");',  # hex escape for the dot (its own literal: a hex escape takes every hex digit)
        f'asm("\\056{d.upper()} x");',  # octal escape
        f'asm("\\x2E\\{ord(head):03o}{tail} x");',  # escapes for the name's letters too
        f'asm("nop;.{d} x");',  # after a statement separator
        f'asm("nop\\n\\t.{d}\\tx");',  # after a newline, tab-separated
        f'asm("lbl: .{d} x");',  # after a label
        f'void f() {{ __asm__ __volatile__("nop; .{d} x" ::: "memory"); }}',
        f'void f() {{ __asm volatile(".{d} x"); }}',
        f'void f() {{ asm goto(".{d} x" :::: done); done:; }}',
        f'void f() {{ asm inline(".{d} x" ::); }}',
        f'asm(".{head}/**/{tail} x");',  # gas removes a comment whole: joined
        f'asm(".{head}/* any text */{tail.upper()} x");',
        f'asm("\\".{head}\\"\\"{tail}\\" ,x");',  # a quoted name, pieces joined by gas
        f'void f() {{ asm volatile(".{head}{{{tail}|other}} x" ::); }}',  # gcc keeps the first dialect alternative
        f'void f() {{ asm volatile("{{.{d}|nop}} x" ::); }}',
        f'__attribute__((section(".data\\n.{d} x\\n#"))) int v = 1;',  # gcc copies a section name as written
        f'#pragma message("in a pragma: .{d}")',
    ]


@pytest.mark.parametrize("directive", sorted(DENIED_DIRECTIVES))
def test_every_spelling_of_a_refused_directive_is_refused(directive: str) -> None:
    for body in _spellings(directive):
        got = _scan(body)
        names = ["." + directive] + (["/*"] if "/*" in body else [])  # any comment is refused as well
        assert [(v.kind, v.name, v.file, v.line) for v in got] == [("asm_text", n, "/ws/k.cu", 2) for n in names], \
            (body, got)
        assert DENIED_DIRECTIVES[directive] in got[0].reason and "assembler text" in got[0].describe()


def test_the_reviewers_examples_and_macro_built_names() -> None:
    """The review's spellings: a file read by `.incbin`/`.include`, and a `.macro` pasting a forbidden name (the
    name itself is in no string: only the directive building it can be refused)."""
    cases = {
        'asm(".incbin \\"/home/user/.ssh/id_rsa\\"");': [".incbin"],
        'asm(".include \\"/etc/passwd\\"");': [".include"],
        'asm(".macro m a\\ncall cudaGetDriver\\\\()\\\\a\\n.endm\\nm EntryPoint");': [".macro"],
        'asm(".altmacro\\n.macro m\\n.endm");': [".altmacro", ".macro"],
        'asm(".irpc c,P\\ncall cudaGetDriverEntry\\\\c\\\\()oint\\n.endr");': [".irpc"],
        'asm(".irp s,EntryPoint\\ncall cudaGetDriver\\\\s\\n.endr");': [".irp"],
        'asm(".rept 1\\n.endr\\n.purgem m\\n.exitm");': [".rept", ".purgem", ".exitm"],
        'asm(".symver f, g@v");': [".symver"],
        'asm(".weakref w, x\\n.equ a, b\\n.equiv c, d\\n.eqv e, f\\n.set g, h");':
            [".weakref", ".equ", ".equiv", ".eqv", ".set"],
        'asm(".mri 1");': [".mri"],
    }
    for body, names in cases.items():
        assert [(v.kind, v.name) for v in _scan(body)] == [("asm_text", n) for n in names], body


@pytest.mark.parametrize("body", [
    'void f() { asm volatile(".%c0 \\"/etc/passwd\\"" :: "i"(&incbin)); }',  # a variable named incbin
    'void f() { asm volatile(".inc%c0 \\"/etc/passwd\\"" :: "i"(&bin)); }',
    'void f() { asm volatile("%c0%c1 \\"/etc/passwd\\"" :: "i"(&dot_inc), "i"(&bin)); }',
    'void f() { asm volatile("call %c0EntryPoint" :: "i"(&cudaGetDriver)); }',
    'void f() { asm volatile("call %P[s]EntryPoint" :: [s] "i"(&cudaGetDriver)); }',
    'void f() { asm volatile("call \\"%c0\\"\\"EntryPoint\\"" :: "i"(&cudaGetDriver)); }',
    'void f() { asm volatile("call %c0\\\\EntryPoint" :: "i"(&cudaGetDriver)); }',  # a backslash
    'void f() { asm volatile("call %c0{EntryPoint|}" :: "i"(&cudaGetDriver)); }',
])
def test_an_operand_pasted_onto_a_name_is_refused(body: str) -> None:
    """gcc prints a symbol operand with %c/%P as its bare name: pasted onto text it spells a directive or a symbol."""
    got = _scan(body)
    assert [v.kind for v in got] == ["asm_text"] and "pastes an operand" in got[0].reason, (body, got)


def test_comments_a_computed_text_and_assembler_spellings_of_the_entry_point_are_refused() -> None:
    """A `/*` in a string is refused, closed or not: one left open joins this string to the compiler's next output
    (here the next statement's text), and gas pairs them across quoted pieces otherwise than a plain reading does
    (`"/*" x: .inc/**/bin`); an asm text that is not a string literal is not read; and a name that only the
    assembler's reading spells (quoted pieces, a comment, a backslash, a dialect alternative) is the entry point's
    all the same."""
    got = _scan('asm(".inc/*");\nasm("*/bin \\"/etc/passwd\\"");')
    assert [(v.kind, v.name, v.line) for v in got] == [("asm_text", "/*", 2)]
    for body in ('asm("\\"/*\\": .inc/**/bin \\"/etc/passwd\\"");', 'asm("nop /* closed */");',
                 'void f() { asm volatile("/{|x}* x */" ::); }', 'const char* p = "a/*";'):
        assert "/*" in [v.name for v in _scan(body)], body
    got = _scan("void f() { asm((text())); __asm__ volatile (kText); }")
    assert [(v.kind, v.name) for v in got] == [("asm_text", "asm(...)"), ("asm_text", "__asm__(...)")]
    for body in ('asm("call \\"cudaGetDriver\\"\\"EntryPoint\\"@PLT");',
                 'asm("call cudaGetDriver\\\\EntryPointByVersion@PLT");',
                 'asm("call \\"cudaGetDriver\\\\EntryPoint\\"");',
                 'void f() { asm volatile("call cudaGetDriver{EntryPoint|x}" ::); }',
                 '__attribute__((section("x\\ny = \\"cudaGetDriver\\"\\"EntryPoint\\"\\n#"))) int v;'):
        got = _scan(body)
        assert [(v.kind, v.name[:23]) for v in got] == [("entry_point", "cudaGetDriverEntryPoint")], (body, got)


def test_honest_inline_ptx_and_host_code_pass() -> None:
    """Inline PTX of the shipped kernels' kinds (operands in braces and brackets, `%%` special registers, predicate
    blocks, labels), honest host asm (`.globl`, `%=` labels, an operand alone), printf formats, comments closed in a
    string, and the toolkit's own strings (not the candidate's) are not refused."""
    honest = r"""
__device__ void ptx(unsigned* d, const unsigned* a, unsigned bar, float* c) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n" : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(a[4]), "r"(a[5]));
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %1, 0;\n @p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n"
               :: "r"(bar), "r"(d[0]));
  asm volatile("{\n.reg .pred P1;\nWS_WAIT:\nmbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
               "@P1 bra WS_DONE;\nbra WS_WAIT;\nWS_DONE:\n}\n" :: "r"(bar), "r"(d[1]) : "memory");
  asm volatile("mov.u64 %0, %%clock64;\n" : "=l"(*(unsigned long long*)d));
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
               "%6}], [%2];\n" :: "r"(bar), "l"(a), "r"(bar), "r"(1), "r"(2), "r"(3), "r"(4) : "memory");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(240));
  asm volatile("ld.shared.u32 %0, [%1+8];\n" : "=r"(d[2]) : "r"(bar) : "memory");
  asm volatile("setp.eq.s32 p|q, %0, 0;" :: "r"(d[3]));
  asm volatile("" : "+f"(c[0]) :: "memory");
  printf("%5.3f %d.%d mask.set // a PTX comment\n", c[0], 1, 2);  // a name ending in .set is no directive
}
asm(".globl attnq_top_level\n.type attnq_top_level, @function");
void host(int* p) { asm volatile("1%=: movl %1, %0 # a comment" : "=r"(*p) : "r"(1)); }
"""
    assert _scan(honest) == []
    pre = ('# 1 "/usr/local/cuda/include/x.h" 1 3 4\nasm(".set a, b");\n__asm__("x" ".incbin \\"f\\"");\n'
           '# 2 "/ws/k.cu" 2\nint attn(void) { return 0; }\n')
    assert scan_asm_text(pre, _owned) == []


def test_the_text_model() -> None:
    """gcc's printing of a template (first dialect, `%%`/`%{`/`%|`/`%}`, `%=`, operands, a NUL ends it) and gas's
    readings (comments removed, quotes and backslashes dropped)."""
    assert gcc_template("a%%b %{x%|y%} {p|q}r {s}%=%c0 %l[done] %& %[n]\0.incbin") == (
        f"a%b {{x|y}} pr s0{OPERAND} {OPERAND} {OPERAND} {OPERAND}")
    assert gcc_template("{a|b|c}|}") == "a|}" and gcc_template("{a|%}b}c") == "ac"
    assert assembler_views('".in/**/c""bin"', False) == ['".in/**/c""bin"', '".inc""bin"', ".incbin"]
    assert denied_directives("x.incbin y.set .SETx _.rep", False) == []
    assert denied_directives(".setx; .Set,x; $.rep", False) == [".set", ".rep"]
    assert denied_directives(".inc%c0", True) == [] and pastes_operand(".inc%c0")
    assert not pastes_operand("[%0], {%1,%2}; %%laneid %=") and pastes_operand("%0%1") and pastes_operand("%0_x")
    assert decode_literal("A\\EB\\eC") == "A\x1bB\x1bC"  # \E is ESC to nvcc (it was read as E)
    assert denied_directives(decode_literal("\\E.incbin"), False) == [".incbin"]
    assert opens_comment("a /* b */ c", False) and not opens_comment("a / * b */ c", False)
    assert opens_comment("/{*|}", True) and not opens_comment("/{*|}", False) and not opens_comment("%0 // b", True)


# --------------------------------------------------------------------------------------------------
# End to end, through nvcc
# --------------------------------------------------------------------------------------------------

_FWD = 'extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t s) { return 0; }\n'
_SECRET = b"ATTNQ-SECRET-BYTES-7f3a"


def _candidate(folder: Path, name: str, host: str) -> Path:
    src = folder / f"{name}.cu"
    src.write_text('#include "attn_abi.h"\n#ifndef __CUDA_ARCH__\n' + host + "\n#endif\n" + _FWD)
    return src


@pytest.mark.slow
def test_file_reads_by_the_assembler_are_refused_end_to_end(tmp_path: Path) -> None:
    """Built without the policy, each candidate's library holds the bytes of a file outside its folder (the
    assembler read it; `.incbin` in host asm at file scope, through a macro, an escape, an operand or a section
    name); with the policy each is refused naming the candidate's file and line, and nvcc never assembles it."""
    from harness.compile import compile_kernel

    _nvcc_or_skip()
    secret = tmp_path / "outside" / "id_rsa"
    secret.parent.mkdir()
    secret.write_bytes(_SECRET)
    cand = tmp_path / "cand"
    cand.mkdir()
    where = str(secret)
    hosts = {
        "plain": f'asm(".pushsection .rodata\\n.INCBIN \\"{where}\\"\\n.popsection");',
        "macro": ('#define DOT(x) "." #x\n'
                  f'asm(".pushsection .rodata\\n" DOT(inc) "bin \\"{where}\\"\\n.popsection");'),
        "escape": f'__asm__(".pushsection .rodata\\n\\x2eincbin \\"{where}\\"\\n.popsection");',
        "operand": ('extern "C" __attribute__((visibility("hidden"))) char incbin = 0;\n'  # "i"(&sym) under -fPIC
                    'extern "C" void attnq_pull() { asm volatile(".pushsection .rodata\\n.%c0 '
                    f'\\"{where}\\"\\n.popsection" :: "i"(&incbin)); }}'),
        "dialect": ('extern "C" void attnq_pull() { asm volatile(".pushsection .rodata\\n.inc{bin|x} '
                    f'\\"{where}\\"\\n.popsection" ::); }}'),
        "section": f'__attribute__((section(".rodata\\n.incbin \\"{where}\\"\\n#"), used)) int attnq_v = 1;',
    }
    for name, host in hosts.items():
        src = _candidate(cand, name, host)
        built = compile_kernel(src, cache_dir=tmp_path / "c", policy=False)
        assert _SECRET in Path(built.library).read_bytes(), name  # the hole: the assembler read the file
        with pytest.raises(PolicyError) as info:
            compile_kernel(src, cache_dir=tmp_path / "c")
        v = info.value.details["violations"][0]
        assert (v["kind"], v["file"]) == ("asm_text", str(src)), (name, v)
        assert v["line"] == (4 if name in ("macro", "operand") else 3), (name, v)
        assert v["name"] == ".incbin" or (name == "operand" and v["name"].startswith(".pushsection")), (name, v)


@pytest.mark.slow
def test_names_built_by_the_assembler_are_refused_end_to_end(tmp_path: Path) -> None:
    """A `.macro` pasting `cudaGetDriver\\()EntryPoint`, and a quoted name in pieces, make the library import the
    entry point with no string naming it; both are refused with the policy on."""
    from harness.compile import compile_kernel

    _nvcc_or_skip()
    hosts = {
        "macro": ('asm(".macro attnq_call a\\ncall cudaGetDriver\\\\()\\\\a@PLT\\n.endm");\n'
                  'extern "C" void attnq_grab() { asm volatile("attnq_call EntryPoint" ::: "memory"); }'),
        "quoted": 'extern "C" void attnq_grab() { asm volatile("call \\"cudaGetDriver\\"\\"EntryPoint\\"@PLT"); }',
    }
    for name, host in hosts.items():
        src = _candidate(tmp_path, name, host)
        assert "cudaGetDriverEntryPoint" not in src.read_text()
        built = compile_kernel(src, cache_dir=tmp_path / "c", policy=False)
        assert "cudaGetDriverEntryPoint" in built.imported_symbols, name
        with pytest.raises(PolicyError) as info:
            compile_kernel(src, cache_dir=tmp_path / "c")
        (v,) = info.value.details["violations"]
        assert (v["kind"], v["name"], v["line"]) == (
            ("asm_text", ".macro", 3) if name == "macro" else ("entry_point", "cudaGetDriverEntryPoint", 3)), v
