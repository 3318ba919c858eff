"""Screenshots of the dashboard's main pages for docs/img (run by scripts/screenshots).

Fills a fresh database with a demo-like queue (six tenants with their policies, work in
flight, a paused tenant, a dead-lettered poison job), serves the dashboard and photographs
each page in headless Chromium, while a worker drains a second queue for the
throughput chart (about a minute) and keeps a periodic message.

    python -m tests.screenshots --dsn ADMIN_DSN --out ../docs/img     (from python/)
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

import psycopg
from psycopg import conninfo, sql

from lonnymq import Message, Queue, Worker
from lonnymq.web import create_app

from .browser import chromium, serve

DATABASE = "lonnymq_screenshots"
TENANTS = {
    "bigcorp": {"backlog": 1200},
    "acme": {"backlog": 40, "max_concurrency": 4},
    "globex": {"backlog": 30, "release_interval_ms": 200},
    "initech": {"backlog": 25, "max_concurrency": 1},
    "umbrella": {"backlog": 20, "max_attempts": 3},
    "hooli": {"backlog": 15},
}


def fill(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute("CREATE EXTENSION lonnymq")
        for name, policy in TENANTS.items():
            limits = {k: v for k, v in policy.items() if k != "backlog"}
            if limits:
                args = sql.SQL(", ").join(
                    sql.SQL("{} => {}").format(sql.Identifier(k), sql.Literal(v))
                    for k, v in limits.items()
                )
                db.execute(
                    sql.SQL("SELECT lonnymq.channel_set('jobs', {}, {})").format(
                        sql.Literal(name), args
                    )
                )
            db.execute(
                "SELECT count(*) FROM lonnymq.message_create_batch('jobs',"
                " array_fill(%s::text, ARRAY[%s]),"
                " ARRAY(SELECT convert_to(json_build_object('tenant', %s::text, 'n', i)::text,"
                "                         'UTF8')"
                "       FROM generate_series(1, %s) i))",
                (name, policy["backlog"], name, policy["backlog"]),
            )
        db.execute(
            "SELECT lonnymq.message_create('jobs', 'umbrella', %s, delay_ms => 600000)",
            (json.dumps({"tenant": "umbrella", "report": "nightly"}).encode(),),
        )
        # Work in flight, then a poison job failed into the archive.
        db.execute("SELECT count(*) FROM lonnymq.message_dequeue('jobs', 600000, 12)")
        db.execute(
            "SELECT lonnymq.message_fail(id, num_attempts, 'KeyError: ''sku''' || chr(10) ||"
            " 'Traceback (most recent call last): ...') FROM lonnymq.messages"
            " WHERE channel = 'umbrella' AND locked_until IS NOT NULL"
        )
        db.execute("SELECT lonnymq.channel_pause('jobs', 'hooli')")
        db.execute(
            "SELECT count(*) FROM lonnymq.message_create_batch('emails',"
            " array_fill(NULL::text, ARRAY[3000]), array_fill('{}'::bytea, ARRAY[3000]))"
        )


def work(dsn: str, seconds: float) -> None:
    """A worker on 'emails' for the throughput chart (one message in 25 fails) and a
    periodic job for the Schedules page."""
    count = [0]

    def send(message: Message) -> None:
        count[0] += 1
        time.sleep(0.04)
        if count[0] % 25 == 0:
            raise RuntimeError("mailbox unavailable")

    with Queue(dsn, "emails") as queue:
        worker = Worker(queue, send, concurrency=2, max_attempts=1, stats_interval_ms=2000)
        worker.every(3_600_000, "digest", lambda m: None)
        threading.Timer(seconds, worker.stop).start()
        worker.run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", required=True, help="an admin DSN of a server with lonnymq")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        name = sql.Identifier(DATABASE)
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(name))
    dsn = conninfo.make_conninfo(args.dsn, dbname=DATABASE)
    fill(dsn)
    args.out.mkdir(parents=True, exist_ok=True)
    pages = {
        "overview": "/",
        "channels": "/channels?queue=jobs",
        "messages": "/messages?queue=jobs&channel=acme",
        "archive": "/archive?queue=jobs",
        "schedules": "/schedules",
    }
    with serve(create_app(dsn, actions=True)) as url, chromium(1280, 760) as browser:
        browser.get(url + "/")  # the overview listens for the worker's reports from now
        time.sleep(1)
        work(dsn, 65)
        for shot, path in pages.items():
            browser.get(url + path)
            time.sleep(0.5)
            browser.save_screenshot(str(args.out / f"{shot}.png"))
            print("wrote", args.out / f"{shot}.png")
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(DATABASE)))


if __name__ == "__main__":
    main()
