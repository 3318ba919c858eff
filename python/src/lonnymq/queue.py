# WARNING: generated from aqueue.py by python/tools/async_to_sync.py: do not edit.
# Change aqueue.py and run the script; a test fails while this file is stale.

"""``Queue``: the client, one method per SQL API call.

The synchronous Queue (queue.py) is generated from the asyncio AsyncQueue (aqueue.py) by
python/tools/async_to_sync.py: the two have the same names and the same behaviour.

Methods borrow a connection from the pool for one statement (committed on return) unless
``conn=`` is given, in which case they run inside the caller's transaction and the caller
commits. The client never creates the extension: run ``lonnymq install`` once instead.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

from psycopg import Connection
from psycopg_pool import ConnectionPool

from . import _sql
from ._content import Content, encode, encode_optional
from .errors import LonnymqError
from .message import Message
from .models import (
    ArchivedMessage,
    Channel,
    ChannelStats,
    CompleteResult,
    CreateResult,
    QueueStats,
)

# A synchronous pool opens at once, so ``pool.connection()`` works before any call.
_OPEN_AT_ONCE = True


class Queue:
    """A named queue. ``conninfo_or_pool`` is a libpq DSN (a private pool is created and
    closed by ``close()``) or a ``psycopg_pool.ConnectionPool`` owned by the caller."""

    def __init__(
        self, conninfo_or_pool: str | ConnectionPool, name: str, *, pool_size: int = 10
    ) -> None:
        if not name:
            raise ValueError("queue name must not be empty")
        self.name = name
        if isinstance(conninfo_or_pool, str):
            self.pool = ConnectionPool(
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

    @property
    def conninfo(self) -> str:
        """The DSN, for the dedicated LISTEN connection a worker opens."""
        conninfo = self.pool.conninfo
        if not isinstance(conninfo, str):
            raise LonnymqError("a worker needs a pool created from a conninfo string")
        return conninfo

    def close(self) -> None:
        """Close the pool if this queue created it."""
        if self._owns_pool:
            self.pool.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------------

    @contextmanager
    def _connection(self, conn: Connection[Any] | None) -> Iterator[Connection[Any]]:
        if conn is not None:
            yield conn
        else:
            with self.pool.connection() as pooled:
                yield pooled

    def _rows(self, query: str, params: Sequence[Any], conn: Connection[Any] | None) -> list[Any]:
        with self._connection(conn) as c:
            cursor = c.execute(query, params)
            return cursor.fetchall()

    def _scalar(self, query: str, params: Sequence[Any], conn: Connection[Any] | None) -> Any:
        rows = self._rows(query, params, conn)
        return rows[0][0]

    # -- channels ---------------------------------------------------------------------------

    def set_channel(
        self,
        channel: str,
        *,
        max_concurrency: int | None = None,
        release_interval_ms: int = 0,
        max_size: int | None = None,
        max_attempts: int | None = None,
        retain_completed: bool = False,
        conn: Connection[Any] | None = None,
    ) -> Channel:
        """Create or replace a channel's policy (``channel_set``)."""
        rows = self._rows(
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
        )
        return _sql.channel(self.name, rows[0])

    def delete_channel(self, channel: str, *, conn: Connection[Any] | None = None) -> str:
        """``deleted``, ``not_found`` or ``not_empty`` (``channel_delete``)."""
        return str(self._scalar(_sql.CHANNEL_DELETE, (self.name, channel), conn))

    # -- producing --------------------------------------------------------------------------

    def create(
        self,
        content: Content,
        *,
        channel: str | None = None,
        dequeue_at: datetime | None = None,
        delay_ms: int = 0,
        priority: int = 0,
        dedup_key: str | None = None,
        state: Content | None = None,
        conn: Connection[Any] | None = None,
    ) -> CreateResult:
        """Enqueue one message: ``created``, ``deduplicated`` or ``dropped``."""
        rows = self._rows(
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
        )
        return _sql.create_result(rows[0])

    def create_batch(
        self,
        contents: Sequence[Content],
        *,
        channel: str | None = None,
        channels: Sequence[str | None] | None = None,
        dequeue_ats: Sequence[datetime | None] | None = None,
        dedup_keys: Sequence[str | None] | None = None,
        idempotency_key: str | None = None,
        conn: Connection[Any] | None = None,
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
        rows = self._rows(
            _sql.MESSAGE_CREATE_BATCH,
            (self.name, chans, [encode(c) for c in contents], ats, keys, idempotency_key),
            conn,
        )
        return [_sql.create_result(r) for r in rows]

    # -- consuming --------------------------------------------------------------------------

    def dequeue(
        self, *, lock_ms: int, max_messages: int = 1, conn: Connection[Any] | None = None
    ) -> list[Message]:
        """Lock up to ``max_messages`` ready messages for ``lock_ms``, fairly across channels."""
        rows = self._rows(_sql.MESSAGE_DEQUEUE, (self.name, lock_ms, max_messages), conn)
        return [Message(**_sql.message_data(self.name, r), _queue=self) for r in rows]

    def complete(self, id: int, num_attempts: int, *, conn: Connection[Any] | None = None) -> str:
        return str(self._scalar(_sql.MESSAGE_COMPLETE, (id, num_attempts), conn))

    def complete_batch(
        self, messages: Sequence[Message], *, conn: Connection[Any] | None = None
    ) -> list[CompleteResult]:
        """Complete many delivered messages in one call."""
        rows = self._rows(
            _sql.MESSAGE_COMPLETE_BATCH,
            ([m.id for m in messages], [m.num_attempts for m in messages]),
            conn,
        )
        return [_sql.complete_result(r) for r in rows]

    def defer(
        self,
        id: int,
        num_attempts: int,
        *,
        dequeue_at: datetime | None = None,
        delay_ms: int = 0,
        state: Content | None = None,
        conn: Connection[Any] | None = None,
    ) -> str:
        """Release the lock and reschedule; ``state=None`` keeps the saved state."""
        return str(
            self._scalar(
                _sql.MESSAGE_DEFER,
                (id, num_attempts, dequeue_at, delay_ms, encode_optional(state)),
                conn,
            )
        )

    def heartbeat(
        self, id: int, num_attempts: int, lock_ms: int, *, conn: Connection[Any] | None = None
    ) -> str:
        return str(self._scalar(_sql.MESSAGE_HEARTBEAT, (id, num_attempts, lock_ms), conn))

    def fail(
        self,
        id: int,
        num_attempts: int,
        error: str | None = None,
        *,
        conn: Connection[Any] | None = None,
    ) -> str:
        return str(self._scalar(_sql.MESSAGE_FAIL, (id, num_attempts, error), conn))

    def cancel(self, id: int, *, conn: Connection[Any] | None = None) -> str:
        """``cancelled`` (was pending), ``locked`` or ``not_found``."""
        return str(self._scalar(_sql.MESSAGE_CANCEL, (id,), conn))

    # -- archive ----------------------------------------------------------------------------

    def archived(
        self,
        *,
        outcome: str | None = None,
        limit: int = 100,
        conn: Connection[Any] | None = None,
    ) -> list[ArchivedMessage]:
        """The newest archived messages of this queue, optionally of one outcome."""
        rows = self._rows(_sql.ARCHIVE_LIST, (self.name, outcome, outcome, limit), conn)
        return [_sql.archived_message(r) for r in rows]

    def requeue(self, archive_id: int, *, conn: Connection[Any] | None = None) -> CreateResult:
        """Re-create an archived message (``archive_requeue``)."""
        rows = self._rows(_sql.ARCHIVE_REQUEUE, (archive_id,), conn)
        return _sql.create_result(rows[0])

    def prune_archive(self, older_than: timedelta, *, conn: Connection[Any] | None = None) -> int:
        """Delete archive rows older than ``older_than`` (all queues); returns the count."""
        return int(self._scalar(_sql.ARCHIVE_PRUNE, (older_than,), conn))

    # -- inspection -------------------------------------------------------------------------

    def wait_hint_ms(self, *, conn: Connection[Any] | None = None) -> int | None:
        """Milliseconds until a message could be dequeued (0 = now, None = queue empty)."""
        value = self._scalar(_sql.WAIT_HINT_MS, (self.name,), conn)
        return None if value is None else int(value)

    @contextmanager
    def waiting(self) -> Iterator[int | None]:
        """Announces a consumer about to sleep on this queue, for as long as the block runs,
        and yields how long to sleep at most (ms; None: until notified).

        Producers send the ``lonnymq`` NOTIFY only while a consumer waits, so a consumer that
        LISTENs sleeps inside this block. The announcement is a session-level lock on a pool
        connection held for the block (no transaction stays open); no wake-up is lost (see
        ``lonnymq.wait_begin``)."""
        with self.pool.connection() as c:
            value = (c.execute(_sql.WAIT_BEGIN, (self.name,))).fetchone()
            c.commit()
            try:
                yield None if value is None or value[0] is None else int(value[0])
            finally:
                c.execute(_sql.WAIT_END, (self.name,))
                c.commit()

    def stats(self, *, conn: Connection[Any] | None = None) -> QueueStats:
        rows = self._rows(_sql.QUEUE_STATS, (self.name,), conn)
        return _sql.queue_stats(self.name, rows[0] if rows else None)

    def channel_stats(self, *, conn: Connection[Any] | None = None) -> list[ChannelStats]:
        return [_sql.channel_stats(r) for r in self._rows(_sql.CHANNEL_STATS, (self.name,), conn)]

    def verify(self, *, conn: Connection[Any] | None = None) -> list[str]:
        """Broken invariants of the whole installation; empty when healthy."""
        return [str(r[0]) for r in self._rows(_sql.VERIFY, (), conn)]

    # -- pg_cron schedules ------------------------------------------------------------------

    def schedule(
        self,
        name: str,
        cron: str,
        content: Content,
        *,
        channel: str | None = None,
        conn: Connection[Any] | None = None,
    ) -> None:
        """Create a message on a cron schedule through pg_cron (``schedule_set``)."""
        self._rows(_sql.SCHEDULE_SET, (name, cron, self.name, channel, encode(content)), conn)

    def unschedule(self, name: str, *, conn: Connection[Any] | None = None) -> None:
        self._rows(_sql.SCHEDULE_DELETE, (name,), conn)
