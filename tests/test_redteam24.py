"""Red team, session 24 (CPU only: nvcc builds and the source policy, no GPU).

- nvcc's link stub compile (``crt/link.stub``: ``#include <stddef.h>``, no ``__CUDACC__``) kept the ``-I`` folder of
  the build, the copy of kernels/. A ``stddef.h`` there (an agent can write kernels/), reached by a candidate in
  kernels/ or by one elsewhere that includes ``"stddef.h"``, put code no ``-E`` pass of the policy read into an
  accepted library. Now ``-I`` names a folder of the copy that holds only the ABI header
  (``harness.snapshot.INCLUDE_DIR_FILES``).
- A failed ``-E`` pass came back as a CompileError quoting the lines of the file it stopped in, also when that file
  lay outside the candidate's folder and kernels/ (a macro-made ``#include`` of a file whose first line starts with
  ``#``); the refusal of such files waited for a pass that succeeded. Now the failure's diagnostics are judged first
  (``harness.policy.scan_failed_pass``) and only the file's name is reported.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import pytest

import harness.build_cache as cache_mod
import harness.compile as compile_mod
from harness import ABI_HEADER
from harness.errors import CompileError, PolicyError
from harness.policy import run_tool
from harness.snapshot import take_snapshot
from tests.test_policy import _nvcc_or_skip
from tests.test_relink_redteam23 import _KERNEL, _STDDEF


def _no_payload(lib: str) -> None:
    exported = run_tool(["nm", "-D", lib])
    assert "attnq_leak" not in exported and "attnq_driver_fn" not in exported
    assert b"PRETTY_NAME" not in Path(lib).read_bytes() and b"cuMemAlloc_v2" not in Path(lib).read_bytes()


@pytest.mark.parametrize("where", ["in_kernels", "elsewhere"])
def test_a_header_in_kernels_never_reaches_the_link_stub(where: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """kernels/ (a stand-in folder: the test must not write the checkout's) holds the ABI header and a ``stddef.h``
    whose payload exists only without ``__CUDACC__``; the candidate lives there, or elsewhere and includes
    ``"stddef.h"``: the build is accepted and the library holds none of the payload."""
    _nvcc_or_skip()
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    shutil.copy(ABI_HEADER, kernels / "attn_abi.h")
    (kernels / "stddef.h").write_text(_STDDEF.replace("#include_next <stddef.h>\n#endif", "#endif\n#include_next <stddef.h>"))
    monkeypatch.setattr(compile_mod, "KERNELS_DIR", kernels)
    monkeypatch.setattr(cache_mod, "KERNELS_DIR", kernels)
    monkeypatch.setattr(compile_mod, "take_snapshot", functools.partial(take_snapshot, include_dirs=(kernels,)))
    folder = kernels if where == "in_kernels" else tmp_path / "cand"
    folder.mkdir(exist_ok=True)
    (folder / "k.cu").write_text('#include "stddef.h"\n' + _KERNEL)
    res = compile_mod.compile_kernel(folder / "k.cu", cache_dir=tmp_path / "cache")
    _no_payload(res.library)
    # the snapshot takes kernels/'s stddef.h only for the candidate beside it (its own folder), never through -I
    assert (str(kernels / "stddef.h") in res.local_headers) == (where == "in_kernels")


def test_a_failed_pass_never_quotes_a_file_outside_the_candidates_folder(tmp_path: Path) -> None:
    """A macro-made include of a file outside the candidate's folder whose first line gcc rejects (an unknown
    directive) is refused by name; neither the message nor the details hold its text. The candidate's own syntax
    error still comes back as a CompileError with its line."""
    _nvcc_or_skip()
    secret = tmp_path / "secret" / "token.txt"
    secret.parent.mkdir()
    secret.write_text('# API_KEY sk-TOPSECRET-12345\nMORE = "x\n')
    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "k.cu").write_text(f'#include "attn_abi.h"\n#define P "{secret}"\n#include P\n' + _KERNEL)
    with pytest.raises(PolicyError) as err:
        compile_mod.compile_kernel(cand / "k.cu", cache_dir=tmp_path / "cache")
    assert str(secret) in str(err.value) and "outside the candidate's folder" in str(err.value)
    assert "TOPSECRET" not in str(err.value) and "TOPSECRET" not in repr(err.value.details)

    (cand / "bad.cu").write_text(_KERNEL + "\n#if\n")  # the candidate's own error: reported as before
    with pytest.raises(CompileError) as err2:
        compile_mod.compile_kernel(cand / "bad.cu", cache_dir=tmp_path / "cache")
    assert "bad.cu" in str(err2.value) or "bad.cu" in repr(err2.value.details)


def test_the_compilers_environment_cannot_change_a_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``NVCC_APPEND_FLAGS`` and gcc's ``CPATH`` are not the key's: they never reach nvcc (harness.procs.build_env),
    so a build made with them set is the one the key names."""
    _nvcc_or_skip()
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "planted.h").write_text("#error planted header read\n")
    monkeypatch.setenv("NVCC_APPEND_FLAGS", "-DRT24_MODE")
    monkeypatch.setenv("CPATH", str(inc))
    (tmp_path / "k.cu").write_text("#ifdef RT24_MODE\n#error NVCC_APPEND_FLAGS reached nvcc\n#endif\n"
                                   "#if __has_include(<planted.h>)\n#error CPATH reached the compiler\n#endif\n" + _KERNEL)
    res = compile_mod.compile_kernel(tmp_path / "k.cu", cache_dir=tmp_path / "cache")
    assert not res.cache_hit and Path(res.library).is_file()


