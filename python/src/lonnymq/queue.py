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

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from types import EllipsisType, TracebackType
from typing import Any, TypeVar, overload

from psycopg import Connection
from psycopg.pq import TransactionStatus
from psycopg.rows import BaseRowFactory, class_row, kwargs_row, tuple_row
from psycopg_pool import ConnectionPool

from . import _sql
from ._content import Content, encode, encode_optional
from ._pool import PromptPool
from .errors import LonnymqError
from .message import Message
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
        self.pool: ConnectionPool
        if isinstance(conninfo_or_pool, str):
            # Reconnects within a second of the server's return (see _pool).
            self.pool = PromptPool(
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
                if pooled.autocommit:
                    yield pooled
                    return
                # Each call is one statement, which is its own transaction: with autocommit it
                # is one round trip instead of three (BEGIN, statement, COMMIT), and the
                # connection never sits idle in transaction between them. The pool's own
                # setting is put back for its other users.
                pooled.set_autocommit(True)
                try:
                    yield pooled
                finally:
                    if pooled.pgconn.transaction_status == TransactionStatus.IDLE:
                        pooled.set_autocommit(False)

    def _rows(
        self,
        query: str,
        params: Sequence[Any],
        conn: Connection[Any] | None,
        row_factory: BaseRowFactory[T],
    ) -> list[T]:
        """The rows of one statement, each made by ``row_factory`` from its named columns."""
        with self._connection(conn) as c, c.cursor(row_factory=row_factory) as cursor:
            cursor.execute(query, params)
            return cursor.fetchall()

    def _scalar(self, query: str, params: Sequence[Any], conn: Connection[Any] | None) -> Any:
        """The one value of a statement that returns one row of one column."""
        rows = self._rows(query, params, conn, tuple_row)
        return rows[0][0]

    def _in_queue(self, cls: Callable[..., T]) -> BaseRowFactory[T]:
        """Rows of ``cls``, whose ``queue`` field is this queue's name."""
        return kwargs_row(functools.partial(cls, queue=self.name))

    # -- channels ---------------------------------------------------------------------------

    def channel_set(
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
        """Create or replace a channel's policy."""
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
            self._in_queue(Channel),
        )
        return rows[0]

    def channel_delete(self, channel: str, *, conn: Connection[Any] | None = None) -> str:
        """``deleted``, ``not_found`` or ``not_empty``."""
        return str(self._scalar(_sql.CHANNEL_DELETE, (self.name, channel), conn))

    def channel_pause(self, channel: str, *, conn: Connection[Any] | None = None) -> str:
        """Stop serving a channel: ``paused`` or ``not_found``."""
        return str(self._scalar(_sql.CHANNEL_PAUSE, (self.name, channel), conn))

    def channel_resume(self, channel: str, *, conn: Connection[Any] | None = None) -> str:
        """Serve a paused channel again: ``resumed`` or ``not_found``."""
        return str(self._scalar(_sql.CHANNEL_RESUME, (self.name, channel), conn))

    def queue_pause(self, *, conn: Connection[Any] | None = None) -> str:
        """Stop serving this queue: ``paused`` or ``not_found``."""
        return str(self._scalar(_sql.QUEUE_PAUSE, (self.name,), conn))

    def queue_resume(self, *, conn: Connection[Any] | None = None) -> str:
        """Serve this queue again: ``resumed`` or ``not_found``."""
        return str(self._scalar(_sql.QUEUE_RESUME, (self.name,), conn))

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
            class_row(CreateResult),
        )
        return rows[0]

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
        return self._rows(
            _sql.MESSAGE_CREATE_BATCH,
            (self.name, chans, [encode(c) for c in contents], ats, keys, idempotency_key),
            conn,
            class_row(CreateResult),
        )

    # -- consuming --------------------------------------------------------------------------

    def dequeue(
        self, *, lock_ms: int, max_messages: int = 1, conn: Connection[Any] | None = None
    ) -> list[Message]:
        """Lock up to ``max_messages`` ready messages for ``lock_ms``, fairly across channels."""
        return self._rows(
            _sql.MESSAGE_DEQUEUE,
            (self.name, lock_ms, max_messages),
            conn,
            kwargs_row(functools.partial(Message, queue=self.name, _queue=self)),
        )

    def complete(self, id: int, num_attempts: int, *, conn: Connection[Any] | None = None) -> str:
        return str(self._scalar(_sql.MESSAGE_COMPLETE, (id, num_attempts), conn))

    def complete_batch(
        self, messages: Sequence[Message], *, conn: Connection[Any] | None = None
    ) -> list[CompleteResult]:
        """Complete many delivered messages in one call."""
        return self._rows(
            _sql.MESSAGE_COMPLETE_BATCH,
            ([m.id for m in messages], [m.num_attempts for m in messages]),
            conn,
            class_row(CompleteResult),
        )

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

    def message_archive(
        self,
        *,
        outcome: str | None = None,
        limit: int = 100,
        conn: Connection[Any] | None = None,
    ) -> list[ArchivedMessage]:
        """The newest archived messages of this queue, optionally of one outcome."""
        return self._rows(
            _sql.MESSAGE_ARCHIVE,
            (self.name, outcome, outcome, limit),
            conn,
            class_row(ArchivedMessage),
        )

    @overload
    def archive_requeue(
        self, archive_id: int, *, conn: Connection[Any] | None = None
    ) -> CreateResult: ...

    @overload
    def archive_requeue(
        self,
        *,
        outcome: str | None,
        channel: str | None = None,
        archived_after: datetime | None = None,
        archived_before: datetime | None = None,
        conn: Connection[Any] | None = None,
    ) -> RequeueResult: ...

    def archive_requeue(
        self,
        archive_id: int | None = None,
        *,
        outcome: str | EllipsisType | None = ...,
        channel: str | None = None,
        archived_after: datetime | None = None,
        archived_before: datetime | None = None,
        conn: Connection[Any] | None = None,
    ) -> CreateResult | RequeueResult:
        """Re-create one archived message (``CreateResult``), or, given ``outcome`` (``None``:
        any) instead of an id, every archived message of this queue matching the filter,
        oldest first, in one transaction (``RequeueResult``). Like the SQL function,
        ``outcome`` has no default, so the one-argument call is always the single-id form."""
        if archive_id is not None:
            if outcome is not ...:
                raise TypeError("archive_requeue takes an archive id or a filter, not both")
            rows = self._rows(_sql.ARCHIVE_REQUEUE, (archive_id,), conn, class_row(CreateResult))
            return rows[0]
        if outcome is ...:
            raise TypeError("archive_requeue needs an archive id, or outcome= for a filter")
        matching = self._rows(
            _sql.ARCHIVE_REQUEUE_MATCHING,
            (self.name, outcome, channel, archived_after, archived_before),
            conn,
            class_row(RequeueResult),
        )
        return matching[0]

    def archive_prune(
        self,
        older_than: timedelta,
        *,
        all_queues: bool = True,
        channel: str | None = None,
        outcome: str | None = None,
        conn: Connection[Any] | None = None,
    ) -> int:
        """Delete archive rows older than ``older_than`` of every queue (``all_queues=False``:
        of this queue only), optionally of one channel or outcome; returns the count."""
        queue = None if all_queues else self.name
        return int(self._scalar(_sql.ARCHIVE_PRUNE, (older_than, queue, channel, outcome), conn))

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
        connection held for the block (each statement commits at once: no transaction stays
        open); no wake-up is lost (see ``lonnymq.wait_begin``)."""
        with self._waiting() as (hint, _conn):
            yield hint

    @contextmanager
    def _waiting(self) -> Iterator[tuple[int | None, Connection[Any]]]:
        """``waiting()`` that also yields the connection holding the announcement: the
        announcement dies with it, so a worker watches it while it sleeps."""
        with self._connection(None) as c:
            value = self._scalar(_sql.WAIT_BEGIN, (self.name,), c)
            try:
                yield None if value is None else int(value), c
            finally:
                self._scalar(_sql.WAIT_END, (self.name,), c)

    def queue_stats(self, *, conn: Connection[Any] | None = None) -> QueueStats:
        rows = self._rows(_sql.QUEUE_STATS, (self.name,), conn, class_row(QueueStats))
        # A queue with no messages and no archive has no row: zeros, not an error.
        return rows[0] if rows else QueueStats(self.name, 0, 0, 0, 0, 0)

    def channel_stats(self, *, conn: Connection[Any] | None = None) -> list[ChannelStats]:
        return self._rows(_sql.CHANNEL_STATS, (self.name,), conn, class_row(ChannelStats))

    def verify(self, *, conn: Connection[Any] | None = None) -> list[str]:
        """Broken invariants of the whole installation; empty when healthy."""
        return [str(r[0]) for r in self._rows(_sql.VERIFY, (), conn, tuple_row)]

    # -- pg_cron schedules ------------------------------------------------------------------

    def schedule_set(
        self,
        name: str,
        cron: str,
        content: Content,
        *,
        channel: str | None = None,
        conn: Connection[Any] | None = None,
    ) -> int:
        """Create a message on a cron schedule through pg_cron; returns the pg_cron job id."""
        return int(
            self._scalar(_sql.SCHEDULE_SET, (name, cron, self.name, channel, encode(content)), conn)
        )

    def schedule_delete(self, name: str, *, conn: Connection[Any] | None = None) -> str:
        """``deleted`` or ``not_found``."""
        return str(self._scalar(_sql.SCHEDULE_DELETE, (name,), conn))
