"""``lonnymq tail``: follow queue events (NOTIFY lonnymq and lonnymq_dead) as lines."""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime
from typing import Any

import psycopg

from .. import _sql
from .._announce import Announcements
from ._text import printable

CHANNELS = ("lonnymq", "lonnymq_dead")


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser("tail", help="follow queue events")
    parser.add_argument("--queue", help="only events of this queue")
    parser.add_argument("--count", type=int, help="exit after this many events")
    parser.add_argument("--timeout", type=float, help="exit after this many seconds")
    parser.set_defaults(run=run)


# How often the list of queues is read again, to announce queues created since.
LIST_EVERY_S = 5.0


def announce(waiter: psycopg.Connection[Any], book: Announcements, queues_now: list[str]) -> None:
    """Producers send 'lonnymq' events only while a consumer waits (lonnymq.wait_begin): tail
    counts as one, for its queue or every queue, on its own autocommit connection. New
    queues are announced before gone ones end; one whose announcement may not have taken
    is announced again (see _announce)."""
    plan = book.plan(queues_now, time.monotonic())
    if not plan:
        return
    hints = waiter.execute(_sql.ANNOUNCE, (plan.begin,)).fetchall() if plan.begin else []
    if plan.ended:
        waiter.execute(_sql.WITHDRAW, (plan.ended,))
    book.record(plan, hints, time.monotonic())


def queues(conn: psycopg.Connection[Any]) -> list[str]:
    return [r[0] for r in conn.execute(_sql.QUEUE_NAMES).fetchall()]


def run(dsn: str, args: argparse.Namespace) -> int:
    seen = 0
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    book = Announcements()
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        psycopg.connect(dsn, autocommit=True) as waiter,
    ):
        for channel in CHANNELS:
            conn.execute("LISTEN " + channel)
        wanted = [args.queue] if args.queue else queues(waiter)
        listed = time.monotonic()
        announce(waiter, book, wanted)
        # Tell a reader (a test or a script) that events from now on will be shown.
        print(f"listening on {', '.join(CHANNELS)}", flush=True)
        while deadline is None or time.monotonic() < deadline:
            if not args.queue and time.monotonic() - listed > LIST_EVERY_S:
                wanted, listed = queues(waiter), time.monotonic()
            announce(waiter, book, wanted)
            wait = min(
                1.0, *(t - time.monotonic() for t in (deadline, book.next_due()) if t is not None)
            )
            for notify in conn.notifies(timeout=max(wait, 0)):
                line = format_event(notify.channel, notify.payload, args.queue)
                if line is None:
                    continue
                print(line, flush=True)
                seen += 1
                if args.count is not None and seen >= args.count:
                    return 0
    return 0


def format_event(channel: str, payload: str, only_queue: str | None) -> str | None:
    """``12:00:01.123  created  queue=emails`` (None when filtered out). Any role may
    NOTIFY these channels: every part of the payload is escaped (see _text)."""
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):  # RecursionError: nested too deep
        data = {"payload": payload}
    if not isinstance(data, dict):
        data = {"payload": data}
    if only_queue is not None and data.get("queue") != only_queue:
        return None
    stamp = datetime.now().strftime("%H:%M:%S.%f")[:-3]
    event = printable(data.pop("event", channel))
    details = "  ".join(f"{printable(k)}={printable(v)}" for k, v in sorted(data.items()))
    return f"{stamp}  {event:<9}  {details}"
