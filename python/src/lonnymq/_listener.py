"""A background thread that LISTENs for ``lonnymq`` notifications and wakes a worker.

Notifications are only a latency optimisation: the worker also sleeps with a timeout taken
from ``wait_hint_ms``, so a lost connection or a missed NOTIFY delays work, never loses it.
"""

from __future__ import annotations

import json
import logging
import threading

import psycopg

from . import _timing

log = logging.getLogger("lonnymq.worker")

NOTIFY_CHANNEL = "lonnymq"

# How often the thread re-checks whether it should stop while no notification arrives.
POLL_STOP_S = 0.5


def concerns(payload: str, queue: str) -> bool:
    """Whether a NOTIFY payload is about ``queue`` (an unreadable payload wakes anyway)."""
    try:
        return bool(json.loads(payload).get("queue") == queue)
    except (ValueError, AttributeError):
        return True


class Listener(threading.Thread):
    def __init__(self, conninfo: str, queue: str, wake: threading.Event) -> None:
        super().__init__(name=f"lonnymq-listen-{queue}", daemon=True)
        self._conninfo = conninfo
        self._queue = queue
        self._wake = wake
        self._stopping = threading.Event()
        self._listened = False  # whether the current connection got as far as LISTEN
        self.ready = threading.Event()

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        pause_s = 0.0  # before reconnecting: none after a connection that listened
        while not self._stopping.is_set():
            self._listened = False
            try:
                self._listen()
            except psycopg.Error as exc:
                log.warning("LISTEN connection lost (%s); relying on timed wake-ups", exc)
                self._wake.set()
                if self._listened:
                    pause_s = 0.0
                self._stopping.wait(pause_s)
                pause_s = _timing.next_error_pause_s(pause_s)

    def _listen(self) -> None:
        with psycopg.connect(self._conninfo, autocommit=True) as conn:
            conn.execute("LISTEN " + NOTIFY_CHANNEL)
            self._listened = True
            self.ready.set()
            # Something may have been created while we were (re)connecting.
            self._wake.set()
            while not self._stopping.is_set():
                for notify in conn.notifies(timeout=POLL_STOP_S):
                    if concerns(notify.payload, self._queue):
                        self._wake.set()
