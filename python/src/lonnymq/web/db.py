"""The dashboard's database access: a small async pool and the queries of each page.

Every query is bounded: the summaries stop counting at ``count_limit`` and walk indexes
only (``queue_summary``, ``channel_summary``, ``message_browse`` in SQL), lists have a
LIMIT on an index order, and ``verify()`` (which scans everything) runs only when asked.
When read-only, connections are ``default_transaction_read_only`` and may ``SET ROLE`` to
a monitoring role, so the dashboard can do no more than that role's grants allow.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg.errors
from psycopg import AsyncConnection, sql
from psycopg.rows import dict_row
from psycopg.types.datetime import TimestamptzLoader
from psycopg_pool import AsyncConnectionPool

Row = dict[str, Any]

# The Schedules page reads at most this many periodic messages (periodic_summary's most).
PERIODIC_READ = 10_000
# Per-channel counts on the channels page stop here (a page shows up to 100 channels).
CHANNEL_COUNT_LIMIT = 1000
# The longest queue or channel name the SQL API accepts.
MAX_NAME_CHARS = 256
# An archived message's error is shown up to here (the page says it is cut).
MAX_ERROR_SHOWN = 64 * 1024
# A periodic message's recorded interval and error, as a Worker writes them at most.
MAX_INTERVAL_MS = 10_000 * 366 * 86_400_000
MAX_ERROR_CHARS = 500

# A message's columns but its content and state, which are read only when asked for.
MESSAGE_COLUMNS = (
    "id, queue, channel, num_attempts, dequeue_at, locked_until, created_at, priority, dedup_key"
)

# An error text is free (message_fail takes any): the list reads its start only.
ARCHIVE_COLUMNS = (
    "id, message_id, queue, channel, num_attempts, outcome, left(error, 200) AS error,"
    " created_at, archived_at, octet_length(content) AS content_bytes"
)


class AnyTimestamptz(TimestamptzLoader):
    """A time as a datetime, or as PostgreSQL's text when past datetime's years 1 to 9999:
    the API accepts ``dequeue_at`` up to year 294276, and such a message must still show
    (and be cancellable)."""

    def load(self, data: Any) -> datetime | str:  # type: ignore[override]
        try:
            return super().load(data)
        except psycopg.DataError:
            return bytes(data).decode()


class Database:
    """Owns (or borrows) a pool; opened on first use, so a mounted app needs no lifespan."""

    def __init__(
        self,
        conninfo_or_pool: str | AsyncConnectionPool,
        *,
        read_only: bool,
        role: str | None,
        count_limit: int,
        pool_size: int = 4,
    ) -> None:
        self.read_only = read_only
        self.role = role
        self.count_limit = count_limit
        self._lock = asyncio.Lock()
        if isinstance(conninfo_or_pool, str):
            self.pool = AsyncConnectionPool(
                conninfo_or_pool,
                min_size=1,
                max_size=pool_size,
                open=False,
                name="lonnymq-web",
                kwargs={"autocommit": True},
                configure=self._configure,
            )
            self._owns_pool = True
            self._opened = False
        else:
            if role is not None:
                # The pool's connections are the caller's: SET ROLE on them is not ours.
                raise ValueError("role= needs a DSN: with your own pool, connect as the role")
            self.pool = conninfo_or_pool
            self._owns_pool = False
            self._opened = True
        # For the app's own connections (LISTEN, waiting, throughput): from the pool's.
        conninfo = conninfo_or_pool if isinstance(conninfo_or_pool, str) else None
        self.conninfo = conninfo or getattr(conninfo_or_pool, "conninfo", None)

    async def _configure(self, conn: AsyncConnection[Any]) -> None:
        if self.read_only:
            await conn.execute("SET default_transaction_read_only = on")
        if self.role:
            await conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(self.role)))

    async def connect(self) -> AsyncConnection[Any]:
        """A connection of its own (autocommit), set up like the pool's: read-only when
        the dashboard is, and ``SET ROLE`` to ``role``: every connection the app opens."""
        assert self.conninfo is not None
        conn = await AsyncConnection.connect(self.conninfo, autocommit=True)
        try:
            await self._configure(conn)
        except BaseException:
            await conn.close()
            raise
        return conn

    async def open(self) -> None:
        async with self._lock:
            if not self._opened:
                await self.pool.open(wait=True)
                self._opened = True

    async def close(self) -> None:
        if self._owns_pool and self._opened:
            await self.pool.close()
            self._opened = False

    async def rows(self, query: str | sql.Composed, params: Sequence[Any] = ()) -> list[Row]:
        await self.open()
        async with self.pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            cur.adapters.register_loader("timestamptz", AnyTimestamptz)
            await cur.execute(query, params)
            return await cur.fetchall()

    async def row(self, query: str | sql.Composed, params: Sequence[Any] = ()) -> Row | None:
        found = await self.rows(query, params)
        return found[0] if found else None

    async def value(self, query: str, params: Sequence[Any] = ()) -> Any:
        found = await self.row(query, params)
        return None if found is None else next(iter(found.values()))

    # -- pages --------------------------------------------------------------------------

    async def queues(self) -> list[Row]:
        return await self.rows(
            "SELECT * FROM lonnymq.queue_summary(count_limit => %s)", (self.count_limit,)
        )

    async def queue_names(self) -> list[Row]:
        """Queues for the pickers of the other pages: the summary with counts of at most one."""
        return await self.rows("SELECT queue, paused FROM lonnymq.queue_summary(count_limit => 1)")

    async def table_activity(self) -> Row | None:
        """Cumulative inserts and deletes of the message table (all queues): throughput."""
        return await self.row(
            "SELECT n_tup_ins AS created, n_tup_del AS removed FROM pg_catalog.pg_stat_user_tables"
            " WHERE schemaname = 'lonnymq' AND relname = 'message'"
        )

    async def verify(self) -> list[str]:
        return [r["verify"] for r in await self.rows("SELECT * FROM lonnymq.verify()")]

    async def channels(self, queue: str, max_channels: int) -> list[Row]:
        return await self.rows(
            "SELECT * FROM lonnymq.channel_summary(queue => %s, max_channels => %s,"
            " count_limit => %s)",
            (queue, max_channels, min(self.count_limit, CHANNEL_COUNT_LIMIT)),
        )

    async def browse(
        self, queue: str, channel: str | None, state: str | None, limit: int
    ) -> list[Row]:
        return await self.rows(
            "SELECT * FROM lonnymq.message_browse(queue => %s, channel => %s, state => %s,"
            " max_messages => %s)",
            (queue, channel, state, limit),
        )

    async def message(
        self, message_id: int, max_bytes: int = 0, show: str | None = None
    ) -> Row | None:
        """A live message; with ``show``, its content and state too, cut at ``max_bytes``
        (plus their full sizes); without, neither is read."""
        return await self.row(
            sql.SQL("SELECT {} FROM lonnymq.messages WHERE id = %s").format(
                _with_bytes(MESSAGE_COLUMNS, max_bytes, show)
            ),
            (message_id,),
        )

    async def message_by_dedup_key(self, queue: str, dedup_key: str) -> Row | None:
        return await self.row(
            "SELECT id FROM lonnymq.messages WHERE queue = %s AND dedup_key = %s",
            (queue, dedup_key),
        )

    async def archive(
        self,
        queue: str | None,
        outcome: str | None,
        after: datetime | None,
        before: datetime | None,
        limit: int,
    ) -> list[Row]:
        # Newest first through message_archive_queue_idx (queue, archived_at) or
        # message_archive_archived_idx; the other filters apply to the rows walked.
        conditions: list[sql.Composable] = [sql.SQL("TRUE")]
        params: list[Any] = []
        for column, op, value in (
            ("queue", "=", queue),
            ("outcome", "=", outcome),
            ("archived_at", ">=", after),
            ("archived_at", "<", before),
        ):
            if value is not None:
                conditions.append(sql.SQL("{} " + op + " %s").format(sql.Identifier(column)))
                params.append(value)
        query = sql.SQL(
            "SELECT " + ARCHIVE_COLUMNS + " FROM lonnymq.message_archive WHERE {}"
            " ORDER BY archived_at DESC, id DESC LIMIT %s"
        ).format(sql.SQL(" AND ").join(conditions))
        return await self.rows(query, [*params, limit])

    async def archived(
        self, archive_id: int, max_bytes: int = 0, show: str | None = None
    ) -> Row | None:
        """An archived message, its content and state as ``message`` reads them."""
        columns = (
            "id, message_id, queue, channel, num_attempts, outcome, created_at, archived_at,"
            f" left(error, {MAX_ERROR_SHOWN}) AS error, length(error) AS error_chars"
        )
        return await self.row(
            sql.SQL("SELECT {} FROM lonnymq.message_archive WHERE id = %s").format(
                _with_bytes(columns, max_bytes, show)
            ),
            (archive_id,),
        )

    async def periodic(self, max_rows: int) -> tuple[list[Row], int]:
        """The Worker's periodic messages of every queue, each with the state its last run
        recorded (interval, time, error) decoded; through an index of their channels only.

        At most ``max_rows``, and how many there were (up to PERIODIC_READ). Anyone who can
        create a message can make up such a channel, and periodic_summary's own limit
        follows queue and channel names, which the maker chooses: so it reads up to
        PERIODIC_READ, and the cap applies to what is shown, a Worker's first: a live
        message whose state is a Worker's record, or none yet."""
        rows = await self.rows(
            "SELECT * FROM lonnymq.periodic_summary(max_rows => %s)", (PERIODIC_READ,)
        )
        workers: list[Row] = []
        others: list[Row] = []
        for row in rows:
            state = row.pop("state")
            row["run"] = periodic_state(state)
            recorded = state is None or row["run"].get("interval_ms") is not None
            (workers if row["message_id"] is not None and recorded else others).append(row)
        return (workers + others)[:max_rows], len(rows)

    async def cron_jobs(self) -> list[Row] | None:
        """lonnymq's pg_cron jobs; None when pg_cron is not installed (or not readable)."""
        installed = await self.value(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'pg_cron')"
        )
        if not installed:
            return None
        try:
            return await self.rows(
                "SELECT jobid, jobname, schedule, command, active FROM cron.job"
                " WHERE jobname LIKE 'lonnymq%%' ORDER BY jobname"
            )
        except psycopg.errors.InsufficientPrivilege:  # no USAGE on schema cron
            return None


