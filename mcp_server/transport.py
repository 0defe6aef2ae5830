"""Run the server over stdio (default) or streamable HTTP with a bearer token.

stdio: stdout carries nothing but the protocol. The SDK's ``stdio_server`` claims fd 1 for the
wire and points fd 1 itself at stderr while it runs, so a stray ``print`` (ours, a library's, or
nvcc's inherited stdout) lands on stderr instead of corrupting the JSON-RPC stream; in addition,
``sys.stdout`` is bound to stderr for the whole run. Logs: structlog JSON on stderr, or on
``ATTNQ_LOG_FILE`` (harness.logging); the SDK's stdlib logging is forwarded to the same place.

HTTP: ``MCPServer.streamable_http_app`` wrapped in :class:`mcp_server.auth.BearerTokenMiddleware`,
served by uvicorn on 127.0.0.1 unless another host is given.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
import sys
from collections.abc import Iterator
from typing import Any

import anyio

from harness.config import Settings
from harness.errors import InputError
from harness.logging import configure_logging, get_logger
from mcp_server.jobs import Limits

log = get_logger("attnq.mcp.transport")


class _ToStructlog(logging.Handler):
    """Forward stdlib log records (the SDK, uvicorn) to structlog JSON."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            event: dict[str, Any] = {"logger": record.name}
            if record.exc_info:
                event["exception"] = logging.Formatter().formatException(record.exc_info)
            get_logger(record.name).log(record.levelno, record.getMessage(), **event)
        except Exception:  # noqa: BLE001 - logging must never break the server
            self.handleError(record)


def configure_server_logging(level: str | None = None) -> None:
    """structlog JSON (stderr or ATTNQ_LOG_FILE), with stdlib logging routed into it.

    Installed before the SDK's own ``logging.basicConfig`` so that one becomes a no-op (no Rich
    console output).
    """
    configure_logging(level)
    root = logging.getLogger()
    if not any(isinstance(h, _ToStructlog) for h in root.handlers):
        root.handlers = [_ToStructlog()]
    root.setLevel(getattr(logging, (level or "WARNING").upper(), logging.WARNING))


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Bind ``sys.stdout`` to ``sys.stderr`` while the protocol owns the real stdout."""
    saved = sys.stdout
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = saved


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def run_stdio(settings: Settings, *, limits: Limits | None = None) -> None:
    """Serve over stdio until the client closes stdin."""
    from mcp_server.server import build_server

    server = build_server(settings, limits=limits)
    state = server.attnq_state  # type: ignore[attr-defined]
    log.info("serve_stdio", workspace=str(state.workspace))
    try:
        # the SDK's stdio_server claims fd 1 (wire on a private dup, fd 1 -> stderr); this also
        # rebinds the Python-level sys.stdout for code that captured it before the claim
        from mcp.server.stdio import stdio_server

        async def main() -> None:
            async with stdio_server() as (read_stream, write_stream):
                with stdout_to_stderr():
                    low = server._lowlevel_server  # noqa: SLF001 - the public run_stdio_async does the same
                    await low.run(read_stream, write_stream, low.create_initialization_options())

        anyio.run(main)
    finally:
        state.close()


def build_http_app(settings: Settings, token: str, *, host: str = "127.0.0.1",
                   limits: Limits | None = None) -> Any:
    """The ASGI app: streamable HTTP at ``/mcp`` behind the bearer-token check."""
    from mcp_server.auth import BearerTokenMiddleware
    from mcp_server.server import build_server

    server = build_server(settings, limits=limits)
    app = server.streamable_http_app(host=host)
    wrapped = BearerTokenMiddleware(app, token)
    wrapped.attnq_state = server.attnq_state  # type: ignore[attr-defined]
    return wrapped


def run_http(settings: Settings, token: str, *, host: str = "127.0.0.1", port: int = 8765,
             allow_remote: bool = False, limits: Limits | None = None, log_level: str = "warning") -> None:
    """Serve streamable HTTP at ``http://host:port/mcp``.

    The socket is bound before the ``attnq MCP server: URL`` line is printed, so the line means the
    server is listening; uvicorn then serves on that socket.

    Raises:
        InputError: a non-loopback host without ``allow_remote``; the address cannot be bound (port in
            use, no permission, unknown host).
    """
    import uvicorn

    if not is_loopback(host) and not allow_remote:
        raise InputError(f"--host {host} is not a loopback address: pass --allow-remote to serve other machines "
                         "(put TLS in front of it; the bearer token travels in every request)")
    sock = bind_socket(host, port)
    try:
        app = build_http_app(settings, token, host=host, limits=limits)
    except BaseException:
        sock.close()
        raise
    log.info("serve_http", host=host, port=port, workspace=str(settings.workspace))
    shown = f"[{host}]" if ":" in host else host  # an IPv6 literal in a URL is bracketed (RFC 3986)
    print(f"attnq MCP server: http://{shown}:{port}/mcp (bearer token required)", file=sys.stderr, flush=True)
    try:
        config = uvicorn.Config(app, host=host, port=port, log_level=log_level, log_config=None)
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
        app.attnq_state.close()


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (IPv6 when ``host`` is an IPv6 address), SO_REUSEADDR set.

    Raises:
        InputError: the address cannot be bound (``[Errno 98] Address already in use`` and the like).
    """
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
        family, _, _, _, addr = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
    except (OSError, IndexError) as exc:
        raise InputError(f"cannot serve on {host}:{port}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise InputError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock
