"""Fixtures of the GPU tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def fp32_reference_precision():
    """The fp32 reference must run in true fp32 (no TF32) for the tolerances to mean anything."""
    import torch

    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = saved
