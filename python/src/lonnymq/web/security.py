"""Safe defaults of the dashboard: only the hosts it was started for (a page of another
name that resolves to this address, DNS rebinding, gets 400), framing and caching headers,
basic auth on every request when configured, and a same-origin check on every action (a
POST must come from a page of this dashboard, so another site cannot make an operator's
browser pause or requeue anything)."""

from __future__ import annotations

import base64
import binascii
import secrets
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Names a dashboard answers to when none are given: the loopback ones, on any port.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")


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


def host_entry(host: str, port: int | None = None) -> str:
    """An allowed-host entry for a name or address: ``[::1]:8080``, ``db.example``."""
    host = host.strip().lower()
    if host.count(":") > 1 and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address, as a Host header writes it
    return host if port is None else f"{host}:{port}"


class HostGuard:
    """ASGI middleware: 400 unless the request's ``Host`` is one of ``allowed``, before any
    other middleware or handler runs. An entry with a port matches that port only; one
    without matches the name on any port. A ``Host`` without a port means the scheme's
    default one (80, or 443 over https), as browsers leave it out. The browser sends the
    name it was pointed at, so a page of another name (one that resolves to this address)
    is refused even when its ``Origin`` matches its ``Host``. Every answer also forbids
    framing, and every answer but the static files forbids caching (pages show message
    content and refresh anyway)."""

    def __init__(self, app: ASGIApp, allowed: list[str]) -> None:
        self.app = app
        self._exact = {host_entry(h) for h in allowed if not _bare(h)}
        self._any_port = {host_entry(h) for h in allowed if _bare(h)}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        if not self.allows(Headers(scope=scope).get("host", ""), scope.get("scheme", "http")):
            response = PlainTextResponse("unknown host", status_code=400)
            await response(scope, receive, _with_headers(send, scope))
            return
        await self.app(scope, receive, _with_headers(send, scope))

    def allows(self, host: str, scheme: str = "http") -> bool:
        host = host.strip().lower()
        if host in self._exact:
            return True
        if _bare(host):
            # Browsers leave the scheme's default port out of Host: http://name is name:80.
            port = 443 if scheme in ("https", "wss") else 80
            return host in self._any_port or f"{host}:{port}" in self._exact
        return host.rsplit(":", 1)[0] in self._any_port


def _bare(entry: str) -> bool:
    """Whether an allowed-host entry names no port (``name``, ``[::1]``, ``::1``)."""
    entry = entry.strip()
    if entry.startswith("["):
        return entry.endswith("]")
    return entry.count(":") != 1


def _with_headers(send: Send, scope: Scope) -> Send:
    """``send`` that adds the framing and caching headers to the response's start."""
    # Under a mount, path includes the mount's root_path.
    static = scope.get("path", "").startswith(scope.get("root_path", "") + "/static/")

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            headers += [
                (b"content-security-policy", b"frame-ancestors 'none'"),
                (b"x-frame-options", b"DENY"),
            ]
            if not static:
                headers = [(k, v) for k, v in headers if k.lower() != b"cache-control"]
                headers.append((b"cache-control", b"no-store"))
            message = {**message, "headers": headers}
        await send(message)

    return sending
