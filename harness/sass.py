"""Parsers for ``ptxas -v`` resource lines and ``cuobjdump --dump-sass`` instruction mixes.

Pure text parsers (testable on captured output) plus thin runners for ``cuobjdump`` and
``c++filt``. Formats are those of CUDA 12.x/13.0 (ptxas ``info`` lines; cuobjdump ``Function :``
blocks with ``/*0040*/  OPCODE ...`` lines).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

from pydantic import BaseModel, Field

from harness.logging import get_logger

log = get_logger(__name__)


class PtxasFacts(BaseModel):
    """Per-entry facts from ``ptxas -v``. Sizes in bytes; ``registers`` per thread."""

    mangled_name: str
    arch: str | None = None
    registers: int = 0
    shared_mem_bytes: int = 0          # static shared memory ("N bytes smem")
    stack_frame_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    barriers: int | None = None
    constant_mem_bytes: int = 0        # sum of "N bytes cmem[k]"


_ENTRY_RE = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPS_RE = re.compile(r"Function properties for (\S+)")
_FRAME_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers")


def parse_ptxas(text: str) -> list[PtxasFacts]:
    """Entry functions and their resources from ``ptxas -v`` output (nvcc ``-Xptxas -v`` stderr).

    ``Compiling entry function 'X' for 'sm_90a'`` opens an entry; ``Function properties for X``
    followed by ``N bytes stack frame, N bytes spill stores, N bytes spill loads`` gives X's frame
    (device functions that are not entries are skipped); ``Used N registers, used B barriers,
    N bytes smem, N bytes cmem[0]`` belongs to the open entry. Entries keep the order ptxas printed.
    """
    entries: dict[str, PtxasFacts] = {}
    current: PtxasFacts | None = None
    props_for: str | None = None
    for line in text.splitlines():
        if m := _ENTRY_RE.search(line):
            current = entries.setdefault(m.group(1), PtxasFacts(mangled_name=m.group(1), arch=m.group(2)))
            props_for = None
        elif m := _PROPS_RE.search(line):
            props_for = m.group(1)
        elif (m := _FRAME_RE.search(line)) and props_for is not None:
            target = entries.get(props_for)
            if target is not None:
                target.stack_frame_bytes, target.spill_store_bytes, target.spill_load_bytes = map(int, m.groups())
            props_for = None
        elif (m := _USED_RE.search(line)) and current is not None:
            current.registers = int(m.group(1))
            if b := re.search(r"used (\d+) barriers", line):
                current.barriers = int(b.group(1))
            if s := re.search(r"(\d+) bytes smem", line):
                current.shared_mem_bytes = int(s.group(1))
            current.constant_mem_bytes = sum(int(c) for c in re.findall(r"(\d+) bytes cmem\[\d+\]", line))
    return list(entries.values())


class SassMix(BaseModel):
    """Static SASS instruction counts of one kernel (sites in the binary, not executed counts).

    ``hgmma``: Hopper warpgroup MMA; ``hmma``: warp-level tensor-core MMA; ``ffma``: fp32 FMA
    (FFMA and the paired FFMA2); ``ldl``/``stl``: local-memory loads/stores (spills, stack arrays);
    ``utcmma``: Blackwell tcgen05 MMA (UTC*MMA); ``total``: all instructions (NOPs included).
    """

    hgmma: int
    hmma: int
    ffma: int
    ldl: int
    stl: int
    total: int
    utcmma: int = 0
    top_opcodes: dict[str, int] = Field(default_factory=dict, description="the 12 most frequent base opcodes")


_FUNC_RE = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSN_RE = re.compile(r"^\s*/\*[0-9a-fA-F]{4,}\*/\s+(?:\{\s*)?(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)(?:\.[^\s;]*)?")


def mix_from_opcodes(opcodes: Counter[str]) -> SassMix:
    """Build a :class:`SassMix` from base-opcode counts."""
    return SassMix(
        hgmma=opcodes.get("HGMMA", 0),
        hmma=opcodes.get("HMMA", 0),
        ffma=opcodes.get("FFMA", 0) + opcodes.get("FFMA2", 0),
        ldl=opcodes.get("LDL", 0),
        stl=opcodes.get("STL", 0),
        total=sum(opcodes.values()),
        utcmma=sum(n for op, n in opcodes.items() if op.startswith("UTC") and "MMA" in op),
        top_opcodes=dict(opcodes.most_common(12)),
    )


def parse_sass(text: str) -> dict[str, SassMix]:
    """Per-function instruction mixes from ``cuobjdump --dump-sass`` text, keyed by (mangled) name.

    A function starts at ``Function : NAME``; each ``/*addr*/  [@P0] OPCODE.MODS ...`` line counts
    one instruction under its base opcode (text before the first dot). A function that appears in
    several ``code for sm_XX`` sections keeps the last one.
    """
    result: dict[str, SassMix] = {}
    name: str | None = None
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        if m := _FUNC_RE.match(line):
            if name is not None:
                result[name] = mix_from_opcodes(counts)
            name, counts = m.group(1), Counter()
        elif name is not None and (m := _INSN_RE.match(line)):
            counts[m.group(1)] += 1
    if name is not None:
        result[name] = mix_from_opcodes(counts)
    return result


def find_cuda_tool(name: str, nvcc: str | None = None) -> str | None:
    """Locate a CUDA binary: PATH, $CUDA_HOME/bin, $CUDA_PATH/bin, next to nvcc, /usr/local/cuda*/bin."""
    if found := shutil.which(name):
        return found
    dirs = [Path(os.environ[v]) / "bin" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    if nvcc:
        dirs.append(Path(nvcc).resolve().parent)
    dirs += sorted(Path("/usr/local").glob("cuda*/bin"))
    for d in dirs:
        if (d / name).is_file() and os.access(d / name, os.X_OK):
            return str(d / name)
    return None


def sass_mixes(library: Path, nvcc: str | None = None, timeout_s: float = 120.0) -> dict[str, SassMix] | None:
    """Run ``cuobjdump --dump-sass`` on a built library; None when cuobjdump is absent or fails."""
    exe = find_cuda_tool("cuobjdump", nvcc)
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, "--dump-sass", str(library)], capture_output=True, text=True,
                              encoding="utf-8", errors="replace", timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("cuobjdump_failed", error=str(exc))
        return None
    if proc.returncode != 0:
        log.warning("cuobjdump_failed", rc=proc.returncode, stderr=proc.stderr[-500:])
        return None
    return parse_sass(proc.stdout)


def demangle(names: list[str]) -> dict[str, str]:
    """``{mangled: demangled}`` through one ``c++filt`` call; names map to themselves without it."""
    exe = shutil.which("c++filt")
    if not names or exe is None:
        return {n: n for n in names}
    try:
        proc = subprocess.run([exe], input="\n".join(names) + "\n", capture_output=True, text=True,
                              encoding="utf-8", errors="replace", timeout=30, check=False)
        out = proc.stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        out = []
    if len(out) != len(names):
        return {n: n for n in names}
    return dict(zip(names, out))
