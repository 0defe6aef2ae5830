"""Every verification places each correct scenario on the roofline (harness/roofline.py): a prefill shape
is compute-bound, a decode shape memory-bound, both within their roof. Runs on the H200."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import ORIGINAL_KERNEL
from harness.config import Settings
from harness.roofline import HBM_TBPS_MEASURED_H200
from harness.verify import VerifyOptions, verify_kernel

PREFILL = "fa3grid/b8-s2048-h16-d128-noncausal-bf16"
DECODE = "production/b16-sq1-sk8192-h32x8-d128-noncausal-bf16"


@pytest.mark.gpu
def test_verdict_carries_bound_and_fraction(tmp_path: Path) -> None:
    settings = Settings(workspace=tmp_path, state=tmp_path / "state")
    v = verify_kernel(ORIGINAL_KERNEL, VerifyOptions(suite="quick", scenario_ids=[PREFILL, DECODE], min_samples=5,
                                                     max_samples=5), settings=settings)
    rows = {r.id: r for r in v.scenarios}
    assert v.hbm_tbps == HBM_TBPS_MEASURED_H200 and v.bound_tflops == v.peak_tflops
    assert rows[PREFILL].correct and rows[PREFILL].bound == "compute"
    assert rows[PREFILL].fraction_of_bound == pytest.approx(rows[PREFILL].fraction_of_peak, rel=1e-9)
    assert rows[DECODE].correct and rows[DECODE].bound == "memory"
    for r in rows.values():
        assert 0 < r.fraction_of_bound <= 1.05, r.id
