"""Red team, session 23: nvcc and the tools it starts (and the relink's replay of them) ran in the copy of the
candidate's folder, where the candidate decides which files lie (the snapshot copies every file an ``#include`` line
names, even under ``#if 0``). Two holes came of it (CPU only: nvcc builds, no GPU):

- nvcc.profile's ``LD_LIBRARY_PATH += $(TOP)/lib:`` ends in an empty entry when LD_LIBRARY_PATH is unset, and the
  dynamic loader reads an empty entry as the working folder: cc1plus loaded a ``libisl.so.23`` the candidate shipped
  beside its .cu and ran its constructor, in the policy's first ``-E`` pass (before any check of the text) and in
  every build step after it.
- nvcc's link stub compile (``crt/link.stub``: ``#include <stddef.h>``, ``-I.``, no ``__CUDACC__``) read the
  candidate's own ``stddef.h`` under macros none of the policy's ``-E`` passes used: an ``.incbin`` of a file and a
  ``cudaGetDriverEntryPoint("cuMemAlloc_v2")`` under ``#ifndef __CUDACC__`` went into an accepted library.

Now every nvcc run (``-E`` passes, builds, relinks) happens in an empty folder of the copy
(``harness.compile._tool_cwd``), and a relink replays only the absolute entries of the plan's search paths.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import harness.compile as compile_mod
from harness.errors import PolicyError
from harness.policy import run_tool
from harness.relink import replay_plan
from tests.test_policy import _nvcc_or_skip

#: A minimal candidate that builds (the payload tests of session 24 use it too).
_KERNEL = r"""
#include "attn_abi.h"
__global__ void touch(float* p) { if (p) p[0] = 1.0f; }
extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
  (void)p;
  touch<<<1, 1, 0, stream>>>(nullptr);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
"""

_CANDIDATE = '\n#if 0\n#include "libisl.so.23"\n#endif\n#include "stddef.h"' + _KERNEL

#: Empty in both of the policy's passes (they define __CUDACC__); the payload only where nvcc's link stub reads it.
_STDDEF = r"""#pragma once
#ifndef __CUDACC__
__asm__(".pushsection .rodata.attnq_leak,\"a\"\n.globl attnq_leak\nattnq_leak:\n.incbin \"/etc/os-release\"\n"
        ".popsection\n");
extern "C" int cudaGetDriverEntryPoint(const char*, void**, unsigned long long, void*);
extern "C" void* attnq_driver_fn(void) { void* q = 0; cudaGetDriverEntryPoint("cuMemAlloc_v2", &q, 0ULL, 0); return q; }
#include_next <stddef.h>
#endif
"""

_FAKE_LIB = r"""
#include <stdio.h>
__attribute__((constructor)) static void payload(void) {
  FILE* f = fopen(MARKER, "a");
  if (f) { fputs("ran\n", f); fclose(f); }
}
"""


def test_a_relink_replays_only_absolute_search_entries() -> None:
    plan = ('#$ LD_LIBRARY_PATH=/usr/local/cuda/bin/../lib:\n#$ PATH=/a::.:/b:\n'
            '#$ gcc -c -x c++ "/k/x.cudafe1.cpp" -o "/k/x.o"\n')
    parsed = replay_plan(plan)
    assert not isinstance(parsed, str), parsed
    env, argvs = parsed
    assert env == {"LD_LIBRARY_PATH": "/usr/local/cuda/bin/../lib", "PATH": "/a:/b"}
    assert argvs == [["gcc", "-c", "-x", "c++", "/k/x.cudafe1.cpp", "-o", "/k/x.o"]]


def _fake_isl(folder: Path, marker: Path) -> bool:
    """A ``libisl.so.23`` whose constructor appends to ``marker``, in ``folder``; False where cc1plus needs no libisl
    or gcc cannot build it (the stddef.h half of the test still runs)."""
    try:
        cc1plus = subprocess.run(["gcc", "-print-prog-name=cc1plus"], capture_output=True, text=True,
                                 check=True).stdout.strip()
        if "libisl.so.23" not in run_tool(["readelf", "-d", cc1plus]):
            return False
        (folder / "fake.c").write_text(_FAKE_LIB)
        # no build-id: its random bytes could put a '#' on the file's first "line", which the raw scan refuses (the
        # snapshot takes the library, named under #if 0); CI hit that at basetemp pytest-26 (session 24)
        subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,--build-id=none", f'-DMARKER="{marker}"', "-o", str(folder / "libisl.so.23"),
                        str(folder / "fake.c")], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return False
    return True


def test_nvcc_and_the_relink_never_run_in_the_candidates_folder(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _nvcc_or_skip()
    if not shutil.which("gcc"):
        pytest.skip("no gcc")
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)  # nvcc.profile then appends an empty entry
    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "cand.cu").write_text(_CANDIDATE)
    (cand / "stddef.h").write_text(_STDDEF)
    marker = tmp_path / "ran.txt"
    isl = _fake_isl(cand, marker)
    if not isl:
        (cand / "libisl.so.23").write_text("")

    cwds: list[Path] = []
    real_run, real_relink, real_check = compile_mod._run_nvcc, compile_mod.relink, compile_mod.check_library

    def run_nvcc(argv: list[str], timeout_s: float, cwd: Path):  # noqa: ANN202 - a test double
        cwds.append(Path(cwd))
        assert not any(Path(cwd).iterdir()), "nvcc ran in a folder that holds files"
        return real_run(argv, timeout_s, cwd)

    def relink(argv: list[str], cwd: Path, timeout_s: float) -> str | None:
        cwds.append(Path(cwd))
        assert not any(p.is_file() for p in Path(cwd).iterdir()), "the relink ran in a folder that holds files"
        return real_relink(argv, cwd, timeout_s)

    checks = []

    def check_library(lib: Path):  # noqa: ANN202 - a test double
        checks.append(lib)
        if len(checks) == 1:  # the first layout "refused for displacement bytes only": the next one is a relink
            raise PolicyError("layout", details={"violations": [{"name": "bytes 0f 05 at 0x1 (inside a displacement)"}]})
        return real_check(lib)

    monkeypatch.setattr(compile_mod, "_run_nvcc", run_nvcc)
    monkeypatch.setattr(compile_mod, "relink", relink)
    monkeypatch.setattr(compile_mod, "check_library", check_library)
    res = compile_mod.compile_kernel(cand / "cand.cu", cache_dir=tmp_path / "cache")

    assert len(checks) == 2 and res.flags != compile_mod.nvcc_flags()  # the accepted library is the relinked one
    assert cwds and all(cand.name not in c.parts for c in cwds)
    assert not marker.exists(), "a library beside the candidate was loaded by a build tool"
    exported = run_tool(["nm", "-D", str(res.library)])
    assert "attnq_leak" not in exported and "attnq_driver_fn" not in exported
    assert "cudaGetDriverEntryPoint" not in res.imported_symbols
    assert b"PRETTY_NAME" not in Path(res.library).read_bytes()
