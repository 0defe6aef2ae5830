"""harness/relink.py: a host-code relayout replays nvcc's host compile and link against the first build's kept
intermediates instead of compiling the device code again (CPU only: nvcc builds, no GPU).

Before session 22 every layout of ``RELAYOUT_FLAGS`` after the first was a full nvcc build (~60 s for the fast kernel),
and run 70's compile of kernels/attn_fast.cu on the GPU box took more than 150 s. An honest build holds ~4,000
displacements, so a layout needs a retry now and then by chance alone.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from harness.compile import compile_kernel, find_nvcc, nvcc_flags
from harness.exec_scan import RELAYOUT_FLAGS
from harness.policy import run_tool
from harness.relink import relink, replay_plan
from tests.test_policy import _nvcc_or_skip

ROOT = Path(__file__).resolve().parents[1]
ORIGINAL = ROOT / "kernels" / "attn_original.cu"
#: tests/adversarial/race_head_replay.cu: its first two layouts hold `0f 05` in a displacement (PLT entries)
NEEDS_LAYOUT = ROOT / "tests" / "adversarial" / "race_head_replay.cu"


def _argv(src: Path, keep: Path, lib: Path, extra: tuple[str, ...] = ()) -> list[str]:
    return [find_nvcc(), *nvcc_flags(), *extra, "--keep", "--keep-dir", str(keep), str(src), "-o", str(lib)]


def _section(lib: Path, name: str) -> str:
    return run_tool(["readelf", "-x", name, str(lib)]).split("\n", 2)[-1]


@pytest.fixture(scope="module")
def first_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """attn_original.cu built once with its intermediates kept: (source copy, keep folder, library)."""
    _nvcc_or_skip()
    d = tmp_path_factory.mktemp("relink")
    src = d / "attn_original.cu"
    shutil.copy(ORIGINAL, src)
    keep = d / "keep"
    keep.mkdir()
    subprocess.run(_argv(src, keep, d / "first.so"), check=True, capture_output=True, cwd=d)
    return src, keep, d / "first.so"


def test_the_plan_replays_host_compile_to_link(first_build: tuple[Path, Path, Path]) -> None:
    src, keep, _ = first_build
    out = subprocess.run([*_argv(src, keep, src.parent / "x.so", RELAYOUT_FLAGS[2]), "-dryrun"],
                         capture_output=True, text=True, cwd=src.parent)
    plan = replay_plan(out.stderr)
    assert not isinstance(plan, str), plan
    env, argvs = plan
    assert "PATH" in env
    tools = [Path(a[0]).name for a in argvs]
    assert tools[0] in ("gcc", "g++", "c++", "cc") and argvs[0][-3].endswith(".cudafe1.cpp"), argvs[0]
    assert "cicc" not in tools and "ptxas" not in tools  # the device code is not compiled again
    assert argvs[-1][-1] == str(src.parent / "x.so")
    assert "-falign-functions=32" in argvs[0] and "max-page-size=0x10000" in argvs[-1]  # the layout's flags in place


def test_a_plan_line_that_needs_a_shell_is_not_replayed(first_build: tuple[Path, Path, Path]) -> None:
    src, keep, _ = first_build
    out = subprocess.run([*_argv(src, keep, src.parent / "x.so"), "-dryrun"], capture_output=True, text=True,
                         cwd=src.parent).stderr
    lines = out.splitlines()
    last = max(i for i, ln in enumerate(lines) if ln.startswith("#$ "))
    lines[last] += " $(touch pwned)"
    reason = replay_plan("\n".join(lines))
    assert isinstance(reason, str) and "needs a shell" in reason
    assert isinstance(replay_plan("#$ PATH=/bin\n#$ nvlink x.o"), str)  # no host compile step: nothing to replay


def test_relink_moves_the_host_code_and_keeps_the_device_code(first_build: tuple[Path, Path, Path]) -> None:
    src, keep, first = first_build
    # the device compile's own outputs gone: a relink that ran cicc or ptxas again would fail
    for p in [*keep.glob("*.ptx"), *keep.glob("attn_original*.cubin")]:
        p.unlink()
    lib = src.parent / "moved.so"
    t0 = time.perf_counter()
    assert relink(_argv(src, keep, lib, RELAYOUT_FLAGS[1]), src.parent, 60.0) is None
    assert time.perf_counter() - t0 < 30.0
    assert _section(lib, ".text") != _section(first, ".text")
    assert _section(lib, ".nv_fatbin") == _section(first, ".nv_fatbin")
    assert "attn_fwd" in run_tool(["nm", "-D", "--defined-only", str(lib)])


def test_relink_runs_nothing_for_a_path_that_is_not_plain(first_build: tuple[Path, Path, Path], tmp_path: Path) -> None:
    src, keep, _ = first_build
    odd = tmp_path / 'a "b" -fplugin=x'
    odd.mkdir()
    lib = odd / "k.so"
    reason = relink(_argv(src, keep, lib, RELAYOUT_FLAGS[1]), src.parent, 60.0)
    assert reason is not None and "not a plain path" in reason
    assert not lib.exists()


@pytest.mark.slow
def test_a_build_that_needs_another_layout_relinks_or_falls_back(tmp_path: Path) -> None:
    """race_head_replay.cu's first two layouts are refused for displacement bytes: the accepted build names the layout
    it used; from a plain folder the retries are relinks, from a folder whose name a relink refuses they are full
    builds, with the same outcome."""
    _nvcc_or_skip()
    plain = tmp_path / "plain"
    odd = tmp_path / "with space"
    for d in (plain, odd):
        d.mkdir()
        for f in [NEEDS_LAYOUT, *NEEDS_LAYOUT.parent.glob("*.cuh"), *NEEDS_LAYOUT.parent.glob("*.h")]:
            shutil.copy(f, d / f.name)
    results = {}
    for d in (plain, odd):
        t0 = time.perf_counter()
        res = compile_kernel(d / NEEDS_LAYOUT.name, cache_dir=d / "cache")
        results[d] = (res, time.perf_counter() - t0)
    for res, _ in results.values():
        assert res.flags[len(nvcc_flags()):] in [list(f) for f in RELAYOUT_FLAGS[1:]], res.flags
    assert results[plain][0].flags == results[odd][0].flags
    assert results[plain][1] < results[odd][1]  # two relinks (~1 s each) against two more nvcc builds
