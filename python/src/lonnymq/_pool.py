"""The connection pools a queue creates for itself: psycopg_pool's, reconnecting promptly.

psycopg_pool replaces a lost connection in the background; while the server refuses, it
tries again after 1 s, 2 s, 4 s, 8 s, 16 s... So after a 20 s restart the next attempt is
often 10 s away, and every caller waiting for a connection waits for it (measured: the
first completion 8-10 s after the server was back). These pools try again after 50 ms,
doubling to at most ``RECONNECT_MAX_S``: a refused attempt costs one TCP round trip, so a
few a second per pool is cheap. Everything else (``reconnect_timeout``, growth, checks) is
psycopg_pool's own.

The hook is psycopg_pool's ``_add_connection(attempt, growing)``, a private method; if a
future psycopg_pool no longer has it, these are plain pools (reconnecting as slowly as
before, nothing else changes) and ``python/tests/test_reconnect.py`` says so.
"""

from __future__ import annotations

import select
from typing import Any

from psycopg import AsyncConnection, Connection
from psycopg_pool import AsyncConnectionPool, ConnectionPool

try:
    from psycopg_pool.base import AttemptWithBackoff
except ImportError:  # pragma: no cover (another psycopg_pool: its own policy applies)
    AttemptWithBackoff = None  # type: ignore[assignment,misc]

RECONNECT_FIRST_S = 0.05
RECONNECT_MAX_S = 1.0

HOOKED = AttemptWithBackoff is not None and hasattr(ConnectionPool, "_add_connection")


if HOOKED:

    class _PromptAttempt(AttemptWithBackoff):
        """psycopg_pool's back-off, starting at 50 ms and capped at ``RECONNECT_MAX_S``."""

        INITIAL_DELAY = RECONNECT_FIRST_S

        def update_delay(self, now: float) -> None:
            super().update_delay(now)
            self.delay = min(self.delay, RECONNECT_MAX_S)

    class PromptPool(ConnectionPool):
        def _add_connection(self, attempt: Any, growing: bool = False) -> None:
            attempt = attempt or _PromptAttempt(timeout=self.reconnect_timeout)
            super()._add_connection(attempt, growing)

    class PromptAsyncPool(AsyncConnectionPool):
        async def _add_connection(self, attempt: Any, growing: bool = False) -> None:
            attempt = attempt or _PromptAttempt(timeout=self.reconnect_timeout)
            await super()._add_connection(attempt, growing)

else:  # pragma: no cover
    PromptPool = ConnectionPool  # type: ignore[misc,assignment]
    PromptAsyncPool = AsyncConnectionPool  # type: ignore[misc,assignment]


# How often a sleeping worker looks at the connection that holds its waiting announcement.
WATCH_S = 0.25


def closed_by_server(conn: Connection[Any] | AsyncConnection[Any]) -> bool:
    """Whether an idle connection has been closed under us (backend terminated, server
    restarted), without a round trip: the server's farewell (a FATAL error, then EOF) makes
    the socket readable, and an idle session that does not LISTEN is sent nothing else.
    (If something else did arrive, the caller only looks for work a little early.)"""
    if conn.closed:
        return True
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
