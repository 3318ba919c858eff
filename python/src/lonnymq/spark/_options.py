"""Options of the ``lonnymq`` Spark format, parsed once on the driver.

Spark lower-cases option keys, so every name here is lower-case. The parsed ``Options`` is a
frozen dataclass: it is pickled into every task together with the reader or writer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

TABLES = ("message", "channel", "message_archive")

# message_create_batch and message_complete_batch take at most 100000 elements,
# message_dequeue at most 10000 per call.
MAX_CHUNK_ROWS = 100_000
MAX_MESSAGES_PER_BATCH = 100_000
# A read snapshot kept unread for longer than 30 days is surely forgotten.
MAX_SNAPSHOT_RETENTION_S = 30 * 86_400
# Staged rows of a write whose driver died are dropped once idle this long (default a day);
# less than 10 minutes would race ordinary slow jobs.
MIN_STAGE_RETENTION_S = 600


class OptionError(ValueError):
    """An option of the lonnymq format is missing or invalid."""


def _int(options: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = options.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {name} must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise OptionError(f"option {name} must be between {low} and {high}, got {value}")
    return value


@dataclass(frozen=True)
class Options:
    dsn: str
    queue: str | None
    table: str
    # Column mapping of writes. *_explicit: the user named the column, so it must exist.
    channel_column: str
    channel_explicit: bool
    content_column: str
    dequeue_at_column: str
    dequeue_at_explicit: bool
    dedup_key_column: str
    dedup_key_explicit: bool
    idempotency_key: str | None
    num_partitions: int
    max_messages_per_batch: int
    lock_ms: int
    heartbeat_ms: int
    chunk_rows: int
    poll_ms: int
    snapshot_retention_s: int
    stage_retention_s: int

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Options:
        opts = {str(k).lower(): v for k, v in options.items()}
        dsn = opts.get("dsn")
        if not dsn:
            raise OptionError("option dsn is required (a libpq connection string or URL)")
        table = opts.get("table", "message").lower()
        if table not in TABLES:
            raise OptionError(f"option table must be one of {', '.join(TABLES)}, got {table!r}")
        key = opts.get("idempotency_key") or None
        if key is not None and len(key) > 400:
            raise OptionError("option idempotency_key must be at most 400 characters")
        lock_ms = _int(opts, "lock_ms", 60_000, 1_000, 86_400_000)
        return cls(
            dsn=dsn,
            queue=opts.get("queue") or None,
            table=table,
            channel_column=opts.get("channel_column") or "channel",
            channel_explicit="channel_column" in opts,
            content_column=opts.get("content_column") or "content",
            dequeue_at_column=opts.get("dequeue_at_column") or "dequeue_at",
            dequeue_at_explicit="dequeue_at_column" in opts,
            dedup_key_column=opts.get("dedup_key_column") or "dedup_key",
            dedup_key_explicit="dedup_key_column" in opts,
            idempotency_key=key,
            num_partitions=_int(opts, "num_partitions", 4, 1, 10_000),
            max_messages_per_batch=_int(
                opts, "max_messages_per_batch", 1_000, 1, MAX_MESSAGES_PER_BATCH
            ),
            lock_ms=lock_ms,
            # A third of the lock: two heartbeats may be lost before a lock expires.
            heartbeat_ms=_int(opts, "heartbeat_ms", max(lock_ms // 3, 100), 100, lock_ms),
            chunk_rows=_int(opts, "chunk_rows", 10_000, 1, MAX_CHUNK_ROWS),
            poll_ms=_int(opts, "poll_ms", 200, 0, 60_000),
            snapshot_retention_s=_int(
                opts, "snapshot_retention_s", 3_600, 0, MAX_SNAPSHOT_RETENTION_S
            ),
            stage_retention_s=_int(
                opts,
                "stage_retention_s",
                86_400,
                MIN_STAGE_RETENTION_S,
                MAX_SNAPSHOT_RETENTION_S,
            ),
        )

    def require_queue(self) -> str:
        if not self.queue:
            raise OptionError("option queue is required here")
        return self.queue
