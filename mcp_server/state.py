"""Per-process server state: settings, verification jobs, the campaign store, the question bank.

The store (``<workspace>/.attnq/campaign.sqlite``, harness.store) is opened on first use and kept
open; its handle is thread-safe, so verification worker threads record attempts through it too.
Harness and question modules written by other parts are imported lazily (:func:`need`) so the
server starts, and says plainly what is missing, even in a partial install.
"""

from __future__ import annotations

import importlib
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

from harness import ORIGINAL_KERNEL
from harness.config import Settings
from harness.errors import InputError
from harness.logging import get_logger
from mcp_server.jobs import JobManager, Limits

log = get_logger("attnq.mcp.state")


def need(module: str) -> ModuleType:
    """Import ``module`` (e.g. ``harness.compile``); a missing one becomes ``ToolError("[unavailable] ...")`` (the
    ``[code] message`` form of every model-facing error, mcp_server/edge.py); an import error inside it is raised."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module or (exc.name and module.startswith(exc.name + ".")):
            raise ToolError(f"[unavailable] this attnq install has no {module} module; the tool is unavailable") from None
        raise


def have(module: str) -> bool:
    """True when ``module`` imports (used to list what is unavailable, never to hide errors)."""
    try:
        importlib.import_module(module)
        return True
    except ModuleNotFoundError:
        return False


def _short(path: str, limit: int = 200) -> str:
    """``path`` for an error message: at most ``limit`` characters (a 5000-character name stays readable)."""
    return path if len(path) <= limit else f"{path[:limit // 2]}...{path[-limit // 2:]} ({len(path)} characters)"


class ServerState:
    """What every tool shares. One per MCP server instance (and so per server process)."""

    def __init__(self, settings: Settings, limits: Limits | None = None) -> None:
        self.settings = settings
        self.workspace = settings.workspace.resolve()
        self.jobs = JobManager(limits)
        #: in-flight builds, (path, sha256) -> {"done": Event, "value" | "error"} (see server._compile_bounded)
        self.compiles: dict[tuple[str, str], dict[str, Any]] = {}
        self.compiles_lock = threading.Lock()
        self._store: Any = None
        self._store_lock = threading.Lock()

    # -- paths --------------------------------------------------------------------------------
    def resolve_file(self, path: str, *, suffix: str | None = ".cu") -> Path:
        """Resolve a client path inside the workspace and require an existing file.

        Raises:
            WorkspaceError: the path resolves outside the workspace (Settings.resolve_in_workspace).
            InputError: empty path, missing file, a directory, or the wrong suffix.

        The one path accepted outside the workspace is harness.ORIGINAL_KERNEL itself (read-only use:
        compile or verify the baseline).
        """
        if not path or not path.strip():
            raise InputError("path is empty: give a .cu file inside the workspace")
        if "\0" in path:
            raise InputError("path contains a NUL character")
        try:
            given = Path(path.strip()).expanduser()
            if (given if given.is_absolute() else self.workspace / given).resolve() == ORIGINAL_KERNEL.resolve():
                return ORIGINAL_KERNEL.resolve()  # the original kernel is readable wherever it lives
            full = self.settings.resolve_in_workspace(path.strip())
            exists, is_file = full.exists(), full.is_file()
        except (OSError, RuntimeError, ValueError) as exc:  # name too long, symlink loop, bad characters
            reason = getattr(exc, "strerror", None) or str(exc)
            raise InputError(f"{_short(path)}: unusable path ({reason})") from None
        if not exists:
            raise InputError(f"{_short(path)}: no such file in the workspace {self.workspace}")
        if not is_file:
            raise InputError(f"{_short(path)} is not a file")
        if suffix and full.suffix != suffix:
            raise InputError(f"{_short(path)} is not a {suffix} file")
        return full

    def rel(self, path: str | Path) -> str:
        """``path`` relative to the workspace when inside it, else absolute."""
        p = Path(path).resolve()
        try:
            return str(p.relative_to(self.workspace))
        except ValueError:
            return str(p)

    # -- campaign store -----------------------------------------------------------------------
    def store(self) -> Any:
        """The workspace's CampaignStore (opened once). Raises ToolError when harness.store is absent."""
        with self._store_lock:
            if self._store is None:
                mod = need("harness.store")
                self._store = mod.CampaignStore.open(self.settings)
            return self._store

    def store_if_available(self) -> Any | None:
        """The store, or None when the module is absent or the file cannot be opened (logged)."""
        try:
            return self.store()
        except ToolError:
            return None
        except Exception as exc:  # noqa: BLE001 - StoreError or sqlite trouble: events are best effort
            log.warning("store_unavailable", error=str(exc))
            return None

    def bank(self) -> Any:
        """The question bank: built-in, promoted, workspace-imported and Settings.bank_paths.

        Reloaded on every call so that added or promoted questions show at once.
        """
        mod = need("questions.bank")
        return mod.load_bank(settings=self.settings, store=self.store())

    def record_event(self, tool: str, args: dict[str, Any], outcome: str, details: dict[str, Any]) -> None:
        """Event sink for :func:`mcp_server.edge.tool_edge`: one row per tool call (best effort)."""
        store = self.store_if_available()
        if store is None:
            return
        store.record_event(tool, args=args, result={"outcome": outcome, **{k: v for k, v in details.items()
                                                                             if k != "duration_s"}},
                           ok=outcome == "ok", duration_s=details.get("duration_s"))

    def close(self) -> None:
        """Close the store handle and ask running jobs to stop."""
        for job in self.jobs.jobs():
            if not job.finished:
                job.cancel.set()
        with self._store_lock:
            if self._store is not None:
                self._store.close()
                self._store = None