def test_a_library_swapped_into_the_cache_is_checked_again(tmp_path: Path) -> None:
    """A cache entry whose library was replaced (with its hash written into facts.json, as anyone who can write the
    cache folder can) by a build the policy refuses is refused on the next hit and built again."""
    _nvcc_or_skip()
    (tmp_path / "k.cu").write_text(_KERNEL)
    (tmp_path / "evil.cu").write_text('#include <dlfcn.h>\n' + _KERNEL.replace(
        "(void)p;", '(void)p; if (!p) dlopen("libcublas.so", 1);'))
    res = compile_mod.compile_kernel(tmp_path / "k.cu", cache_dir=tmp_path / "cache")
    evil = compile_mod.compile_kernel(tmp_path / "evil.cu", cache_dir=tmp_path / "other", policy=False)
    assert "dlopen" in evil.imported_symbols
    entry = Path(res.library).parent
    shutil.copy(evil.library, entry / "kernel.so")
    facts = (entry / "facts.json").read_text().replace(res.build_hash, evil.build_hash)
    (entry / "facts.json").write_text(facts)

    again = compile_mod.compile_kernel(tmp_path / "k.cu", cache_dir=tmp_path / "cache")
    assert not again.cache_hit and "dlopen" not in again.imported_symbols
    assert "dlopen" not in run_tool(["nm", "-D", "--undefined-only", again.library])
    assert compile_mod.compile_kernel(tmp_path / "k.cu", cache_dir=tmp_path / "cache").cache_hit



def test_the_cli_records_the_text_of_the_file_it_compiled(tmp_path: Path) -> None:
    """``attnq verify bad.cu`` in folder A with ATTNQ_WORKSPACE naming folder B, which holds another ``bad.cu``: the
    attempt the CLI records holds A's text (the file nvcc saw), not B's."""
    import os
    import subprocess
    import sys

    from harness.store import STORE_FILENAME, CampaignStore

    a, b, state = tmp_path / "wsA", tmp_path / "wsB", tmp_path / "state"
    a.mkdir()
    b.mkdir()
    (a / "bad.cu").write_text("// the file that was compiled\nint x = ;\n")
    (b / "bad.cu").write_text("// A DIFFERENT FILE that was never built\n" + _KERNEL)
    env = {**os.environ, "ATTNQ_WORKSPACE": str(b), "ATTNQ_STATE": str(state),
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-m", "attnq", "verify", "bad.cu", "--suite", "quick", "--json"], cwd=a,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0, proc.stdout
    with CampaignStore(state / STORE_FILENAME) as store:
        texts = [r.source_text for r in store.attempts()]
    assert texts == ["// the file that was compiled\nint x = ;\n"]


def test_a_folder_with_a_colon_and_digits_still_gets_its_compile_error(tmp_path: Path) -> None:
    """A failed -E pass in a folder named like ``run-12:30`` reports the candidate's own missing header, not a
    policy refusal of a path cut at the colon (fresh user, session 24)."""
    _nvcc_or_skip()
    cand = tmp_path / "run-12:30"
    cand.mkdir()
    (cand / "k.cu").write_text('#include "nope.h"\n' + _KERNEL)
    with pytest.raises(CompileError) as err:
        compile_mod.compile_kernel(cand / "k.cu", cache_dir=tmp_path / "cache")
    assert not isinstance(err.value, PolicyError) and "nope.h" in str(err.value)


@pytest.mark.parametrize("name", ["gcc", "g++", "g++-12", "x86_64-linux-gnu-g++-12", "clang++-17", "cc", "c++"])
def test_host_compilers_by_any_usual_name_are_recognised(name: str) -> None:
    from harness.nvcc_passes import _gcc_commands

    assert _gcc_commands(f'#$ /usr/bin/{name} -E -x c++ "x.cpp"\n#$ cudafe++ --x\n#$ cicc x\n') == \
        [[f"/usr/bin/{name}", "-E", "-x", "c++", "x.cpp"]]


def test_nvcc_ccbin_with_a_versioned_name_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``NVCC_CCBIN`` naming the system g++ by a versioned name (a wrapper script ``g++-99`` that runs it): the policy
    finds both of nvcc's passes and the build succeeds."""
    _nvcc_or_skip()
    gxx = shutil.which("g++")
    if not gxx:
        pytest.skip("no g++")
    (tmp_path / "bin").mkdir()
    wrapper = tmp_path / "bin" / "g++-99"
    wrapper.write_text(f'#!/bin/sh\nexec {gxx} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("NVCC_CCBIN", str(wrapper))
    (tmp_path / "k.cu").write_text(_KERNEL)
    res = compile_mod.compile_kernel(tmp_path / "k.cu", cache_dir=tmp_path / "cache")
    assert Path(res.library).is_file()


def test_a_file_edited_after_its_build_is_not_archived_as_the_attempt(tmp_path: Path) -> None:
    """The CLI's record of an attempt reads the file again after the run: bytes that are not the ones built (edited
    while verify ran) are not archived; the attempt keeps the build's hash. Unchanged bytes are archived."""
    from harness.config import Settings
    from harness.store import STORE_FILENAME, CampaignStore
    from questions.reflect import record_verified_attempt

    _nvcc_or_skip()
    src = tmp_path / "k.cu"
    src.write_text(_KERNEL)
    res = compile_mod.compile_kernel(src, cache_dir=tmp_path / "cache")
    settings = Settings(workspace=tmp_path, state=tmp_path / "state")
    record_verified_attempt("k.cu", None, settings, compile_result=res, base=tmp_path)
    src.write_text(_KERNEL + "// edited while verify ran\n")
    record_verified_attempt("k.cu", None, settings, compile_result=res, base=tmp_path)
    with CampaignStore(tmp_path / "state" / STORE_FILENAME) as store:
        got = [(r.source_sha256, r.source_text) for r in store.attempts()]
    assert got == [(res.source_sha256, _KERNEL), (res.source_sha256, None)]
