"""The host-path cover on the H200 (harness/host_cover.py): the launchers' PTX spin lasts as long as the
anchors' torch.cuda._sleep for the same cycles, and ATTNQ_HOST_COVER_ALL puts it before the candidate's and
the original's timed calls (the launchers load it before their sandbox; the verdict records it)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from harness import ORIGINAL_KERNEL
from harness.config import Settings
from harness.host_cover import HOST_COVER_CYCLES, SpinKernel
from harness.verify import VerifyOptions, verify_kernel

ODD = "odd/b2-s113-h16-d128-causal-bf16"  # microsecond-scale: where a host path would show


def _median_ms(torch, fn, n: int = 7) -> float:
    times = []
    for _ in range(n + 1):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times[1:])  # the first is a warm-up


@pytest.mark.gpu
def test_the_launchers_spin_lasts_as_long_as_the_anchors() -> None:
    import torch

    torch.cuda.synchronize()  # the primary context, current on this thread: the spin loads into it
    spin = SpinKernel()
    ours = _median_ms(torch, lambda: spin.launch(HOST_COVER_CYCLES))
    anchors = _median_ms(torch, lambda: torch.cuda._sleep(HOST_COVER_CYCLES))
    short = _median_ms(torch, lambda: spin.launch(HOST_COVER_CYCLES // 10))
    assert ours == pytest.approx(anchors, rel=0.1), (ours, anchors)
    assert 0.25 < ours < 2.0 and short < ours / 5, (ours, short)  # ~0.5 ms at 1.98 GHz; it scales with cycles


@pytest.mark.gpu
def test_cover_all_reaches_the_kernels_timed_calls(tmp_path: Path) -> None:
    def run(cover_all: bool):
        settings = Settings(workspace=tmp_path, state=tmp_path / "state", host_cover_all=cover_all)
        return verify_kernel(ORIGINAL_KERNEL, VerifyOptions(suite="quick", scenario_ids=[ODD], min_samples=5,
                                                            max_samples=5), settings=settings)

    on, off = run(True), run(False)
    assert on.status == off.status == "correct", (on.scenarios[0].message, off.scenarios[0].message)
    assert on.host_cover_cycles == {"anchor": HOST_COVER_CYCLES, "candidate": HOST_COVER_CYCLES,
                                    "original": HOST_COVER_CYCLES}
    assert off.host_cover_cycles == {"anchor": HOST_COVER_CYCLES, "candidate": 0, "original": 0}
    # the spin is outside the events: a covered call is not 0.5 ms longer
    assert on.scenarios[0].original.median_ms < off.scenarios[0].original.median_ms + 0.2
