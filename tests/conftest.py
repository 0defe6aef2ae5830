"""Shared pytest set-up: the ``gpu`` marker skips with a reason where no suitable GPU is present; the
developer's ``ATTNQ_*`` environment (workspace, state directory, suite, goal...) never reaches a test."""

from __future__ import annotations

import functools
import os

import pytest


@pytest.fixture(autouse=True)
def _no_attnq_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests build their own Settings; an exported ATTNQ_STATE or ATTNQ_WORKSPACE must not redirect them
    (into the developer's campaign store, say). ``ATTNQ_FAST_KERNEL`` (which kernel the GPU tests load) stays."""
    for name in list(os.environ):
        if name.startswith("ATTNQ_") and name != "ATTNQ_FAST_KERNEL":
            monkeypatch.delenv(name)


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
