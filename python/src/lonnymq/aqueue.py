"""``AsyncQueue``: the client, one method per SQL API call.

The synchronous Queue (queue.py) is generated from the asyncio AsyncQueue (aqueue.py) by
python/tools/async_to_sync.py: the two have the same names and the same behaviour.

Methods borrow a connection from the pool for one statement (committed on return) unless
``conn=`` is given, in which case they run inside the caller's transaction and the caller
commits. The client never creates the extension: run ``lonnymq install`` once instead.
"""

from __future__ import annotations

import asyncio  # ASYNC
import functools
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from types import EllipsisType, TracebackType
from typing import Any, TypeVar, overload

from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus
from psycopg.rows import BaseRowFactory, class_row, kwargs_row, tuple_row
from psycopg_pool import AsyncConnectionPool

from . import _sql
from ._content import Content, encode, encode_optional
from ._pool import PromptAsyncPool
from .amessage import AsyncMessage
from .errors import LonnymqError
from .models import (
    ArchivedMessage,
    Channel,
    ChannelStats,
    CompleteResult,
    CreateResult,
    QueueStats,
    RequeueResult,
)

T = TypeVar("T")

if True:  # ASYNC  # noqa: SIM108 (async_to_sync.py keeps the else branch in queue.py)
    # An async pool can only open inside a running event loop: one this queue creates
    # opens on first use (_ensure_open).
    _OPEN_AT_ONCE = False
else:
    # A synchronous pool opens at once, so ``pool.connection()`` works before any call.
    _OPEN_AT_ONCE = True


