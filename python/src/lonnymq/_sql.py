"""The SQL the clients send, shared by the sync and asyncio twins.

Every call uses named notation (the SQL API's parameter names are binding, README "A tour
in SQL") with explicit casts, so NULL arguments resolve to the right types and a renamed
parameter fails loudly. Types and operators are schema-qualified, so look-alikes on the
caller's search_path cannot step in. Result columns are named like the fields of the
dataclass a row becomes (psycopg row factories map them by name, never by position).
"""

from __future__ import annotations

from datetime import datetime

# channel_set returns the channel table row: pick the policy columns by name.
CHANNEL_SET = """
SELECT name AS channel, max_concurrency, release_interval_ms, max_size, max_attempts,
       retain_completed
  FROM lonnymq.channel_set(
       queue => %s::pg_catalog.text,
       channel => %s::pg_catalog.text,
       max_concurrency => %s::pg_catalog.int4,
       release_interval_ms => %s::pg_catalog.int8,
       max_size => %s::pg_catalog.int8,
       max_attempts => %s::pg_catalog.int4,
       retain_completed => %s::pg_catalog.bool)
"""

CHANNEL_DELETE = """
SELECT lonnymq.channel_delete(queue => %s::pg_catalog.text, channel => %s::pg_catalog.text)
"""

MESSAGE_CREATE = """
SELECT status, id
  FROM lonnymq.message_create(
       queue => %s::pg_catalog.text,
       channel => %s::pg_catalog.text,
       content => %s::pg_catalog.bytea,
       dequeue_at => %s::pg_catalog.timestamptz,
       delay_ms => %s::pg_catalog.int8,
       priority => %s::pg_catalog.int4,
       dedup_key => %s::pg_catalog.text,
       state => %s::pg_catalog.bytea)
"""

MESSAGE_CREATE_BATCH = """
SELECT status, id
  FROM lonnymq.message_create_batch(
       queue => %s::pg_catalog.text,
       channels => %s::pg_catalog.text[],
       contents => %s::pg_catalog.bytea[],
       dequeue_ats => %s::pg_catalog.timestamptz[],
       dedup_keys => %s::pg_catalog.text[],
       idempotency_key => %s::pg_catalog.text)
"""

MESSAGE_DEQUEUE = """
SELECT id, channel, content, state, num_attempts, dequeue_at, recovered
  FROM lonnymq.message_dequeue(
       queue => %s::pg_catalog.text,
       lock_ms => %s::pg_catalog.int8,
       max_messages => %s::pg_catalog.int4)
"""

MESSAGE_COMPLETE = """
SELECT lonnymq.message_complete(id => %s::pg_catalog.int8, num_attempts => %s::pg_catalog.int8)
"""

MESSAGE_COMPLETE_BATCH = """
SELECT id, status
  FROM lonnymq.message_complete_batch(
       ids => %s::pg_catalog.int8[],
       num_attempts => %s::pg_catalog.int8[])
"""

MESSAGE_DEFER = """
SELECT lonnymq.message_defer(
       id => %s::pg_catalog.int8,
       num_attempts => %s::pg_catalog.int8,
       dequeue_at => %s::pg_catalog.timestamptz,
       delay_ms => %s::pg_catalog.int8,
       state => %s::pg_catalog.bytea)
"""

MESSAGE_HEARTBEAT = """
SELECT lonnymq.message_heartbeat(
       id => %s::pg_catalog.int8,
       num_attempts => %s::pg_catalog.int8,
       lock_ms => %s::pg_catalog.int8)
"""

MESSAGE_FAIL = """
SELECT lonnymq.message_fail(
       id => %s::pg_catalog.int8,
       num_attempts => %s::pg_catalog.int8,
       error => %s::pg_catalog.text)
"""

MESSAGE_CANCEL = "SELECT lonnymq.message_cancel(id => %s::pg_catalog.int8)"

ARCHIVE_REQUEUE = """
SELECT status, id FROM lonnymq.archive_requeue(archive_id => %s::pg_catalog.int8)
"""

# A bulk redrive: every archived message of a queue matching the filter.
ARCHIVE_REQUEUE_MATCHING = """
SELECT requeued, dropped
  FROM lonnymq.archive_requeue(
       queue => %s::pg_catalog.text,
       outcome => %s::pg_catalog.text,
       channel => %s::pg_catalog.text,
       archived_after => %s::pg_catalog.timestamptz,
       archived_before => %s::pg_catalog.timestamptz)
"""

ARCHIVE_PRUNE = """
SELECT lonnymq.archive_prune(
       older_than => %s::pg_catalog.interval,
       queue => %s::pg_catalog.text,
       channel => %s::pg_catalog.text,
       outcome => %s::pg_catalog.text)
"""