def _with_bytes(columns: str, max_bytes: int, show: str | None) -> sql.Composable:
    """The columns, plus content and state cut at ``max_bytes`` + 1 (one byte more says
    it was cut) and their sizes when shown."""
    if show is None:
        return sql.SQL(columns)
    cut = sql.Literal(max_bytes + 1)
    return sql.SQL(
        columns + ", substring(content FROM 1 FOR {cut}) AS content,"
        " octet_length(content) AS content_bytes, substring(state FROM 1 FOR {cut}) AS state,"
        " octet_length(state) AS state_bytes"
    ).format(cut=cut)


def periodic_state(state: bytes | None) -> dict[str, Any]:
    """What a Worker recorded after a periodic run (``_periodic.run_state``): its interval,
    when it ran and how that ended, each None unless of the type a Worker writes (any
    producer can write any state on such a channel), all None before the first run."""
    try:
        data = json.loads(bytes(state)) if state is not None else None
    except (ValueError, RecursionError):  # RecursionError: nested too deep
        data = None
    if not isinstance(data, dict):
        data = {}
    interval = data.get("interval_ms")
    error = data.get("error")
    try:
        ran_at: datetime | None = datetime.fromisoformat(data["ran_at"])
    except (KeyError, TypeError, ValueError):
        ran_at = None
    if ran_at is not None and ran_at.tzinfo is not None:
        try:
            # In UTC, as the page shows it; an offset can push it past year 1 or 9999.
            ran_at = ran_at.astimezone(UTC)
        except OverflowError:
            ran_at = None
    return {
        # bool is an int to Python, not to a Worker.
        "interval_ms": interval
        if type(interval) is int and 0 < interval <= MAX_INTERVAL_MS
        else None,
        "ran_at": ran_at if ran_at is not None and ran_at.tzinfo is not None else None,
        "error": error[:MAX_ERROR_CHARS] if isinstance(error, str) else None,
    }