class AsyncQueue:
    """A named queue. ``conninfo_or_pool`` is a libpq DSN (a private pool is created and
    closed by ``close()``) or a ``psycopg_pool.AsyncConnectionPool`` owned by the caller."""

    def __init__(
        self, conninfo_or_pool: str | AsyncConnectionPool, name: str, *, pool_size: int = 10
    ) -> None:
        if not name:
            raise ValueError("queue name must not be empty")
        self.name = name
        self.pool: AsyncConnectionPool
        if isinstance(conninfo_or_pool, str):
            # Reconnects within a second of the server's return (see _pool).
            self.pool = PromptAsyncPool(
                conninfo_or_pool,
                min_size=1,
                max_size=pool_size,
                open=_OPEN_AT_ONCE,
                name=f"lonnymq-{name}",
            )
            self._owns_pool = True
        else:
            self.pool = conninfo_or_pool
            self._owns_pool = False
        self._open_lock = asyncio.Lock()  # ASYNC
        self._needs_open = self._owns_pool  # ASYNC

    @property
    def conninfo(self) -> str:
        """The DSN, for the dedicated LISTEN connection a worker opens."""
        conninfo = self.pool.conninfo
        if not isinstance(conninfo, str):
            raise LonnymqError("a worker needs a pool created from a conninfo string")
        return conninfo

    async def close(self) -> None:
        """Close the pool if this queue created it."""
        if self._owns_pool:
            await self.pool.close()

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- plumbing ---------------------------------------------------------------------------

    if True:  # ASYNC

        async def _ensure_open(self) -> None:
            # The lock keeps concurrent first calls from using the pool before it is open.
            if self._needs_open:
                async with self._open_lock:
                    if self._needs_open:
                        await self.pool.open()
                        self._needs_open = False

    @asynccontextmanager
    async def _connection(
        self, conn: AsyncConnection[Any] | None
    ) -> AsyncIterator[AsyncConnection[Any]]:
        if conn is not None:
            yield conn
        else:
            await self._ensure_open()  # ASYNC
            async with self.pool.connection() as pooled:
                if pooled.autocommit:
                    yield pooled
                    return
                # Each call is one statement, which is its own transaction: with autocommit it
                # is one round trip instead of three (BEGIN, statement, COMMIT), and the
                # connection never sits idle in transaction between them. The pool's own
                # setting is put back for its other users.
                await pooled.set_autocommit(True)
                try:
                    yield pooled
                finally:
                    if pooled.pgconn.transaction_status == TransactionStatus.IDLE:
                        await pooled.set_autocommit(False)

    async def _rows(
        self,
        query: str,
        params: Sequence[Any],
        conn: AsyncConnection[Any] | None,
        row_factory: BaseRowFactory[T],
    ) -> list[T]:
        """The rows of one statement, each made by ``row_factory`` from its named columns."""
        async with self._connection(conn) as c, c.cursor(row_factory=row_factory) as cursor:
            await cursor.execute(query, params)
            return await cursor.fetchall()

    async def _scalar(
        self, query: str, params: Sequence[Any], conn: AsyncConnection[Any] | None
    ) -> Any:
        """The one value of a statement that returns one row of one column."""
        rows = await self._rows(query, params, conn, tuple_row)
        return rows[0][0]

    def _in_queue(self, cls: Callable[..., T]) -> BaseRowFactory[T]:
        """Rows of ``cls``, whose ``queue`` field is this queue's name."""
        return kwargs_row(functools.partial(cls, queue=self.name))

    # -- channels ---------------------------------------------------------------------------

    async def channel_set(
        self,
        channel: str,
        *,
        max_concurrency: int | None = None,
        release_interval_ms: int = 0,
        max_size: int | None = None,
        max_attempts: int | None = None,
        retain_completed: bool = False,
        conn: AsyncConnection[Any] | None = None,
    ) -> Channel:
        """Create or replace a channel's policy."""
        rows = await self._rows(
            _sql.CHANNEL_SET,
            (
                self.name,
                channel,
                max_concurrency,
                release_interval_ms,
                max_size,
                max_attempts,
                retain_completed,
            ),
            conn,
            self._in_queue(Channel),
        )
        return rows[0]

    async def channel_delete(
        self, channel: str, *, conn: AsyncConnection[Any] | None = None
    ) -> str:
        """``deleted``, ``not_found`` or ``not_empty``."""
        return str(await self._scalar(_sql.CHANNEL_DELETE, (self.name, channel), conn))

    async def channel_pause(self, channel: str, *, conn: AsyncConnection[Any] | None = None) -> str:
        """Stop serving a channel: ``paused`` or ``not_found``."""
        return str(await self._scalar(_sql.CHANNEL_PAUSE, (self.name, channel), conn))

    async def channel_resume(
        self, channel: str, *, conn: AsyncConnection[Any] | None = None
    ) -> str:
        """Serve a paused channel again: ``resumed`` or ``not_found``."""
        return str(await self._scalar(_sql.CHANNEL_RESUME, (self.name, channel), conn))

    async def queue_pause(self, *, conn: AsyncConnection[Any] | None = None) -> str:
        """Stop serving this queue: ``paused`` or ``not_found``."""
        return str(await self._scalar(_sql.QUEUE_PAUSE, (self.name,), conn))

    async def queue_resume(self, *, conn: AsyncConnection[Any] | None = None) -> str:
        """Serve this queue again: ``resumed`` or ``not_found``."""
        return str(await self._scalar(_sql.QUEUE_RESUME, (self.name,), conn))

    # -- producing --------------------------------------------------------------------------

    async def create(
        self,
        content: Content,
        *,
        channel: str | None = None,
        dequeue_at: datetime | None = None,
        delay_ms: int = 0,
        priority: int = 0,
        dedup_key: str | None = None,
        state: Content | None = None,
        conn: AsyncConnection[Any] | None = None,
    ) -> CreateResult:
        """Enqueue one message: ``created``, ``deduplicated`` or ``dropped``."""
        rows = await self._rows(
            _sql.MESSAGE_CREATE,
            (
                self.name,
                channel,
                encode(content),
                dequeue_at,
                delay_ms,
                priority,
                dedup_key,
                encode_optional(state),
            ),
            conn,
            class_row(CreateResult),
        )
        return rows[0]

    async def create_batch(
        self,
        contents: Sequence[Content],
        *,
        channel: str | None = None,
        channels: Sequence[str | None] | None = None,
        dequeue_ats: Sequence[datetime | None] | None = None,
        dedup_keys: Sequence[str | None] | None = None,
        idempotency_key: str | None = None,
        conn: AsyncConnection[Any] | None = None,
    ) -> list[CreateResult]:
        """Enqueue many messages in one call, one result per content in input order.

        ``channel`` applies to all; ``channels``/``dequeue_ats``/``dedup_keys`` are parallel
        to ``contents``. A reused ``idempotency_key`` creates nothing (``duplicate_batch``).
        """
        chans, ats, keys = _sql.batch_arrays(
            len(contents),
            channel,
            None if channels is None else list(channels),
            None if dequeue_ats is None else list(dequeue_ats),
            None if dedup_keys is None else list(dedup_keys),
        )
        return await self._rows(
            _sql.MESSAGE_CREATE_BATCH,
            (self.name, chans, [encode(c) for c in contents], ats, keys, idempotency_key),
            conn,
            class_row(CreateResult),
        )

    # -- consuming --------------------------------------------------------------------------

    async def dequeue(
        self, *, lock_ms: int, max_messages: int = 1, conn: AsyncConnection[Any] | None = None
    ) -> list[AsyncMessage]:
        """Lock up to ``max_messages`` ready messages for ``lock_ms``, fairly across channels."""
        return await self._rows(
            _sql.MESSAGE_DEQUEUE,
            (self.name, lock_ms, max_messages),
            conn,
            kwargs_row(functools.partial(AsyncMessage, queue=self.name, _queue=self)),
        )

    async def complete(
        self, id: int, num_attempts: int, *, conn: AsyncConnection[Any] | None = None
    ) -> str:
        return str(await self._scalar(_sql.MESSAGE_COMPLETE, (id, num_attempts), conn))

    async def complete_batch(
        self, messages: Sequence[AsyncMessage], *, conn: AsyncConnection[Any] | None = None
    ) -> list[CompleteResult]:
        """Complete many delivered messages in one call."""
        return await self._rows(
            _sql.MESSAGE_COMPLETE_BATCH,
            ([m.id for m in messages], [m.num_attempts for m in messages]),
            conn,
            class_row(CompleteResult),
        )

    async def defer(
        self,
        id: int,
        num_attempts: int,
        *,
        dequeue_at: datetime | None = None,
        delay_ms: int = 0,
        state: Content | None = None,
        conn: AsyncConnection[Any] | None = None,
    ) -> str:
        """Release the lock and reschedule; ``state=None`` keeps the saved state."""
        return str(
            await self._scalar(
                _sql.MESSAGE_DEFER,
                (id, num_attempts, dequeue_at, delay_ms, encode_optional(state)),
                conn,
            )
        )

    async def heartbeat(
        self, id: int, num_attempts: int, lock_ms: int, *, conn: AsyncConnection[Any] | None = None
    ) -> str:
        return str(await self._scalar(_sql.MESSAGE_HEARTBEAT, (id, num_attempts, lock_ms), conn))

    async def fail(
        self,
        id: int,
        num_attempts: int,
        error: str | None = None,
        *,
        conn: AsyncConnection[Any] | None = None,
    ) -> str:
        return str(await self._scalar(_sql.MESSAGE_FAIL, (id, num_attempts, error), conn))

    async def cancel(self, id: int, *, conn: AsyncConnection[Any] | None = None) -> str:
        """``cancelled`` (was pending), ``locked`` or ``not_found``."""
        return str(await self._scalar(_sql.MESSAGE_CANCEL, (id,), conn))

    # -- archive ----------------------------------------------------------------------------

    async def message_archive(
        self,
        *,
        outcome: str | None = None,
        limit: int = 100,
        conn: AsyncConnection[Any] | None = None,
    ) -> list[ArchivedMessage]:
        """The newest archived messages of this queue, optionally of one outcome."""
        return await self._rows(
            _sql.MESSAGE_ARCHIVE,
            (self.name, outcome, outcome, limit),
            conn,
            class_row(ArchivedMessage),
        )

    @overload
    async def archive_requeue(
        self, archive_id: int, *, conn: AsyncConnection[Any] | None = None
    ) -> CreateResult: ...

    @overload
    async def archive_requeue(
        self,
        *,
        outcome: str | None,
        channel: str | None = None,
        archived_after: datetime | None = None,
        archived_before: datetime | None = None,
        conn: AsyncConnection[Any] | None = None,
    ) -> RequeueResult: ...

    async def archive_requeue(
        self,
        archive_id: int | None = None,
        *,
        outcome: str | EllipsisType | None = ...,
        channel: str | None = None,
        archived_after: datetime | None = None,
        archived_before: datetime | None = None,
        conn: AsyncConnection[Any] | None = None,
    ) -> CreateResult | RequeueResult:
        """Re-create one archived message (``CreateResult``), or, given ``outcome`` (``None``:
        any) instead of an id, every archived message of this queue matching the filter,
        oldest first, in one transaction (``RequeueResult``). Like the SQL function,
        ``outcome`` has no default, so the one-argument call is always the single-id form."""
        if archive_id is not None:
            if outcome is not ...:
                raise TypeError("archive_requeue takes an archive id or a filter, not both")
            rows = await self._rows(
                _sql.ARCHIVE_REQUEUE, (archive_id,), conn, class_row(CreateResult)
            )
            return rows[0]
        if outcome is ...:
            raise TypeError("archive_requeue needs an archive id, or outcome= for a filter")
        matching = await self._rows(
            _sql.ARCHIVE_REQUEUE_MATCHING,
            (self.name, outcome, channel, archived_after, archived_before),
            conn,
            class_row(RequeueResult),
        )
        return matching[0]

    async def archive_prune(
        self,
        older_than: timedelta,
        *,
        all_queues: bool = True,
        channel: str | None = None,
        outcome: str | None = None,
        conn: AsyncConnection[Any] | None = None,
    ) -> int:
        """Delete archive rows older than ``older_than`` of every queue (``all_queues=False``:
        of this queue only), optionally of one channel or outcome; returns the count."""
        queue = None if all_queues else self.name
        return int(
            await self._scalar(_sql.ARCHIVE_PRUNE, (older_than, queue, channel, outcome), conn)
        )

    # -- inspection -------------------------------------------------------------------------

    async def wait_hint_ms(self, *, conn: AsyncConnection[Any] | None = None) -> int | None:
        """Milliseconds until a message could be dequeued (0 = now, None = queue empty)."""
        value = await self._scalar(_sql.WAIT_HINT_MS, (self.name,), conn)
        return None if value is None else int(value)

    @asynccontextmanager
    async def waiting(self) -> AsyncIterator[int | None]:
        """Announces a consumer about to sleep on this queue, for as long as the block runs,
        and yields how long to sleep at most (ms; None: until notified).

        Producers send the ``lonnymq`` NOTIFY only while a consumer waits, so a consumer that
        LISTENs sleeps inside this block. The announcement is a session-level lock on a pool
        connection held for the block (each statement commits at once: no transaction stays
        open); no wake-up is lost (see ``lonnymq.wait_begin``)."""
        async with self._waiting() as (hint, _conn):
            yield hint

    @asynccontextmanager
    async def _waiting(self) -> AsyncIterator[tuple[int | None, AsyncConnection[Any]]]:
        """``waiting()`` that also yields the connection holding the announcement: the
        announcement dies with it, so a worker watches it while it sleeps."""
        async with self._connection(None) as c:
            value = await self._scalar(_sql.WAIT_BEGIN, (self.name,), c)
            try:
                yield None if value is None else int(value), c
            finally:
                await self._scalar(_sql.WAIT_END, (self.name,), c)

    async def queue_stats(self, *, conn: AsyncConnection[Any] | None = None) -> QueueStats:
        rows = await self._rows(_sql.QUEUE_STATS, (self.name,), conn, class_row(QueueStats))
        # A queue with no messages and no archive has no row: zeros, not an error.
        return rows[0] if rows else QueueStats(self.name, 0, 0, 0, 0, 0)

    async def channel_stats(
        self, *, conn: AsyncConnection[Any] | None = None
    ) -> list[ChannelStats]:
        return await self._rows(_sql.CHANNEL_STATS, (self.name,), conn, class_row(ChannelStats))

    async def verify(self, *, conn: AsyncConnection[Any] | None = None) -> list[str]:
        """Broken invariants of the whole installation; empty when healthy."""
        return [str(r[0]) for r in await self._rows(_sql.VERIFY, (), conn, tuple_row)]

    # -- pg_cron schedules ------------------------------------------------------------------

    async def schedule_set(
        self,
        name: str,
        cron: str,
        content: Content,
        *,
        channel: str | None = None,
        conn: AsyncConnection[Any] | None = None,
    ) -> int:
        """Create a message on a cron schedule through pg_cron; returns the pg_cron job id."""
        return int(
            await self._scalar(
                _sql.SCHEDULE_SET, (name, cron, self.name, channel, encode(content)), conn
            )
        )

    async def schedule_delete(self, name: str, *, conn: AsyncConnection[Any] | None = None) -> str:
        """``deleted`` or ``not_found``."""
        return str(await self._scalar(_sql.SCHEDULE_DELETE, (name,), conn))
