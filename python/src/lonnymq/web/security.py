"""Safe defaults of the dashboard: basic auth on every request when configured, and a
same-origin check on every action (a POST must come from a page of this dashboard, so
another site cannot make an operator's browser pause or requeue anything)."""

from __future__ import annotations

import base64
import binascii
import secrets
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send


class BasicAuth:
    """ASGI middleware: 401 unless the request carries the configured credentials."""

    def __init__(self, app: ASGIApp, user: str, password: str) -> None:
        self.app = app
        self._user = user.encode()
        self._password = password.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._allowed(Request(scope)):
            response: Response = PlainTextResponse(
                "authentication required",
                status_code=401,
                headers={"WWW-Authenticate": 'Basic realm="lonnymq", charset="UTF-8"'},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _allowed(self, request: Request) -> bool:
        scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, sep, password = base64.b64decode(encoded, validate=True).partition(b":")
        except (binascii.Error, ValueError):
            return False
        # Both compared, always: the time taken says nothing about which one was wrong.
        user_ok = secrets.compare_digest(user, self._user)
        password_ok = secrets.compare_digest(password, self._password)
        return bool(sep) and user_ok and password_ok


def same_origin(request: Request) -> bool:
    """Whether a state-changing request comes from this dashboard's own origin: its Origin
    header (or, failing that, its Referer) names the scheme, host and port it was sent to.
    Behind a proxy, the proxy must pass Host through and uvicorn must trust its
    X-Forwarded-Proto (``--forwarded-allow-ips``)."""
    claimed = request.headers.get("origin") or request.headers.get("referer")
    if not claimed or claimed == "null":
        return False
    parts = urlsplit(claimed)
    host = request.headers.get("host")
    return bool(host) and parts.scheme == request.url.scheme and parts.netloc == host
