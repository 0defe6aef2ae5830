"""Session 17's red team, still open until session 18: nvcc read the candidate's path (and its local headers) again
after the policy's scans, so a file changed in between was built unchecked. The candidate and its local headers are
read once now (harness/snapshot.py): the scans read those bytes, the cache key hashes them, and nvcc builds a private
copy of them. The race tests change the user's files between the scans and nvcc, for real: nvcc runs and the built
library is inspected; only the moment of the change is hooked."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from pathlib import Path

import pytest

import harness.compile as compile_mod
import harness.snapshot as snapshot_mod
from harness import KERNELS_DIR
from harness.compile import compile_kernel, nvcc_flags
from harness.errors import CompileError, InputError, PolicyError
from harness.policy import parse_nm_defined, run_tool
from harness.snapshot import take_snapshot
from tests.test_policy import _nvcc_or_skip

_FWD = 'extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t s) { return 0; }\n'
_GRAB = ('extern "C" int attnq_swapped_variant() { void* f; cudaDriverEntryPointQueryResult r; '
         'return (int)cudaGetDriverEntryPoint("cuStreamCreate", &f, cudaEnableDefault, &r); }\n')
CHECKED_SOURCE = ('#include "attn_abi.h"\n#include "mine.h"\n'
                  'extern "C" int attnq_checked_variant() { return kValue; }\n' + _FWD)
CHECKED_HEADER = "#pragma once\nconstexpr int kValue = 1;\n"
#: What the race writes: a driver lookup only the source scans refuse (the import itself is allow-listed).
SWAPPED = {"source": '#include "attn_abi.h"\n' + _GRAB + _FWD, "header": CHECKED_HEADER + _GRAB}


def _candidate(tmp_path: Path, absolute: bool = False) -> tuple[Path, Path]:
    """``(cand/k.cu, cand/mine.h)``: the checked candidate, including its header by name or by absolute path."""
    cand = tmp_path / "cand"
    cand.mkdir()
    source = CHECKED_SOURCE.replace('"mine.h"', f'"{cand / "mine.h"}"') if absolute else CHECKED_SOURCE
    (cand / "k.cu").write_text(source)
    (cand / "mine.h").write_text(CHECKED_HEADER)
    return cand / "k.cu", cand / "mine.h"


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["preprocessing", "build"])
@pytest.mark.parametrize(("changed", "absolute"), [("source", False), ("header", False), ("header", True)])
def test_a_file_changed_after_the_scans_is_not_what_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            changed: str, absolute: bool, moment: str) -> None:
    """The user's .cu (or its header, included by name or by absolute path) is rewritten after the raw scans read it,
    right before nvcc's first -E pass or right before the build. The library built is the checked one (its marker
    symbol, no driver lookup), the result and the cache key describe the checked bytes, and the rewritten bytes are
    refused once they are what is read."""
    _nvcc_or_skip()
    src, hdr = _candidate(tmp_path, absolute)
    target = src if changed == "source" else hdr
    original = target.read_text()
    real = compile_mod._run_nvcc
    raced: list[tuple[Path, bytes]] = []

    def racing(argv: list[str], *args: object):
        building = "-E" not in argv
        if not raced and building == (moment == "build"):
            target.write_text(SWAPPED[changed])  # the user's file changes now, after the scans read it
            copy = Path(argv[argv.index("-o") - 1] if building else argv[-1])
            raced.append((copy, (copy.parent / target.name).read_bytes()))
        return real(argv, *args)

    monkeypatch.setattr(compile_mod, "_run_nvcc", racing)
    res = compile_kernel(src, cache_dir=tmp_path / "cache")
    ((copy, copy_bytes),) = raced
    assert target.read_text() == SWAPPED[changed]  # the race did happen
    assert copy != src and copy.name == src.name and copy_bytes == original.encode()  # nvcc read the checked copy
    defined = parse_nm_defined(run_tool(["nm", "-D", "--defined-only", res.library]))
    assert "attnq_checked_variant" in defined and "attnq_swapped_variant" not in defined
    assert "cudaGetDriverEntryPoint" not in res.imported_symbols
    assert res.source_sha256 == hashlib.sha256(src.read_bytes() if changed == "header" else original.encode()).hexdigest()
    assert res.local_headers == sorted([str(hdr), str(KERNELS_DIR / "attn_abi.h")])  # sorted: the repo may sit before /tmp
    with pytest.raises(PolicyError, match="cuStreamCreate"):  # the rewritten bytes, once they are what is read
        compile_kernel(src, cache_dir=tmp_path / "cache")
    target.write_text(original)  # the key hashed the checked bytes: putting them back finds the entry built above
    again = compile_kernel(src, cache_dir=tmp_path / "cache")
    assert again.cache_hit and (again.cache_key, again.build_hash) == (res.cache_key, res.build_hash)
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".tmp-")]  # copies removed


def test_the_snapshot_takes_local_includes_once_and_nothing_outside(tmp_path: Path) -> None:
    """Quoted includes beside the including file (nested, `..` inside the folder), kernels/ for both kinds; nothing
    outside the candidate's folder and kernels/ is read, a link out of them is refused, a FIFO is never opened; an
    absolute include is pointed at the copy (refused where a line splice cuts its path). Without confinement (the
    policy off) every file an include names is taken."""
    outside, cand = tmp_path / "outside", tmp_path / "cand"
    (cand / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.h").write_text("int TOPSECRET;\n")
    (cand / "sub" / "a.h").write_text('#include "../b.h"\n')
    (cand / "b.h").write_text("int b;\n")
    (cand / "link.h").symlink_to(outside / "secret.h")
    os.mkfifo(cand / "fifo.h")
    src = cand / "k.cu"
    src.write_text('#include "attn_abi.h"\n#include "sub/a.h"\n#include <cuda_runtime.h>\n'
                   '#include "../outside/secret.h"\n#include "link.h"\n#include "fifo.h"\n'
                   f'#include "{cand}/b.h" // by absolute path\n#include "{cand}/\\\nb.h"\n' + _FWD)
    got: dict[bool, object] = {}
    worker = threading.Thread(target=lambda: got.update({c: take_snapshot(src, confine=c) for c in (True, False)}),
                              daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "take_snapshot blocked (opened the FIFO?)"
    snap, loose = got[True], got[False]
    assert list(snap.headers) == sorted([cand / "b.h", cand / "sub" / "a.h", KERNELS_DIR / "attn_abi.h"])
    assert not any(b"TOPSECRET" in data for data in snap.headers.values())
    assert [(v.name, v.line, v.file) for v in snap.refused] == [("link.h", 5, str(src)), (f"{cand}/b.h", 8, str(src))]
    assert "link to a file outside" in snap.refused[0].reason and "in one piece" in snap.refused[1].reason
    assert snap.redirects == {src: [(7, f'"{cand}/b.h"')]}
    assert set(loose.headers) == {cand / "b.h", cand / "sub" / "a.h", KERNELS_DIR / "attn_abi.h",
                                  outside / "secret.h", cand / "link.h"}
    assert [v.line for v in loose.refused] == [8]  # reported only with the policy on (compile's _scan)

    tree = snap.write(tmp_path / "copy")
    for user, data in snap.files():
        copy = tree.path(user)
        assert (copy.read_bytes() == data or user == src) and not stat.S_IMODE(copy.stat().st_mode) & 0o222
    assert tree.source == tmp_path / "copy" / str(src).lstrip("/")
    assert tree.source.read_text().splitlines()[6] == f'#include "{tree.path(cand / "b.h")}" // by absolute path'

    flags = tree.flags(nvcc_flags())
    inc = Path(flags[flags.index("-I") + 1])  # the -I folder of the copy: the ABI header only, not kernels/'s copy
    assert inc != tree.path(KERNELS_DIR) and tree.path(KERNELS_DIR).is_dir()
    assert [p.name for p in inc.iterdir()] == ["attn_abi.h"]
    assert (inc / "attn_abi.h").read_bytes() == (KERNELS_DIR / "attn_abi.h").read_bytes()
    assert tree.user_text(f"{inc}/attn_abi.h:9: error: x") == f"{KERNELS_DIR}/attn_abi.h:9: error: x"
    assert tree.user_text(f"{tree.source}(3): error: x") == f"{src}(3): error: x"
    assert snap.text(str(cand / "sub" / ".." / "b.h")) == "int b;\n" and snap.text(str(outside / "secret.h")) is None


def test_bad_snapshots_are_input_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Too many local files, or a local file larger than the whole snapshot may be, is refused by name."""
    for i in range(3):
        (tmp_path / f"h{i}.h").write_text(f'#include "h{i + 1}.h"\n')
    (tmp_path / "k.cu").write_text('#include "h0.h"\n' + _FWD)
    monkeypatch.setattr(snapshot_mod, "MAX_LOCAL_FILES", 2)
    with pytest.raises(InputError, match="more than 2 local files"):
        take_snapshot(tmp_path / "k.cu")
    monkeypatch.setattr(snapshot_mod, "MAX_SNAPSHOT_BYTES", 8)
    with pytest.raises(InputError, match="h0.h is larger than the 8 byte limit"):
        take_snapshot(tmp_path / "k.cu")


