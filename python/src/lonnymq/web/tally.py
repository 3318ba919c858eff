"""Counters of what arrives in the archive (dead letters, failures, retained completions),
by queue and outcome, since the app started: the dashboard's ``lonnymq_dead_letters_total``.

Dead-lettering happens inside ``message_dequeue``, so no worker sees it; the archive row
it leaves is the one trace. Each refresh reads only the archive rows it has not counted,
through the primary key: ids above the highest seen, and the ids below it not seen yet.
Ids are drawn before commit, so a row can become visible after a higher one: a missing id
stays looked for until every transaction that was running when it was found has ended
(the snapshot's xmax then lies at or below the oldest running transaction); after that it
belongs to a rolled-back transaction, or to a row removed again before it was read (an
archive_requeue or archive_prune within one refresh), which is not counted.
"""

from __future__ import annotations

from collections import Counter

from .db import Database

# Rows read per refresh at most: a burst is caught up over the next refreshes.
MAX_ROWS = 100_000
# Missing ids remembered at most (lowest dropped first): a transaction that holds its
# xid for hours must not grow this without bound.
MAX_GAPS = 10_000

QUERY = """
SELECT pg_catalog.pg_snapshot_xmin(s.snap)::text::bigint AS xmin,
       pg_catalog.pg_snapshot_xmax(s.snap)::text::bigint AS xmax,
       a.id, a.queue, a.outcome
FROM (SELECT pg_catalog.pg_current_snapshot() AS snap) s
LEFT JOIN LATERAL (
    SELECT r.id, r.queue, r.outcome FROM lonnymq.message_archive r
    WHERE r.id > %s OR r.id = ANY (%s)
    ORDER BY r.id LIMIT %s
) a ON true
"""


class ArchiveTally:
    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()  # (queue, outcome) -> rows
        self._top: int | None = None  # highest id counted; None before the first read
        self._gaps: dict[int, int] = {}  # id not seen yet -> xmax of the snapshot that found it

    async def refresh(self, db: Database) -> None:
        if self._top is None:
            # Counting starts now: what is archived already is not an event of this run.
            self._top = int(
                await db.value("SELECT coalesce(max(id), 0) FROM lonnymq.message_archive")
            )
            return
        rows = await db.rows(QUERY, (self._top, list(self._gaps), MAX_ROWS))
        top = self._top
        for row in rows:
            if row["id"] is None:
                continue  # nothing new: the row only carries the snapshot
            if row["id"] in self._gaps or row["id"] > self._top:
                self._gaps.pop(row["id"], None)
                self.counts[row["queue"], row["outcome"]] += 1
            if row["id"] > top:
                first = max(top + 1, row["id"] - MAX_GAPS)  # a jump of the sequence
                self._gaps.update((i, row["xmax"]) for i in range(first, row["id"]))
                top = row["id"]
        self._top = top
        xmin = rows[0]["xmin"]
        # Every transaction that could still commit such an id has ended by now.
        self._gaps = {i: h for i, h in self._gaps.items() if h > xmin}
        if len(self._gaps) > MAX_GAPS:
            self._gaps = dict(sorted(self._gaps.items())[-MAX_GAPS:])
