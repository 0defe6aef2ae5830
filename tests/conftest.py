"""Shared pytest set-up: the ``gpu`` marker skips with a reason where no suitable GPU is present."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def gpu_skip_reason() -> str | None:
    """None when an NVIDIA GPU of compute capability >= 9.0 (sm_90a builds) is usable, else why not."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no NVIDIA GPU visible to torch (GPU tests run on an H200 via scripts/gpu_run.sh)"
    major, minor = torch.cuda.get_device_capability()
    if major < 9:
        return f"GPU has compute capability {major}.{minor}; attnq builds sm_90a by default"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            reason = reason or gpu_skip_reason()
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
