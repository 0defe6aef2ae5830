"""Settings from ``ATTNQ_*`` environment variables (flags on the CLI and the server override them).

Every field maps to ``ATTNQ_<FIELD>`` (e.g. ``ATTNQ_WORKSPACE``, ``ATTNQ_GPU``, ``ATTNQ_SUITE``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """attnq settings. Paths are resolved; the workspace holds ``.attnq/`` (cache, campaign store)."""

    model_config = SettingsConfigDict(env_prefix="ATTNQ_", extra="ignore")

    workspace: Path = Field(default_factory=Path.cwd, description="workspace root; client paths resolve inside it")
    gpu: int = Field(default=0, ge=0, description="CUDA device index used by verification")
    suite: str = Field(default="quick", description="default suite: a built-in suite name (harness/suites/*.toml; "
                       "`attnq scenarios --suite NAME` lists one) or a suite .toml")
    arch: str = Field(default="sm_90a", description="default nvcc target arch")
    goal_speedup: float = Field(default=1.0, gt=0, allow_inf_nan=False,
                                description="goal: all correct and geomean vs original >= this")
    goal_anchor: str | None = Field(default=None, description="optional anchor the goal is measured against "
                                    "(cudnn|flash|fa3; fa3 needs FlashAttention-3's flash_attn_interface)")
    stall_window: int = Field(default=4, ge=2, description="stall: best not improved over this many verified attempts")
    stall_min_gain: float = Field(default=0.01, ge=0, allow_inf_nan=False,
                                  description="stall: relative gain that counts as improvement")
    stall_failures: int = Field(default=3, ge=1, description="stall: this many consecutive failed attempts")
    suspicious_jump: float = Field(default=1.3, gt=1, allow_inf_nan=False,
                                   description="suspicious_win: jump over previous best in one step")
    bank_paths: list[Path] = Field(default_factory=list, description="extra question banks (team, personal), in order")
    hbm_tbps: float | None = Field(default=None, gt=0, description="HBM bandwidth for the memory roof, TB/s "
                                   "(default: the measured H200 figure, harness/roofline.py)")
    matmul_tflops: float | None = Field(default=None, gt=0, description="matmul rate for the compute roof, "
                                        "TFLOP/s (default: the rate each verification measures)")
    host_cover_all: bool = Field(default=False, description="the anchors' host-path cover (a ~0.5 ms GPU spin "
                                 "before each timed call) for the candidate and the original too "
                                 "(ATTNQ_HOST_COVER_ALL=1; harness/host_cover.py)")
    stream_escape_check: Literal["wall", "tail"] = Field(
        default="tail", description="how a timed call's work after its end event is found (harness/timing_escape.py): "
        "tail (default since run 23's A/A: 0/85 flagged, 0.999x) = the device time from the end event to the "
        "launcher's synchronize returning (a third event), the wall check kept as a 0.5 ms backstop; wall = the "
        "candidate's host round trip less its event time against the original's (cross-process wake-up noise flags "
        "tiny kernels: run 20's A/A, 41/85 flagged) (ATTNQ_STREAM_ESCAPE_CHECK)")
    diag_order: Literal["candidate_first", "original_first", "alternate"] = Field(
        default="candidate_first", description="diagnostic: which kernel's timed call comes first in each sample "
        "(alternate: the candidate on even samples, the original on odd ones; ATTNQ_DIAG_ORDER)")
    diag_timing_log: Path | None = Field(default=None, description="diagnostic: append one JSON line per scenario "
                                         "with every timed sample (event, wall, device tail of both kernels, the "
                                         "candidate process, the order) to this file (ATTNQ_DIAG_TIMING_LOG)")
    diag_profile: Path | None = Field(default=None, description="diagnostic: profile the checker process's "
                                      "scenario loop with cProfile and write the stats here, with a text summary "
                                      "(top functions by own and by cumulative time) next to it as <path>.txt; a "
                                      "worker started later in the run (after a fatal error, for a fresh-process "
                                      "scenario) writes <path>.<first scenario index> (ATTNQ_DIAG_PROFILE; issue 13: "
                                      "where a scenario's host time goes)")
    diag_single_candidate_launcher: bool = Field(default=False, description="diagnostic: no second candidate "
                                                 "launcher (the repeats run in the first; weakens the determinism "
                                                 "check, never for a real verification; ATTNQ_DIAG_SINGLE_CANDIDATE_LAUNCHER)")
    seed: int | None = Field(default=None, description="seed for question selection (tests); None = random")
    state: Path | None = Field(default=None, description="where attnq keeps its build cache, campaign store and "
                               "locks (ATTNQ_STATE); default <workspace>/.attnq")

    @field_validator("goal_anchor")
    @classmethod
    def _known_anchor(cls, value: str | None) -> str | None:
        """An anchor name of harness.anchors.ANCHORS ("original" and "" mean none); availability is
        checked where the goal is used (harness.anchors.require_anchors)."""
        from harness.anchors import ANCHORS

        if value in (None, "", "original"):
            return None
        if value not in ANCHORS:
            raise ValueError(f"{value!r} is not an anchor; use one of {', '.join(ANCHORS)}")
        return value

    def timing_fields(self) -> dict:
        """The harness.worker.WorkerJob fields these settings decide about timing: the kernels' host-path
        cover, the stream escape check (harness/timing_escape.py) and the diagnostics (order, the timing
        log and the profile as absolute paths, no second candidate launcher)."""
        log, prof = self.diag_timing_log, self.diag_profile
        return {"host_cover_all": self.host_cover_all, "stream_escape_check": self.stream_escape_check,
                "diag_order": self.diag_order, "diag_timing_log": str(log.resolve()) if log else None,
                "diag_profile": str(prof.resolve()) if prof else None,
                "repeat_process": not self.diag_single_candidate_launcher}

    @property
    def state_dir(self) -> Path:
        """``ATTNQ_STATE`` if set, else ``<workspace>/.attnq``: build cache, campaign store, locks."""
        return self.state.resolve() if self.state else self.workspace.resolve() / ".attnq"

    def resolve_in_workspace(self, path: str | Path) -> Path:
        """Resolve ``path`` (relative to the workspace) and refuse anything outside it.

        Raises:
            WorkspaceError: when the resolved path escapes the workspace.
        """
        from harness.errors import WorkspaceError

        root = self.workspace.resolve()
        p = Path(path)
        full = (p if p.is_absolute() else root / p).resolve()
        if full != root and root not in full.parents:
            raise WorkspaceError(f"{path} is outside the workspace {root} (the folder attnq started in, or "
                                 "ATTNQ_WORKSPACE / --workspace): move the file into it, or start attnq there")
        return full


def env_note(error: dict) -> str:
    """`` (from ATTNQ_X='value')`` when one pydantic error of :class:`Settings` (``ValidationError.errors()``
    item) is about a value that came from an ``ATTNQ_*`` variable, else ``""``: the user set a variable, and
    the message should name it, not the field. A value given by a flag (a number, not the variable's text)
    gets no note."""
    loc = error.get("loc") or ()
    if len(loc) != 1 or not isinstance(loc[0], str):
        return ""
    name = f"ATTNQ_{loc[0].upper()}"
    raw = os.environ.get(name)
    if raw is None or not isinstance(error.get("input"), str) or error["input"] != raw:
        return ""
    return f" (from {name}={raw[:80]!r})"


def settings_error_text(err: Exception) -> str:
    """A pydantic_settings ``SettingsError`` (an ``ATTNQ_*`` variable that is not even parseable, e.g. a
    list-valued one that is not JSON) as one line naming the variable and the expected form."""
    match = re.search(r'field "([a-z_]+)"', str(err))
    if not match:
        return str(err)
    name = f"ATTNQ_{match.group(1).upper()}"
    raw = os.environ.get(name, "")
    example = ' (e.g. ATTNQ_BANK_PATHS=\'["team.toml", "mine.toml"]\')' if match.group(1) == "bank_paths" else ""
    return f"{name}={raw[:80]!r} is not valid: this variable takes a JSON value{example}"
