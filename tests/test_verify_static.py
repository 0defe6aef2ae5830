"""Verification guards that need no GPU: the pinned original and the run's option checks."""

from __future__ import annotations

import hashlib

import pytest

import harness.verify as verify_mod
from harness import ORIGINAL_KERNEL, ORIGINAL_SOURCE_SHA256
from harness.errors import VerifyError


def test_the_pin_matches_the_original_in_the_tree() -> None:
    assert hashlib.sha256(ORIGINAL_KERNEL.read_bytes()).hexdigest() == ORIGINAL_SOURCE_SHA256
    verify_mod.check_original_source()  # does not raise


def test_a_modified_original_is_refused(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    slower = tmp_path / "attn_original.cu"
    slower.write_text(ORIGINAL_KERNEL.read_text() + "\n// an edit that would change every speedup\n")
    monkeypatch.setattr(verify_mod, "ORIGINAL_KERNEL", slower)
    with pytest.raises(VerifyError, match="was modified"):
        verify_mod.check_original_source()
