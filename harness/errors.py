"""One exception hierarchy for attnq.

Every error a caller can act on derives from :class:`AttnqError`. The CLI prints ``str(err)`` (never
a traceback) and exits with ``err.exit_code``; the MCP edge maps it to ``ToolError`` with the same
message. ``details`` carries structured data (e.g. compiler diagnostics) for JSON output.
"""

from __future__ import annotations

from typing import Any


class AttnqError(Exception):
    """Base class. ``code`` is a stable machine-readable name, ``details`` JSON-serializable extras."""

    code: str = "error"
    exit_code: int = 2

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details or {}

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``{"error": code, "message": str, **details}``."""
        return {"error": self.code, "message": self.message, **self.details}


class InputError(AttnqError):
    """Bad input from the caller: missing file, wrong suffix, empty or oversized file, bad option."""

    code = "input_error"


class AnchorUnavailableError(InputError):
    """A requested timing anchor cannot be timed here (fa3 without FlashAttention-3's flash_attn_interface)."""

    code = "anchor_unavailable"


class WorkspaceError(InputError):
    """A path that resolves outside the workspace (refused at the edge)."""

    code = "outside_workspace"


class ToolchainError(AttnqError):
    """nvcc (or another required tool) is missing or unusable on this machine."""

    code = "toolchain_missing"


class CompileError(AttnqError):
    """nvcc rejected the source. ``details["diagnostics"]``: list of {file, line, column, severity, message}."""

    code = "compile_error"


class PolicyError(AttnqError):
    """The source or the built library breaks the source policy (forbidden header, library or symbol)."""

    code = "policy_violation"


class AbiError(AttnqError):
    """The candidate's ABI version or exported entry points do not match what the harness expects."""

    code = "abi_mismatch"


class NoGpuError(AttnqError):
    """Verification needs an NVIDIA GPU that runs the build's arch; none is available here."""

    code = "no_gpu"
    exit_code = 3


class VerifyError(AttnqError):
    """Verification could not run (worker failed to start, lock timeout, bad suite file)."""

    code = "verify_error"


class StoreError(AttnqError):
    """The campaign store could not be read or written."""

    code = "store_error"


class QuestionBankError(AttnqError):
    """A question bank file is malformed or a question is invalid."""

    code = "bank_error"


def internal_error_text(what: str, exc: BaseException) -> str:
    """``[internal_error] <what> failed: <Type>: <message>; ...`` for an exception that is a bug of attnq's.

    The one wording of a crash on both edges (MCP tool errors, verification jobs); never empty and never a
    traceback (that goes to the log, see harness.logging).
    """
    text = " ".join(str(exc).split())[:300] or "(no message)"
    return (f"[internal_error] {what} failed: {type(exc).__name__}: {text}; this is a bug in attnq, not in your "
            "input: the server log has the traceback")
