"""Fault 2: the database crashes (``pg_ctl stop -m immediate``) in the middle of producing
and consuming, twice, on a private cluster.

A producer thread (one ``Queue``, one create per transaction) records every id whose create
returned; three worker processes (two ``Worker``, one ``AsyncWorker``) consume. Channels
retain completed messages, so a complete that committed is a row in the archive. After each restart:

- every create that returned before the crash is completed (archived) or still queued;
- a batch create whose answer the crash cut off, retried with its idempotency key, is
  created exactly once (all of it or none of it before the retry);
- nothing seen completed before a crash is live again (no resurrection), and nothing is
  settled twice;
- the same worker processes and the same producer ``Queue`` carry on by themselves (no
  restart by the test): work created and completed after the last crash proves it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import psycopg

from lonnymq import Queue

from .conftest import (
    LimitSampler,
    OwnCluster,
    WorkerProcess,
    archive_outcomes,
    live_ids,
    recreate_database,
    verify,
    wait_for,
)

CHANNELS = [f"t{n:02d}" for n in range(20)]
LIMIT = 2


class Producer(threading.Thread):
    """Creates messages until stopped and survives outages: single creates (one transaction
    each) alternate with batches of 5 under an idempotency key. A batch whose answer was
    lost is retried with the same key until it gets one, so every batch ends known."""

    def __init__(self, queue: Queue) -> None:
        super().__init__(daemon=True, name="producer")
        self.queue = queue
        self.acked: list[int] = []  # creates that returned: committed
        self.in_doubt = 0  # single creates that raised: may or may not have committed
        self.batches_resolved = (
            0  # batch retries answered duplicate_batch: the lost answer was a commit
        )
        self._stop_event = threading.Event()

    def run(self) -> None:
        n = 0
        while not self._stop_event.is_set():
            n += 1
            channel = CHANNELS[n % len(CHANNELS)]
            if n % 2:
                try:
                    result = self.queue.create(json.dumps({"sleep_ms": n % 4}), channel=channel)
                except psycopg.Error:
                    self.in_doubt += 1
                    self._stop_event.wait(0.1)
                    continue
                assert result.status == "created" and result.id is not None
                self.acked.append(result.id)
            else:
                retried = False
                while True:
                    try:
                        results = self.queue.create_batch(
                            [json.dumps({"sleep_ms": 1})] * 5,
                            channel=channel,
                            idempotency_key=f"batch-{n}",
                        )
                        break
                    except psycopg.Error:
                        retried = True
                        time.sleep(0.1)  # even when stopping: the batch must end known
                statuses = {r.status for r in results}
                assert statuses in ({"created"}, {"duplicate_batch"}), statuses
                if statuses == {"duplicate_batch"}:
                    assert retried
                    self.batches_resolved += 1
                assert all(r.id is not None for r in results)
                self.acked.extend(r.id for r in results if r.id is not None)
            self._stop_event.wait(0.004)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(60)


def completed_ids(dsn: str, queue: str) -> set[int]:
    return {
        m for m, o in archive_outcomes(dsn, queue).items() if any(x == "completed" for x, _ in o)
    }


def completed_and_live(dsn: str, queue: str) -> tuple[set[int], set[int]]:
    """Both from one snapshot: read apart, a message completed between the two reads (workers
    keep working, and flush what the crash held back as soon as they reconnect) would show
    in neither."""
    with psycopg.connect(dsn) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        completed = {
            r[0]
            for r in conn.execute(
                "SELECT message_id FROM lonnymq.message_archive "
                "WHERE queue = %s AND outcome = 'completed'",
                (queue,),
            )
        }
        live = {
            r[0] for r in conn.execute("SELECT id FROM lonnymq.messages WHERE queue = %s", (queue,))
        }
        conn.rollback()
    return completed, live


def wait_until_up(dsn: str) -> None:
    def up() -> bool:
        try:
            with psycopg.connect(dsn, connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    wait_for(up, 60, "the restarted server to accept connections", every=0.2)


def test_immediate_shutdown_loses_no_committed_work(
    own_cluster: OwnCluster, queue_name: str, workers: Callable[..., WorkerProcess]
) -> None:
    dsn = recreate_database(own_cluster.admin_dsn, "lonnymq_rel_crash")
    with Queue(dsn, queue_name, pool_size=3) as queue:
        for c in CHANNELS:
            queue.channel_set(c, max_concurrency=LIMIT, retain_completed=True)
        sampler = LimitSampler(dsn, queue_name)
        sampler.start()
        procs = [workers(dsn, queue_name, 4, 2000, mode) for mode in ("sync", "sync", "async")]
        pids = [p.pid for p in procs]
        producer = Producer(queue)
        producer.start()

        for round_number in (1, 2):
            time.sleep(3)
            wait_for(lambda: completed_ids(dsn, queue_name), 30, "the first completions")
            before = completed_ids(dsn, queue_name)
            acked_before = list(producer.acked)
            own_cluster.crash()
            time.sleep(1)
            own_cluster.start()
            wait_until_up(dsn)
            after, live = completed_and_live(dsn, queue_name)
            # Durable: what was completed stays completed, and never comes back to life.
            assert before <= after, (
                f"round {round_number}: completions lost: {sorted(before - after)[:10]}"
            )
            assert not (after & live), (
                f"round {round_number}: resurrected: {sorted(after & live)[:10]}"
            )
            # Every create that returned is still there, one way or the other.
            missing = set(acked_before) - after - live
            assert not missing, (
                f"round {round_number}: committed creates lost: {sorted(missing)[:10]}"
            )

        # Carry on after the last restart: producers and workers reconnect by themselves.
        acked_at_restart = len(producer.acked)
        done_at_restart = len(completed_ids(dsn, queue_name))
        wait_for(
            lambda: len(producer.acked) > acked_at_restart + 50,
            40,
            "the producer to create again after the restart",
        )
        producer.stop()
        acked = set(producer.acked)
        assert len(acked) == len(producer.acked), "an id was acknowledged twice"
        try:
            wait_for(
                lambda: acked <= completed_ids(dsn, queue_name),
                60,
                "the workers to complete every acknowledged create",
            )
        finally:
            sampler.stop()
        assert all(p.alive() for p in procs), [p.log_text()[-3000:] for p in procs]
        assert [p.pid for p in procs] == pids and all(p.starts == 1 for p in procs)
        outcomes = archive_outcomes(dsn, queue_name)
        assert len(outcomes) > done_at_restart
        doubles = {m: o for m, o in outcomes.items() if len(o) > 1}
        assert not doubles, f"settled more than once: {list(doubles.items())[:5]}"
        # Nothing invented: everything archived or live was created by the producer
        # (acknowledged, or in doubt because the crash cut off the answer).
        extra = (set(outcomes) | live_ids(dsn, queue_name)) - acked
        assert len(extra) <= producer.in_doubt
        assert verify(dsn) == []
        assert sampler.violations == [], sampler.violations[:10]
        exit_codes = [p.terminate() for p in procs]
        assert exit_codes == [0, 0, 0]
        print(
            f"\n{len(acked)} acknowledged creates, {producer.in_doubt} in doubt, "
            f"{producer.batches_resolved} batches resolved by their idempotency key, "
            f"{len(outcomes)} completed, 2 crashes"
        )
