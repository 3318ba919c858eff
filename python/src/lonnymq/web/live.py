"""Live updates: one LISTEN connection per app, fanned out to the open pages as
server-sent events.

NOTIFY is only a hint (it misses delayed messages becoming due and expired locks), so the
pages also refresh on a timer; this only makes them react at once. Notifications are
coalesced: a page hears at most one event per ``min_interval_s``, however busy the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg

from .. import _sql
from .._announce import Announcements
from .db import Database

log = logging.getLogger("lonnymq.web")

CHANNELS = ("lonnymq", "lonnymq_dead")
RECONNECT_DELAY_S = 2.0
KEEPALIVE_S = 15.0
# How often the list of queues is read again, to announce queues created since.
LIST_EVERY_S = 5.0


class Broadcaster:
    """Listens while at least one page is subscribed; each subscriber gets the latest
    payload per queue since it last read."""

    def __init__(self, db: Database, min_interval_s: float = 1.0) -> None:
        self._db = db  # its connections are set up like the pool's (role, read-only)
        self._min_interval_s = min_interval_s
        self._subscribers: set[asyncio.Queue[str]] = set()
        self._task: asyncio.Task[None] | None = None

    @property
    def available(self) -> bool:
        return self._db.conninfo is not None

    @contextlib.asynccontextmanager
    async def subscribe(self) -> AsyncIterator[asyncio.Queue[str]]:
        inbox: asyncio.Queue[str] = asyncio.Queue(maxsize=100)
        self._subscribers.add(inbox)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._listen())
        try:
            yield inbox
        finally:
            self._subscribers.discard(inbox)
            if not self._subscribers and self._task is not None:
                self._task.cancel()
                self._task = None

    def publish(self, payload: str) -> None:
        for inbox in list(self._subscribers):
            if inbox.full():
                continue  # a slow page: it refreshes anyway
            inbox.put_nowait(payload)

    async def _listen(self) -> None:
        while self._subscribers:
            try:
                async with await self._db.connect() as conn, await self._db.connect() as waiter:
                    for channel in CHANNELS:
                        await conn.execute("LISTEN " + channel)
                    book, queues, listed = Announcements(), [], -LIST_EVERY_S
                    while True:
                        if time.monotonic() - listed >= LIST_EVERY_S:
                            queues, listed = await _queue_names(waiter), time.monotonic()
                        await _announce(waiter, book, queues)
                        # Until the next listing, or the next retry if sooner.
                        wait = LIST_EVERY_S - (time.monotonic() - listed)
                        due = book.next_due()
                        if due is not None:
                            wait = min(wait, due - time.monotonic())
                        async for notify in conn.notifies(timeout=max(wait, 0.0)):
                            self.publish(_event(notify.channel, notify.payload))
            except psycopg.Error as exc:
                log.warning("LISTEN connection lost (%s); pages fall back to timed refresh", exc)
                await asyncio.sleep(RECONNECT_DELAY_S)

    async def stream(self) -> AsyncIterator[str]:
        """The text/event-stream body of one page: coalesced events and keep-alives."""
        async with self.subscribe() as inbox:
            yield "retry: 5000\n\n"
            while True:
                try:
                    payload = await asyncio.wait_for(inbox.get(), KEEPALIVE_S)
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                # Coalesce: whatever arrives within the interval becomes one event.
                await asyncio.sleep(self._min_interval_s)
                while not inbox.empty():
                    payload = inbox.get_nowait()
                yield f"event: lonnymq\ndata: {payload}\n\n"


async def _queue_names(waiter: psycopg.AsyncConnection[Any]) -> list[str]:
    cur = await waiter.execute(_sql.QUEUE_NAMES)
    return [row[0] for row in await cur.fetchall()]


async def _announce(
    waiter: psycopg.AsyncConnection[Any], book: Announcements, queues: list[str]
) -> None:
    """Producers send 'lonnymq' events only while a consumer waits (lonnymq.wait_begin): while
    a page is live, the dashboard counts as one for every queue, so it hears every create.
    That is the cost of a live page: producers notify while it is open. New queues are
    announced before gone ones end, and one whose announcement may not have taken is
    announced again (see _announce); without the grants the page falls back to its timer."""
    plan = book.plan(queues, time.monotonic())
    if not plan:
        return
    try:
        hints: list[tuple[str, int | None]] = []
        if plan.begin:
            cur = await waiter.execute(_sql.ANNOUNCE, (plan.begin,))
            hints = await cur.fetchall()
        if plan.ended:
            await waiter.execute(_sql.WITHDRAW, (plan.ended,))
    except psycopg.errors.InsufficientPrivilege as exc:
        log.info(
            "live page cannot announce itself as waiting (%s): events only while workers wait", exc
        )
        return
    book.record(plan, hints, time.monotonic())


def _event(channel: str, payload: str) -> str:
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):  # any role may NOTIFY: nested too deep, too
        data = {"raw": payload}
    if not isinstance(data, dict):
        data = {"raw": payload}
    data["listen"] = channel
    return json.dumps(data, separators=(",", ":"))
