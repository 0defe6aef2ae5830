"""The one place where harness errors become MCP tool errors, and where tool calls become events.

Every tool body is wrapped by :func:`tool_edge`: an :class:`harness.errors.AttnqError` becomes a
``ToolError`` whose text is the error's plain message (plus compiler diagnostics, one per line) —
never a traceback; any other exception (a bug of ours) becomes ``[internal_error] <tool> failed:
<Type>: <message>`` and its traceback goes to the server log. Each call (name, arguments, outcome, duration) is handed
to an event sink, which records it in the campaign store once one exists.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from pydantic import ValidationError

from harness.errors import AttnqError, internal_error_text
from harness.logging import get_logger
from harness.suite_file import suggest
from questions.text import printable

log = get_logger("attnq.mcp")

P = ParamSpec("P")
R = TypeVar("R")

#: ``(tool, arguments, outcome, details)``; outcome is "ok" or an error code. Must not raise.
EventSink = Callable[[str, dict[str, Any], str, dict[str, Any]], None]

MAX_DIAGNOSTICS = 20


def format_error(err: AttnqError | dict[str, Any]) -> str:
    """Plain text for the model: ``[code] message`` then up to 20 diagnostics as file:line:col: text.

    Takes the error or its ``to_dict()`` form (what a verification job keeps).
    """
    data = err.to_dict() if isinstance(err, AttnqError) else err
    # printable(): a message may quote the caller's input (a path, a name) with control characters in it
    lines = [f"[{data.get('error', 'error')}] {printable(str(data.get('message', '')))}"]
    diags = data.get("diagnostics") or []
    for diag in diags[:MAX_DIAGNOSTICS]:
        if isinstance(diag, dict):
            loc = ":".join(str(diag.get(k)) for k in ("file", "line", "column") if diag.get(k) is not None)
            lines.append(f"  {loc}: {diag.get('severity', 'error')}: {diag.get('message', '')}")
        else:
            lines.append(f"  {diag}")
    if len(diags) > MAX_DIAGNOSTICS:
        lines.append(f"  ... {len(diags) - MAX_DIAGNOSTICS} more")
    violations = data.get("violations") or []
    for v in violations[1:MAX_DIAGNOSTICS] if isinstance(violations, list) else []:  # the first is the message
        if isinstance(v, dict):
            where = f"{v.get('file')}:{v.get('line')}: " if v.get("file") else ""
            lines.append(f"  {where}{v.get('kind')} `{v.get('name')}`: {v.get('reason')}")
    if data.get("missing"):
        lines.append(f"  missing exports: {', '.join(map(str, data['missing']))}")
    return "\n".join(lines)


def format_validation_error(exc: ValidationError, *, limit: int = 5) -> str:
    """One plain line per pydantic error: ``field: message`` (no input echo, no errors.pydantic.dev URL).

    At most ``limit`` errors are listed, then ``... N more``; used by the CLI and the MCP edge.
    """
    parts = []
    errors = exc.errors(include_url=False)
    for err in errors[:limit]:
        loc = ".".join(str(x) for x in err.get("loc", ())) or "value"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    if len(errors) > limit:
        parts.append(f"... {len(errors) - limit} more")
    return "; ".join(parts)


def plain_argument_errors(server: Any) -> None:
    """Make a tool call with invalid arguments answer ``[invalid_arguments] <tool>: field: message; ...``, and one
    with an argument the tool does not take answer ``[invalid_arguments] <tool>: unknown argument 'suit' (did you
    mean 'suite'?); <tool> takes ...`` (the SDK ignores it, so a misspelt option silently took its default).

    The SDK validates arguments against the tool's signature before our :func:`tool_edge` runs and
    answers with the raw pydantic dump; this wraps ``server.call_tool`` (which the SDK's request
    handler calls) and replaces that ToolError with a plain one. Other errors pass unchanged.
    """
    inner = server.call_tool
    known: dict[str, list[str]] = {}  # tool -> its argument names (the input schema's properties), on first use

    async def call_tool(name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        if not known:
            known.update({t.name: list((t.input_schema or {}).get("properties", {})) for t in await server.list_tools()})
        extra = sorted(set(arguments or {}) - set(known.get(name, arguments or {})))
        if extra:  # the SDK drops them silently: `suit="full"` ran the default suite
            hint = suggest(extra[0], known[name])
            raise ToolError(f"[invalid_arguments] {name}: unknown argument {extra[0]!r}{hint}"
                            + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else "")
                            + f"; {name} takes {', '.join(known[name]) or 'no arguments'}")
        try:
            return await inner(name, arguments, context)
        except ToolError as err:
            cause = err.__cause__
            if isinstance(err, UnexpectedToolError) or not isinstance(cause, ValidationError):
                raise
            raise ToolError(f"[invalid_arguments] {name}: {format_validation_error(cause)}") from None

    server.call_tool = call_tool


def plain_prompt_errors(server: Any) -> None:
    """Make ``prompts/get`` with an unknown name or bad arguments answer INVALID_PARAMS with a plain message
    (``unknown prompt 'x'; prompts: start_campaign``) instead of the SDK's ``Internal server error``.

    The SDK raises ValueError for both, which its dispatcher maps to INTERNAL_ERROR; this wraps
    ``server.get_prompt`` (looked up per request by the SDK's handler) like :func:`plain_argument_errors`.
    """
    from mcp.shared.exceptions import MCPError
    from mcp_types import INVALID_PARAMS

    inner = server.get_prompt

    async def get_prompt(name: str, arguments: dict[str, Any] | None = None, context: Any = None) -> Any:
        names = [p.name for p in await server.list_prompts()]
        if name not in names:
            shown = name if len(name) <= 80 else name[:80] + "..."
            raise MCPError(INVALID_PARAMS, f"unknown prompt {shown!r}; prompts: {', '.join(names) or 'none'}")
        try:
            return await inner(name, arguments, context)
        except MCPError:
            raise
        except ValueError as exc:
            raise MCPError(INVALID_PARAMS, f"prompt {name}: {exc}") from None

    server.get_prompt = get_prompt


def _summarize(args: dict[str, Any]) -> dict[str, Any]:
    """Arguments as recorded in an event: strings cut to 500 characters, no Context objects."""
    out: dict[str, Any] = {}
    for key, value in args.items():
        if key in ("ctx", "context"):
            continue
        if isinstance(value, str) and len(value) > 500:
            value = value[:500] + "..."
        out[key] = value if isinstance(value, (str, int, float, bool, type(None), list, dict)) else str(value)
    return out


def tool_edge(name: str, sink: Callable[[], EventSink | None]) -> Callable[[Callable[P, Awaitable[R]]],
                                                                         Callable[P, Awaitable[R]]]:
    """Decorate an async tool: AttnqError -> ToolError(plain text); record one event per call.

    ``sink`` is looked up per call (the store may appear after the server starts). The wrapped
    function keeps its signature (``functools.wraps``), so the SDK builds the same input schema.
    """

    def decorate(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            started = time.monotonic()
            outcome, details = "ok", {}
            try:
                return await fn(*args, **kwargs)
            except AttnqError as err:
                outcome, details = err.code, {"message": err.message}
                raise ToolError(format_error(err)) from None
            except ToolError as err:
                outcome, details = "tool_error", {"message": str(err)}
                raise
            except Exception as exc:  # a bug of ours: the client gets a code and a message, the log the traceback
                outcome = "internal_error"
                details = {"message": f"{type(exc).__name__}: {exc}"[:500]}
                log.exception("tool_crashed", tool=name)
                raise ToolError(internal_error_text(name, exc)) from None
            except BaseException as exc:  # cancellation, interpreter exit: not ours to answer
                outcome = "cancelled" if "Cancel" in type(exc).__name__ else "internal_error"
                raise
            finally:
                details["duration_s"] = round(time.monotonic() - started, 3)
                record = sink()
                if record is not None:
                    try:
                        record(name, _summarize(dict(kwargs)), outcome, details)
                    except Exception:  # noqa: BLE001 - an event must never break a tool call
                        log.exception("event_record_failed", tool=name)

        # the SDK sends __doc__ as the tool description: drop the docstring indentation
        wrapper.__doc__ = inspect.cleandoc(fn.__doc__ or "")
        return wrapper

    return decorate


def progress_sink(ctx: Context | None) -> Callable[[float, float | None, str], Awaitable[None]] | None:
    """The tool call's MCP progress notifications as an async ``send(progress, total, message)`` (None
    without a context). A notification that cannot be sent is logged at debug and never fails the call."""
    if ctx is None:
        return None

    async def send(progress: float, total: float | None, message: str) -> None:
        try:
            await ctx.report_progress(progress, total, message)
        except Exception as exc:  # noqa: BLE001 - a lost notification must not fail the call
            log.debug("progress_not_sent", error=str(exc))

    return send
