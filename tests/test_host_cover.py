"""The host-path cover (harness/host_cover.py) on the CPU: the launchers' spin kernel is valid PTX for the
H200 (ptxas), one rule decides who is covered, ``ATTNQ_HOST_COVER_ALL`` is parsed, and the setting reaches
both launchers, which report it back. The spin itself (duration equal to torch.cuda._sleep's) is checked on
the GPU: tests/gpu/test_host_cover.py."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness import REPO_ROOT
from harness.arena import HostArenas
from harness.config import Settings
from harness.host_cover import HOST_COVER_CYCLES, SPIN_ENTRY, SPIN_PTX, host_cover_cycles
from harness.launch_client import LauncherError, LauncherKernel
from harness.worker import WorkerJob, finish_endpoints, spawn_launchers
from tests import hostkernels

PTXAS = shutil.which("ptxas") or next((str(p) for p in Path("/usr/local").glob("cuda*/bin/ptxas")), None)


@pytest.mark.skipif(PTXAS is None, reason="needs ptxas (the CUDA toolkit)")
def test_the_spin_ptx_assembles_for_the_h200(tmp_path: Path) -> None:
    """The PTX the launchers JIT-compile assembles for sm_90a into a cubin holding its entry point; a
    corrupted copy does not (so the check can fail)."""
    src, cubin = tmp_path / "spin.ptx", tmp_path / "spin.cubin"
    src.write_text(SPIN_PTX)
    r = subprocess.run([PTXAS, "-arch=sm_90a", "-v", str(src), "-o", str(cubin)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"Compiling entry function '{SPIN_ENTRY}' for 'sm_90a'" in r.stderr + r.stdout
    assert SPIN_ENTRY.encode() in cubin.read_bytes()
    src.write_text(SPIN_PTX.replace("%clock64", "%clock65"))
    bad = subprocess.run([PTXAS, "-arch=sm_90a", str(src), "-o", str(cubin)], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode != 0


def test_one_rule_covers_anchors_always_and_kernels_on_request() -> None:
    assert HOST_COVER_CYCLES == 1_000_000  # ~0.5 ms at the H200's 1.98 GHz
    assert host_cover_cycles("anchor", False) == host_cover_cycles("anchor", True) == HOST_COVER_CYCLES
    assert host_cover_cycles("kernel", False) == 0
    assert host_cover_cycles("kernel", True) == HOST_COVER_CYCLES
    with pytest.raises(ValueError, match="'anchor' or 'kernel'"):
        host_cover_cycles("candidate", True)  # type: ignore[arg-type]


def test_attnq_host_cover_all_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().host_cover_all is False
    monkeypatch.setenv("ATTNQ_HOST_COVER_ALL", "1")
    assert Settings().host_cover_all is True
    monkeypatch.setenv("ATTNQ_HOST_COVER_ALL", "0")
    assert Settings().host_cover_all is False
    monkeypatch.setenv("ATTNQ_HOST_COVER_ALL", "sometimes")
    with pytest.raises(ValidationError, match="host_cover_all"):
        Settings()


@pytest.mark.skipif(not hostkernels.have_cc(), reason="needs a C compiler (gcc) for the CPU kernels")
@pytest.mark.parametrize("cover_all", [False, True])
def test_the_setting_reaches_both_launchers(tmp_path: Path, cover_all: bool) -> None:
    """The worker starts both launchers with the kernels' cover (harness.worker.spawn_launchers) and reports
    what each launcher says it applies, beside the anchors' (what the verdict's host_cover_cycles shows)."""
    lib, sha = hostkernels.build(tmp_path)
    job = WorkerJob(original_sparse_ms=0.0, candidate_lib=str(lib), original_lib=str(lib), candidate_sha256=sha, original_sha256=sha,
                    scenarios=[], seed=1, device="cpu", host_cover_all=cover_all)
    cand, orig, arenas, cand_b = spawn_launchers(job)
    _, info = finish_endpoints(job, cand, orig, arenas, cand_b)
    cand, orig, cand_b = info.pop("endpoints")
    try:
        kernels = HOST_COVER_CYCLES if cover_all else 0
        assert info["host_cover_cycles"] == {"anchor": HOST_COVER_CYCLES, "candidate": kernels, "original": kernels}
        assert cand_b.host_cover_cycles == kernels  # the repeats' launcher is timed like the candidate's
    finally:
        cand.close(), orig.close(), cand_b.close()


@pytest.mark.skipif(not hostkernels.have_cc(), reason="needs a C compiler (gcc) for the CPU kernels")
def test_a_negative_cover_is_refused_at_start(tmp_path: Path) -> None:
    lib, sha = hostkernels.build(tmp_path)
    with pytest.raises(LauncherError, match="host-cover-cycles must be >= 0"):
        LauncherKernel("candidate", str(lib), sha, arenas=HostArenas(), device="cpu", host_cover_cycles=-1)


def _aa_verdict(orig_ms: dict[str, float], cand_ms: dict[str, float], flash_ms: float, kernels_cover: int) -> str:
    """A verdict of an A/A run as `attnq verify --json` writes it: scenario id -> the original's and the copy's
    median ms, a flash anchor at ``flash_ms`` everywhere."""
    from harness.verdict import ScenarioResult, TimingStats, Verdict, geomean

    def t(ms: float) -> TimingStats:
        return TimingStats(median_ms=ms, iqr_ms=0.01 * ms, samples=10)

    rows = [ScenarioResult(id=k, group=k.split("/")[0], flops=1e9, correct=True, candidate=t(cand_ms[k]), original=t(ms),
                           anchors={"flash": t(flash_ms)}, speedup=ms / cand_ms[k],
                           vs_anchor={"flash": flash_ms / cand_ms[k]}) for k, ms in orig_ms.items()]
    v = Verdict(kernel="copy.cu", source_sha256="s", build_hash="b", original_sha256="o", suite="full", status="correct",
                num_scenarios=len(rows), num_correct=len(rows), scenarios=rows,
                geomean_speedup=geomean(r.speedup for r in rows),
                geomean_vs_anchor={"flash": geomean(r.vs_anchor["flash"] for r in rows)},
                host_cover_cycles={"anchor": HOST_COVER_CYCLES, "candidate": kernels_cover, "original": kernels_cover})
    return v.model_dump_json()


@pytest.mark.parametrize(("odd_on_ms", "expect"), [(0.0201, "keep it on the anchors only"),
                                                    (0.0150, "apply the cover to all")])
def test_compare_aa_decides_from_the_kernels_time_against_the_noise(tmp_path: Path, odd_on_ms: float,
                                                                     expect: str) -> None:
    """scripts/compare_aa.py on the verdicts of `gpu_run.sh aa aa_cover`: tiny scenarios 25% faster with the
    cover (their host path was timed) mean cover all; a 0.5% wobble within the A/A noise means no change."""
    big = {"fa3grid/a": 2.0, "fa3grid/b": 1.0}
    for i in range(3):
        jitter = 1 + 0.002 * i
        off = {**big, "odd/x": 0.0200}
        on = {**{k: ms * jitter for k, ms in big.items()}, "odd/x": odd_on_ms}
        (tmp_path / f"aa_{i + 1}.json").write_text(_aa_verdict(off, {k: ms * jitter for k, ms in off.items()}, 0.5, 0))
        (tmp_path / f"aa_cover_{i + 1}.json").write_text(_aa_verdict(on, on, 0.5, HOST_COVER_CYCLES))
    r = subprocess.run([sys.executable, "scripts/compare_aa.py", str(tmp_path)], capture_output=True, text=True,
                       timeout=60, cwd=REPO_ROOT)
    assert r.returncode == 0, r.stderr
    assert "cover off: 3 runs" in r.stdout and '"candidate": 1000000' in r.stdout
    assert "control: flash anchor time on/off 1.0000" in r.stdout
    decision = r.stdout.splitlines()[-1]
    assert decision.startswith("decision: ") and expect in decision, r.stdout
    (tmp_path / "aa_cover_1.json").unlink(), (tmp_path / "aa_cover_2.json").unlink(), (tmp_path / "aa_cover_3.json").unlink()
    r = subprocess.run([sys.executable, "scripts/compare_aa.py", str(tmp_path)], capture_output=True, text=True,
                       timeout=60, cwd=REPO_ROOT)
    assert r.returncode == 1 and "found 3 and 0" in r.stdout
