"""Fault 1: worker processes are SIGKILLed again and again while they work, and restarted.

Real worker processes (two ``Worker``, two ``AsyncWorker``) drain N_MESSAGES messages on 50
channels with ``max_concurrency`` 2 (five also with ``max_attempts`` 1) while one of them is
killed with SIGKILL and restarted each time about 1/25 of the messages more were settled
(about 25 kills, however fast the machine drains them). Every channel retains completed messages, so
the archive is the exact record of what was settled: each message must end there exactly
once (``completed``, or ``dead`` only in a channel that asked for it), nothing may stay live,
``verify()`` must be empty, and a sampler reading ``channel_stats`` throughout must never
see a channel with more locked messages than its limit.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable

from lonnymq import Queue

from .conftest import (
    LimitSampler,
    WorkerProcess,
    archive_outcomes,
    archived_count,
    live_ids,
    verify,
    wait_for,
)

# 20k messages (a 2-core machine drains them in 10-110 s). LONNYMQ_KILL_MESSAGES overrides.
N_MESSAGES = int(os.environ.get("LONNYMQ_KILL_MESSAGES", "20000"))
N_CHANNELS = 50
LIMIT = 2
# max_attempts 1: a message in hand when its worker is killed is dead-lettered.
DEAD_LETTER_CHANNELS = {f"c{n:02d}" for n in range(45, 50)}
N_WORKERS = 4
CONCURRENCY = 6
LOCK_MS = 1500
# A kill each time this many more messages were settled (times 0.5-1.5): kills follow the
# work, not the clock, so a faster drain cannot leave the run with too few of them (a
# kill every ~2 s gave 4 kills once the Worker drained 20k in ~8 s).
KILL_EVERY_SETTLED = N_MESSAGES // 25


def test_sigkilled_workers_lose_nothing_and_never_exceed_limits(
    shared_db: str, queue_name: str, workers: Callable[..., WorkerProcess]
) -> None:
    channels = [f"c{n:02d}" for n in range(N_CHANNELS)]
    created: set[int] = set()
    with Queue(shared_db, queue_name, pool_size=4) as queue:
        for c in channels:
            queue.channel_set(
                c,
                max_concurrency=LIMIT,
                retain_completed=True,
                max_attempts=1 if c in DEAD_LETTER_CHANNELS else None,
            )

        # Half the messages exist before the workers start, half arrive while they run.
        def produce(count: int) -> None:
            for start in range(0, count, 500):
                contents = [
                    json.dumps({"sleep_ms": random.choice((0, 0, 1, 2, 5))})
                    for _ in range(min(500, count - start))
                ]
                chans = [channels[(start + i) % N_CHANNELS] for i in range(len(contents))]
                results = queue.create_batch(contents, channels=chans)
                assert {r.status for r in results} == {"created"}
                created.update(r.id for r in results if r.id is not None)

        produce(N_MESSAGES // 2)
        sampler = LimitSampler(shared_db, queue_name, period=0.05)
        sampler.start()
        procs = [
            workers(shared_db, queue_name, CONCURRENCY, LOCK_MS, "async" if n % 2 else "sync")
            for n in range(N_WORKERS)
        ]
        producer = threading.Thread(target=produce, args=(N_MESSAGES - N_MESSAGES // 2,))
        producer.start()

        kills = 0
        deadline = time.monotonic() + 180

        def settled() -> int:
            return archived_count(shared_db, queue_name)

        next_kill = KILL_EVERY_SETTLED
        while time.monotonic() < deadline:
            done = settled()
            if not producer.is_alive() and done >= N_MESSAGES:
                break
            if done >= next_kill:
                victim = random.choice(procs)
                victim.kill()
                kills += 1
                victim.start()
                next_kill = done + int(random.uniform(0.5, 1.5) * KILL_EVERY_SETTLED)
            time.sleep(0.1)
        producer.join(30)
        try:
            wait_for(lambda: settled() >= N_MESSAGES, 30, "every message to be settled")
        finally:
            sampler.stop()
            exit_codes = [p.terminate() for p in procs]

        outcomes = archive_outcomes(shared_db, queue_name)
        assert len(created) == N_MESSAGES
        assert kills >= 5, f"only {kills} kills: the run was too short to prove anything"
        # None lost, none settled twice.
        assert set(outcomes) == created
        doubles = {m: o for m, o in outcomes.items() if len(o) > 1}
        assert not doubles, f"settled more than once: {list(doubles.items())[:5]}"
        assert not live_ids(shared_db, queue_name)
        # Dead letters only where a channel asked for them, after exactly max_attempts.
        by_id = {m: o[0] for m, o in outcomes.items()}
        dead = [m for m, (outcome, _) in by_id.items() if outcome == "dead"]
        assert {outcome for outcome, _ in by_id.values()} <= {"completed", "dead"}
        with queue.pool.connection() as conn:
            channel_of: dict[int, str] = dict(
                conn.execute(
                    "SELECT message_id, channel FROM lonnymq.message_archive WHERE queue = %s",
                    (queue_name,),
                ).fetchall()
            )
        assert all(channel_of[m] in DEAD_LETTER_CHANNELS and by_id[m][1] == 1 for m in dead), dead[
            :5
        ]
        assert verify(shared_db) == []
        # The limit held in every sample, and the samples show it was actually reached.
        assert sampler.samples > 50
        assert sampler.violations == [], sampler.violations[:10]
        assert max(sampler.max_locked.values()) == LIMIT
        # Graceful stop at the end still works after all the killing.
        assert exit_codes == [0] * N_WORKERS, [p.log_text()[-2000:] for p in procs]
        print(
            f"\n{N_MESSAGES} messages, {kills} SIGKILLs, {len(dead)} dead-lettered, "
            f"{sampler.samples} samples, max locked {max(sampler.max_locked.values())}"
        )
