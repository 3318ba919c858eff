"""Per-queue throughput from the workers' reports: each report adds what happened since the
same worker's previous one, exactly once, whatever was lost in between."""

from __future__ import annotations

import json

from lonnymq import _report
from lonnymq.web.throughput import (
    BUCKET_S,
    MAX_TOTAL,
    MAX_WORKERS,
    Throughput,
)


def report(worker: str, since: float, completed: int, failed: int = 0, queue: str = "q") -> str:
    return json.dumps(
        {
            "queue": queue,
            "worker": worker,
            "since": since,
            "completed": completed,
            "failed": failed,
            "deferred": 0,
        }
    )


def test_increments_per_worker_exactly_once() -> None:
    t = Throughput(None)
    t.queues = frozenset({"q"})
    start = t._since
    now = 1_000_000 * BUCKET_S  # the start of a bucket
    # A worker running before we listened: its first totals are only a baseline.
    t.record(report("old", start - 60, completed=500), now)
    t.record(report("old", start - 60, completed=510, failed=1), now + 1)
    # A worker started since: all of its totals are new.
    t.record(report("new", start + 1, completed=7), now + 2)
    # A lost notification loses nothing: totals, not increments.
    t.record(report("old", start - 60, completed=530, failed=1), now + 12)
    # Malformed or hostile payloads change nothing.
    for bad in ("", "[]", "{}", '{"queue": 1}', report("x", float("nan"), 5), "null"):
        t.record(bad, now + 13)
    t.record(report("new", start + 1, completed=3), now + 14)  # totals never go back
    charts = t.charts(now + 2 * BUCKET_S)
    assert set(charts) == {"q"}
    q = charts["q"]
    assert (q["completed_total"], q["failed_total"]) == (10 + 7 + 20, 1)
    # The last finished bucket (from now + 10 s) held 20 completions: 2/s.
    assert q["completed_now"] == 20 / BUCKET_S
    assert q["failed_now"] == 0


def test_queues_apart_and_old_buckets_forgotten() -> None:
    t = Throughput(None)
    t.queues = frozenset({"q1", "q2"})
    now = 2_000_000 * BUCKET_S
    t.record(report("a", t._since + 1, completed=4, queue="q1"), now)
    t.record(report("b", t._since + 1, completed=9, queue="q2"), now)
    charts = t.charts(now + BUCKET_S)
    assert (charts["q1"]["completed_total"], charts["q2"]["completed_total"]) == (4, 9)
    # Eleven minutes later the window has moved past them.
    t.record(report("a", t._since + 1, completed=6, queue="q1"), now + 660)
    charts = t.charts(now + 660 + BUCKET_S)
    assert set(charts) == {"q1"} and charts["q1"]["completed_total"] == 2


def test_reporter_sends_new_totals_at_most_once_an_interval() -> None:
    r = _report.Reporter("q", 60_000)
    counts = {"completed": 0, "failed": 0, "deferred": 0, "refused": 0}
    assert r.due(counts, final=True) is None  # nothing new
    counts["completed"] = 3
    assert r.due(counts) is None  # not yet
    sent = r.due(counts, final=True)
    assert sent is not None and json.loads(sent)["completed"] == 3
    assert json.loads(sent)["queue"] == "q"
    assert r.due(counts, final=True) is None  # already sent
    assert _report.Reporter("q", None).due(counts, final=True) is None  # reports off


def test_forged_reports_are_clamped_and_bounded() -> None:
    t = Throughput(None)
    t.queues = frozenset({"q"})
    now = 3_000_000 * BUCKET_S
    huge = '{"queue": "q", "worker": "w", "since": %s, "completed": %s, "failed": 0}'
    t.record(huge % (t._since + 1, "9" * 400), now)
    t.record(huge.replace('"failed": 0', '"failed": 1e400') % (t._since + 1, 1), now)
    t.record(report("v", t._since + 1, completed=-5), now)
    t.record("[" * 5000 + "]" * 5000, now)  # nested too deep to parse: ignored
    charts = t.charts(now + BUCKET_S)  # the sums stay floats: no OverflowError
    assert charts["q"]["completed_total"] == MAX_TOTAL
    # Reports on queues the overview did not list are ignored: nothing is tracked for them.
    for i in range(20_000):
        t.record(report(f"w{i}", t._since + 1, completed=1, queue=f"made-up-{i}"), now)
    assert set(t._buckets) == {"q"} and set(t._workers) == {"q"}
    assert set(t.charts(now + BUCKET_S)) == {"q"}


def test_a_flood_of_workers_on_one_queue_leaves_the_others_alone() -> None:
    t = Throughput(None)
    t.queues = frozenset({"flooded", "other"})
    now = 4_000_000 * BUCKET_S
    for i in range(MAX_WORKERS * 10):
        t.record(report(f"forged-{i}", t._since + 1, completed=1, queue="flooded"), now)
    # A real worker starting on another queue is still heard.
    t.record(report("real", t._since + 1, completed=3, queue="other"), now + 1)
    charts = t.charts(now + BUCKET_S)
    assert "other" in charts and charts["other"]["completed_total"] == 3
    assert len(t._workers["flooded"]) == MAX_WORKERS  # capped