@pytest.mark.slow
def test_includes_the_copy_cannot_hold_are_named_and_diagnostics_name_the_users_files(tmp_path: Path) -> None:
    """An absolute #include of the candidate's own header builds from the copy (the race test above shows it is the
    copy that is read), but one a macro makes is refused (the -E scan: a file of the candidate's folder read from
    outside the copy); a local header named only by a macro is not in the copy, and the error says so. Diagnostics
    and violations name the user's files, never the copy's."""
    _nvcc_or_skip()
    cache = tmp_path / "cache"
    src, hdr = _candidate(tmp_path)
    cand = src.parent
    (cand / "abs.cu").write_text(f'#include "attn_abi.h"\n#include "{hdr}"\nint x = kValue;\n' + _FWD)
    assert compile_kernel(cand / "abs.cu", cache_dir=cache).local_headers == sorted([str(hdr), str(KERNELS_DIR / "attn_abi.h")])
    cases = {"macro_abs": f'#define P "{hdr}"\n#include P\n',
             "macro": '#define P "mine.h"\n#include P\n', "bad_header": '#include "bad.h"\n'}
    (cand / "bad.h").write_text("#pragma once\nint broken = undeclared_thing;\n#include <dlfcn.h>\n")
    errors = {}
    for name, include in cases.items():
        (cand / f"{name}.cu").write_text('#include "attn_abi.h"\n' + include + _FWD)
        with pytest.raises((PolicyError, CompileError)) as info:
            compile_kernel(cand / f"{name}.cu", cache_dir=cache)
        errors[name] = info.value
        assert str(cache) not in info.value.message + json.dumps(info.value.details), name
    (v,) = errors["macro_abs"].details["violations"]
    assert (v["file"], v["name"]) == (str(cand / "macro_abs.cu"), str(hdr)) and "not the checked copy" in v["reason"]
    assert isinstance(errors["macro"], CompileError)
    assert f"{hdr} exists" in errors["macro"].message and "not through a macro" in errors["macro"].message
    (v,) = errors["bad_header"].details["violations"]  # the -E scan's violation, mapped back to the user's header
    assert (v["file"], v["line"], v["kind"]) == (str(cand / "bad.h"), 3, "header") and v["name"].endswith("dlfcn.h")
    (cand / "bad.h").write_text("#pragma once\nint broken = undeclared_thing;\n")
    with pytest.raises(CompileError) as info:
        compile_kernel(cand / "bad_header.cu", cache_dir=cache)
    assert f"{cand / 'bad.h'}:2" in info.value.message and str(cache) not in json.dumps(info.value.details)
    assert [d["file"] for d in info.value.details["diagnostics"] if d["severity"] == "error"] == [str(cand / "bad.h")]
