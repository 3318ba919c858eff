"""One consumer process of workload 8 (bench/python_worker.py): the lonnymq Worker, or a
PGMQ consumer written the same way. Runs until SIGTERM, then prints ``handled N``.

Usage: worker_consumer.py SYSTEM DSN QUEUE SLOTS   (SYSTEM: lonnymq or pgmq)

The handler does nothing but count, so the run measures the queue and its client loop.
The PGMQ consumer has the Worker's shape and defaults: one loop fetches as many messages as
there are free slots in one ``pgmq.read`` into a buffer, SLOTS threads run the handler, and
a flusher deletes the finished ones in batches (``pgmq.delete`` of an id array) on the
Worker's own settle buffer (same interval and batch size). It has no heartbeats and no
LISTEN (PGMQ has neither; with the backlog held neither matters).
"""

from __future__ import annotations

import queue as stdqueue
import signal
import sys
import threading
import time
from typing import Any

from psycopg_pool import ConnectionPool

handled = 0
_count = threading.Lock()


def handler(_message: Any) -> None:
    global handled
    with _count:
        handled += 1


def run_lonnymq(dsn: str, name: str, slots: int) -> None:
    import lonnymq
    from lonnymq import Queue, Worker

    with Queue(dsn, name, pool_size=slots + 4) as queue:
        worker = Worker(queue, handler, concurrency=slots, lock_ms=30_000)
        print(f"ready {lonnymq.__file__}", flush=True)  # which client: the driver checks
        worker.run()  # SIGTERM: stop, finish, flush, return


class PgmqConsumer:
    """Fetch / work / flush over PGMQ, in the Worker's shape."""

    VISIBILITY_S = 30  # the Worker's lock_ms
    IDLE_SLEEP_S = 0.02  # the Worker's first retry when nothing was ready

    def __init__(self, dsn: str, name: str, slots: int) -> None:
        from lonnymq._settle import DEFAULT_BATCH_SIZE, DEFAULT_INTERVAL_MS, SettleBuffer

        self.name, self.slots = name, slots
        self.pool = ConnectionPool(dsn, min_size=1, max_size=slots + 4, open=True)
        self.settles: SettleBuffer[int] = SettleBuffer(DEFAULT_INTERVAL_MS, DEFAULT_BATCH_SIZE)
        self.buffer: stdqueue.SimpleQueue[int | None] = stdqueue.SimpleQueue()
        self.lock = threading.Lock()
        self.busy = 0
        self.wake, self.flush_wake = threading.Event(), threading.Event()
        self.stopping, self.closing = threading.Event(), threading.Event()

    def run(self) -> None:
        slots = [threading.Thread(target=self.slot, daemon=True) for _ in range(self.slots)]
        flusher = threading.Thread(target=self.flush_loop, daemon=True)
        for t in [*slots, flusher]:
            t.start()
        while not self.stopping.is_set():
            self.wake.clear()
            with self.lock:
                free = self.slots - self.busy
            if free <= 0:
                self.wake.wait(1.0)
                continue
            with self.pool.connection() as conn:
                rows = conn.execute(
                    "SELECT msg_id, read_ct, message FROM pgmq.read(%s, %s, %s)",
                    (self.name, self.VISIBILITY_S, free),
                ).fetchall()
            if not rows:
                self.wake.wait(self.IDLE_SLEEP_S)
                continue
            with self.lock:
                self.busy += len(rows)
            for row in rows:
                self.buffer.put(row[0])
        while True:  # let the slots finish, as the Worker's drain does
            with self.lock:
                if self.busy == 0:
                    break
            self.wake.wait(0.05)
            self.wake.clear()
        for _ in slots:
            self.buffer.put(None)
        self.closing.set()
        self.flush_wake.set()
        flusher.join()
        self.pool.close()

    def slot(self) -> None:
        from lonnymq._outcome import COMPLETE

        while (msg_id := self.buffer.get()) is not None:
            handler(msg_id)
            with self.lock:
                self.busy -= 1
                self.settles.add(msg_id, COMPLETE, time.monotonic())
            self.flush_wake.set()
            self.wake.set()

    def flush_loop(self) -> None:
        while True:
            self.flush_wake.clear()
            with self.lock:
                wait = self.settles.wait_s(time.monotonic())
                closing = self.closing.is_set()
                batch = self.settles.take() if wait == 0 or (closing and wait is not None) else []
            if batch:
                with self.pool.connection() as conn:
                    conn.execute(
                        "SELECT pgmq.delete(%s, %s::bigint[])",
                        (self.name, [s.message for s in batch]),
                    )
                continue
            if wait is None and closing:
                return
            self.flush_wake.wait(wait)


def main() -> None:
    system, dsn, name, slots = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if system == "lonnymq":
        run_lonnymq(dsn, name, slots)
    else:
        consumer = PgmqConsumer(dsn, name, slots)
        signal.signal(signal.SIGTERM, lambda *_: consumer.stopping.set())
        print(f"ready {__file__}", flush=True)
        consumer.run()
    print(f"handled {handled}", flush=True)


if __name__ == "__main__":
    main()
