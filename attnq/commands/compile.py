"""``attnq compile FILE [--arch sm_90a] [--json] [--no-policy]``: build one candidate, show its facts.

Exit 0 on success; errors (input, toolchain, compile, policy, ABI) are raised as AttnqError and
printed by attnq/cli.py (plain lines on stderr, or the error JSON on stdout with --json).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.compile import CompileResult, compile_kernel


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``compile`` subcommand."""
    p = subparsers.add_parser("compile", help="compile one .cu candidate to a shared library (cached) and show facts",
                              description="nvcc on one .cu file -> cached shared library; ptxas/SASS facts; "
                                          "source and symbol policy (docs/compile.md).")
    p.add_argument("file", help="the candidate .cu file")
    p.add_argument("--arch", default=None, help="target arch (default: ATTNQ_ARCH or sm_90a; e.g. sm_100a)")
    p.add_argument("--json", action="store_true", help="print the CompileResult JSON on stdout")
    p.add_argument("--no-policy", action="store_true", help="skip the source/symbol policy (the ABI check still runs)")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="build cache directory (default: <workspace>/.attnq/build)")
    p.set_defaults(handler=run)


def _fmt_bytes(n: int) -> str:
    return f"{n / 1024:.1f}K" if n >= 1024 else str(n)


def _short_name(name: str, width: int = 120) -> str:
    """Drop ``(anonymous namespace)::`` and the parameter list, and write the element types short: ``__half`` as
    ``half``, ``__nv_bfloat16`` as ``bf16`` (``attn_fwd_kernel<half, 128>``); cut at ``width`` characters (the
    template arguments tell a file's instantiations apart: a 60-character cut left several rows the same)."""
    short = name.replace("(anonymous namespace)::", "").replace("__nv_bfloat16", "bf16").replace("__half", "half")
    depth = 0
    for i, ch in enumerate(short):  # cut at the first '(' outside template brackets
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0 and i > 0:
            short = short[:i]
            break
    short = short.removeprefix("void ")
    return short if len(short) <= width else short[: width - 3] + "..."


def format_result(res: CompileResult) -> str:
    """The human view: one table row per kernel, then cache, library and time lines."""
    rows = [("kernel", "regs", "smem(static)", "stack", "spill st/ld", "HGMMA", "HMMA", "FFMA", "LDL", "STL")]
    for k in res.kernels:
        s = k.sass
        mix = (str(s.hgmma), str(s.hmma), str(s.ffma), str(s.ldl), str(s.stl)) if s else ("-",) * 5
        name = _short_name(k.name)
        rows.append((name, str(k.registers), _fmt_bytes(k.shared_mem_bytes), str(k.stack_frame_bytes),
                     f"{k.spill_store_bytes}/{k.spill_load_bytes}", *mix))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    if not res.kernels:
        lines.append("(no kernels reported by ptxas)")
    if res.kernels:
        lines.append("(smem(static): ptxas's static shared memory; dynamic shared memory is sized at launch)")
    if not res.sass_available:
        lines.append("(SASS mix: cuobjdump not found on this machine)")
    for w in res.warnings[:10]:
        where = f"{w.file}:{w.line}: " if w.line else f"{w.file}: "
        lines.append(f"warning: {where}{w.message}")
    lines += [
        f"arch       {res.arch}   policy {'on' if res.policy else 'OFF'}   nvcc {res.nvcc_version.split(';')[0]}",
        f"cache hit  {'yes' if res.cache_hit else 'no'}",
        f"library    {res.library}",
        f"build hash {res.build_hash}",
        f"time       {res.compile_time_s:.3f} s" + (f" (built in {res.build_time_s:.1f} s)" if res.cache_hit else ""),
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Handler: compile and print (table or JSON). Returns 0; errors propagate as AttnqError."""
    arch = args.arch
    if arch is None:
        from harness.config import Settings

        arch = Settings().arch
    res = compile_kernel(args.file, arch=arch, cache_dir=args.cache_dir, policy=not args.no_policy)
    print(res.model_dump_json(indent=2) if args.json else format_result(res))
    return 0