QUEUE_PAUSE = "SELECT lonnymq.queue_pause(queue => %s::pg_catalog.text)"
QUEUE_RESUME = "SELECT lonnymq.queue_resume(queue => %s::pg_catalog.text)"
CHANNEL_PAUSE = """
SELECT lonnymq.channel_pause(queue => %s::pg_catalog.text, channel => %s::pg_catalog.text)
"""
CHANNEL_RESUME = """
SELECT lonnymq.channel_resume(queue => %s::pg_catalog.text, channel => %s::pg_catalog.text)
"""

WAIT_HINT_MS = "SELECT lonnymq.wait_hint_ms(queue => %s::pg_catalog.text)"
WAIT_BEGIN = "SELECT lonnymq.wait_begin(queue => %s::pg_catalog.text)"
WAIT_END = "SELECT lonnymq.wait_end(queue => %s::pg_catalog.text)"

VERIFY = "SELECT * FROM lonnymq.verify()"

SCHEDULE_SET = """
SELECT lonnymq.schedule_set(
       name => %s::pg_catalog.text,
       cron => %s::pg_catalog.text,
       queue => %s::pg_catalog.text,
       channel => %s::pg_catalog.text,
       content => %s::pg_catalog.bytea)
"""

SCHEDULE_DELETE = "SELECT lonnymq.schedule_delete(name => %s::pg_catalog.text)"

# Every queue with messages or an archive, for ``lonnymq status`` without ``--queue``: one
# read of each view for all queues (each read counts the whole message table).
ALL_QUEUE_STATS = """
SELECT queue, channels, ready, scheduled, locked, archived
  FROM lonnymq.queue_stats
 ORDER BY queue
"""

ALL_CHANNEL_STATS = """
SELECT queue, channel, ready, scheduled, locked, max_concurrency, release_interval_ms,
       max_size, max_attempts, oldest_ready_ms
  FROM lonnymq.channel_stats
 ORDER BY queue, channel NULLS FIRST
"""

# The queues that exist, cheaply (no count of their messages): for waiters of every queue.
QUEUE_NAMES = "SELECT queue FROM lonnymq.queue_summary(count_limit => 1)"

# A waiter of several queues (``lonnymq tail``, the dashboard's live page, see _announce)
# announces itself on each queue of a list, with what each wait_begin returned, and ends
# the announcements of another list.
ANNOUNCE = """
SELECT q AS queue, lonnymq.wait_begin(q) AS hint_ms
  FROM pg_catalog.unnest(%s::pg_catalog.text[]) q
"""

WITHDRAW = """
SELECT pg_catalog.count(lonnymq.wait_end(q)) FROM pg_catalog.unnest(%s::pg_catalog.text[]) q
"""

QUEUE_STATS = """
SELECT queue, channels, ready, scheduled, locked, archived
  FROM lonnymq.queue_stats
 WHERE queue OPERATOR(pg_catalog.=) %s::pg_catalog.text
"""

CHANNEL_STATS = """
SELECT queue, channel, ready, scheduled, locked, max_concurrency, release_interval_ms,
       max_size, max_attempts, oldest_ready_ms
  FROM lonnymq.channel_stats
 WHERE queue OPERATOR(pg_catalog.=) %s::pg_catalog.text
 ORDER BY channel NULLS FIRST
"""

MESSAGE_ARCHIVE = """
SELECT id, message_id, queue, channel, content, state, num_attempts, outcome, error,
       created_at, archived_at
  FROM lonnymq.message_archive
 WHERE queue OPERATOR(pg_catalog.=) %s::pg_catalog.text
   AND (%s::pg_catalog.text IS NULL OR outcome OPERATOR(pg_catalog.=) %s::pg_catalog.text)
 ORDER BY id DESC
 LIMIT %s::pg_catalog.int4
"""


def batch_arrays(
    count: int,
    channel: str | None,
    channels: list[str | None] | None,
    dequeue_ats: list[datetime | None] | None,
    dedup_keys: list[str | None] | None,
) -> tuple[list[str | None], list[datetime | None] | None, list[str | None] | None]:
    """Validate the parallel arrays of a batch create: each must match the contents."""
    if channels is not None and channel is not None:
        raise ValueError("pass either channel= (for every message) or channels=, not both")
    resolved = channels if channels is not None else [channel] * count
    for name, values in (
        ("channels", resolved),
        ("dequeue_ats", dequeue_ats),
        ("dedup_keys", dedup_keys),
    ):
        if values is not None and len(values) != count:
            raise ValueError(f"{name} has {len(values)} elements, contents has {count}")
    return resolved, dequeue_ats, dedup_keys
