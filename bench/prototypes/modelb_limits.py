#!/usr/bin/env python3
"""Model B prototype (issue 37): fairness and limits under concurrent consumers.

Runs against database BENCH_DB (default "bench") on BENCH_PGPORT, with this checkout's
lonnymq installed:
  fairness     bench/fairness.py's workload 6: 1 big channel (backlog first) and 99 small,
               8 consumers, Jain's index over the first 9,900 deliveries (scale: --scale)
  rate limits  bench/fairness.py's rate-limit check: 4 channels with release_interval_ms
               100 ms, 4 unlimited, no gap shorter than the interval
  concurrency  4 channels with max_concurrency 2 and 4 unlimited, all backlogged; 8
               consumers dequeue, hold 0-3 ms, then complete, defer (1 in 5) or let the
               lock expire (1 in 50, lock 200 ms); a monitor samples the committed
               locked messages per channel as fast as it can: never above 2
Every part ends with lonnymq.verify() empty and no message lost.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("BENCH_PGPORT", "26080")
import common  # noqa: E402
import fairness  # noqa: E402

DB = os.environ.get("BENCH_DB", "bench")
common.DATABASE = DB
common.DSN = f"host={common.HOST} port={common.PORT} user=postgres dbname={DB}"


def reset(conn) -> None:
    conn.execute("TRUNCATE lonnymq.message, lonnymq.channel, lonnymq.channel_turn, lonnymq.channel_hint, "
                 "lonnymq.channel_admission, lonnymq.queue, lonnymq.message_archive")


fairness.reset_lonnymq = reset


def concurrency(seconds: float, limit: int) -> dict:
    limited = [f"mc{i}" for i in range(4)]
    with common.connect() as conn:
        reset(conn)
        for ch in limited:
            conn.execute("SELECT lonnymq.channel_set('conc', %s, max_concurrency => %s)", (ch, limit))
            fairness._create(conn, "conc", ch, 3000)
        for i in range(4):
            fairness._create(conn, "conc", f"free{i}", 3000)
        before = common.scalar(conn, "SELECT count(*) FROM lonnymq.message")
    stop = time.monotonic() + seconds
    samples: list[int] = []
    stats = Counter()
    lock = threading.Lock()

    def monitor() -> None:
        with common.connect() as conn:
            while time.monotonic() < stop:
                n = common.scalar(
                    conn,
                    "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM lonnymq.message m "
                    "JOIN lonnymq.channel c ON c.id = m.channel_id "
                    "WHERE c.queue_id = (SELECT id FROM lonnymq.queue WHERE name = 'conc') "
                    "AND c.max_concurrency IS NOT NULL AND m.locked_until_ms IS NOT NULL GROUP BY c.id) x")
                samples.append(n)

    def consumer(seed: int) -> None:
        rnd = random.Random(seed)
        with common.connect() as conn:
            while time.monotonic() < stop:
                rows = conn.execute(
                    "SELECT id, channel, num_attempts FROM lonnymq.message_dequeue('conc', 200, %s)",
                    (rnd.choice([1, 1, 1, 3]),)).fetchall()
                if not rows:
                    time.sleep(0.002)
                    continue
                time.sleep(rnd.random() * 0.003)
                for mid, channel, att in rows:
                    r = rnd.random()
                    if r < 0.02:
                        what = "expire"          # worker "died": the lock runs out
                    elif r < 0.22:
                        what = common.scalar(conn, "SELECT lonnymq.message_defer(%s, %s)", (mid, att))
                    else:
                        what = common.scalar(conn, "SELECT lonnymq.message_complete(%s, %s)", (mid, att))
                    with lock:
                        stats[(channel in limited, what)] += 1

    threads = [threading.Thread(target=monitor)] + [
        threading.Thread(target=consumer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(0.25)  # the expired locks run out
    with common.connect() as conn:
        # drain: every message left can still be dequeued and completed
        while True:
            rows = conn.execute("SELECT id, num_attempts FROM lonnymq.message_dequeue('conc', 30000, 100)").fetchall()
            if not rows:
                break
            for mid, att in rows:
                conn.execute("SELECT lonnymq.message_complete(%s, %s)", (mid, att))
        left = common.scalar(conn, "SELECT count(*) FROM lonnymq.message")
        problems = [r[0] for r in conn.execute("SELECT * FROM lonnymq.verify()").fetchall()]
    completed = sum(v for (lim, what), v in stats.items() if what == "completed")
    result = {
        "max_concurrency": limit,
        "samples": len(samples),
        "max_locked_seen": max(samples, default=0),
        "violations": sum(1 for s in samples if s > limit),
        "outcomes": {f"{'limited' if k[0] else 'free'}:{k[1]}": v for k, v in stats.items()},
        "created": before,
        "left_after_drain": left,
        "verify": problems,
    }
    common.log(f"  concurrency: max locked seen {result['max_locked_seen']} (limit {limit}) over "
               f"{len(samples)} samples, {result['violations']} violations; left {left}; verify {problems}")
    del completed
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "results" / "modelb-limits.json"))
    a = ap.parse_args()
    out = {
        "fairness": fairness.fairness(int(100_000 * a.scale), 99, 100, 9900),
        "rate_limits": fairness.rate_limits(100, a.seconds / 2),
        "concurrency": concurrency(a.seconds, 2),
    }
    with common.connect() as conn:
        out["verify"] = [r[0] for r in conn.execute("SELECT * FROM lonnymq.verify()").fetchall()]
    Path(a.out).write_text(json.dumps(out, indent=1, default=str))
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if not isinstance(vv, list) or len(vv) < 10}
                      if isinstance(v, dict) else v for k, v in out.items()}, indent=1, default=str))


if __name__ == "__main__":
    main()
