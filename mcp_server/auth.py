"""Bearer-token authentication for the streamable HTTP transport.

One shared token (``ATTNQ_HTTP_TOKEN`` or ``--token-file``) guards every HTTP request: a request
without ``Authorization: Bearer <token>``, or with another token, is answered ``401`` before it
reaches the MCP app. The comparison is constant-time (``hmac.compare_digest`` on bytes). The server
refuses to start HTTP without a token (:func:`load_token`).
"""

from __future__ import annotations

import hmac
import json
import os
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from harness.errors import InputError

TOKEN_ENV = "ATTNQ_HTTP_TOKEN"
MIN_TOKEN_CHARS = 16


def load_token(token_file: str | Path | None = None, env: dict[str, str] | None = None) -> str:
    """The bearer token: the first line of ``token_file`` if given, else ``$ATTNQ_HTTP_TOKEN``.

    Raises:
        InputError: no token, an unreadable file, or a token shorter than 16 characters.
    """
    env = os.environ if env is None else env
    if token_file:
        try:
            lines = Path(token_file).expanduser().read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise InputError(f"cannot read the token file {token_file}: {exc.strerror}") from None
        token = lines[0].strip() if lines else ""
        source = f"token file {token_file}"
    else:
        token = env.get(TOKEN_ENV, "").strip()
        source = TOKEN_ENV
    if not token and token_file:
        raise InputError(f"the token file {token_file} is empty (its first line is the token, e.g. from "
                         "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`)")
    if not token:
        raise InputError(f"HTTP needs a bearer token: set {TOKEN_ENV} or pass --token-file "
                         "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)")
    if len(token) < MIN_TOKEN_CHARS:
        raise InputError(f"the token from {source} is shorter than {MIN_TOKEN_CHARS} characters")
    return token


class BearerTokenMiddleware:
    """ASGI middleware: 401 unless ``Authorization: Bearer <token>`` matches (constant-time).

    Applies to HTTP requests only (lifespan events pass through). The 401 carries
    ``WWW-Authenticate: Bearer`` and a small JSON body; the token is never echoed or logged.
    """

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = token.encode("utf-8")

    def _authorized(self, scope: Scope) -> bool:
        header = b""
        for name, value in scope.get("headers", []):
            if name.lower() == b"authorization":
                header = value
                break
        scheme, _, given = header.partition(b" ")
        # compare_digest on equal-type bytes; the scheme check leaks nothing about the token
        ok = hmac.compare_digest(given.strip(), self._expected)
        return ok and scheme.lower() == b"bearer"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._authorized(scope):
            await self.app(scope, receive, send)
            return
        body = json.dumps({"error": "unauthorized",
                           "message": "missing or wrong bearer token (Authorization: Bearer <token>)"}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", b'Bearer realm="attnq"')]})
        await send({"type": "http.response.body", "body": body})
