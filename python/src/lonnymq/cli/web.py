"""``lonnymq web``: serve the operations dashboard and /metrics (extra ``lonnymq[web]``)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

AUTH_USER_ENV = "LONNYMQ_WEB_USER"
AUTH_PASSWORD_ENV = "LONNYMQ_WEB_PASSWORD"


def register(commands: Any) -> None:
    p = commands.add_parser(
        "web",
        help="serve the operations dashboard and /metrics",
        description=(
            "Serve the dashboard. Read-only and bound to 127.0.0.1 unless told otherwise; "
            f"basic auth when {AUTH_USER_ENV} and {AUTH_PASSWORD_ENV} are set."
        ),
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME[:PORT]",
        help="also answer to this Host (repeatable; without a port: any port). By default "
        "only the bound address and localhost, with the port: any other Host gets 400",
    )
    p.add_argument(
        "--actions",
        action="store_true",
        help="enable pause, resume, policy edits, cancel, requeue and prune",
    )
    p.add_argument(
        "--role", help="SET ROLE to this role on every connection (e.g. the monitoring role)"
    )
    p.add_argument("--refresh", type=float, default=5.0, help="seconds between page refreshes")
    p.add_argument(
        "--metrics-channels",
        action="store_true",
        help="per-channel series on /metrics (one per tenant: mind the cardinality)",
    )
    p.add_argument(
        "--forwarded-allow-ips",
        default=None,
        help="proxies whose X-Forwarded-* headers to trust (see docs/operations.md)",
    )
    p.set_defaults(run=run)


def run(dsn: str, args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..web import create_app
    except ImportError as exc:
        print(
            f"lonnymq web needs the web extra: pip install 'lonnymq[web]' ({exc})",
            file=sys.stderr,
        )
        return 2
    user, password = os.environ.get(AUTH_USER_ENV), os.environ.get(AUTH_PASSWORD_ENV)
    if bool(user) != bool(password):
        print(f"set both {AUTH_USER_ENV} and {AUTH_PASSWORD_ENV}, or neither", file=sys.stderr)
        return 2
    if args.host not in ("127.0.0.1", "localhost", "::1") and not user:
        print(
            f"lonnymq web: listening on {args.host} without basic auth; "
            f"set {AUTH_USER_ENV} and {AUTH_PASSWORD_ENV} unless a proxy authenticates",
            file=sys.stderr,
        )
    app = create_app(
        dsn,
        allowed_hosts=allowed_hosts(args.host, args.port, args.allowed_host),
        actions=args.actions,
        auth=(user, password) if user and password else None,
        role=args.role,
        refresh_s=args.refresh,
        metrics_channels=args.metrics_channels,
    )
    options: dict[str, Any] = {"host": args.host, "port": args.port, "log_level": "info"}
    if args.forwarded_allow_ips:
        options.update(proxy_headers=True, forwarded_allow_ips=args.forwarded_allow_ips)
    uvicorn.run(app, **options)
    return 0


def allowed_hosts(host: str, port: int, extra: list[str]) -> list[str]:
    """The Host names the dashboard answers to: the bound address and the loopback names
    with the port (what a browser sends for http://localhost:8080), and the ones asked for.
    A loopback name cannot be rebound: a rebinding page's Host is its own name."""
    from ..web.security import LOOPBACK_HOSTS, host_entry

    return [host_entry(h, port) for h in (host, *LOOPBACK_HOSTS)] + extra
