"""A dependency-free progress bar: redrawn in place on a terminal, plain lines otherwise
(so logs and CI output stay readable)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

WIDTH = 30
# Without a terminal, print a line at most this often.
LINE_INTERVAL_S = 2.0


class Progress:
    def __init__(self, total: int | None, label: str, stream: TextIO | None = None) -> None:
        self.total = total
        self.label = label
        # Looked up now, not at import, so a redirected sys.stderr is honoured.
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.started = time.monotonic()
        self._tty = self.stream.isatty()
        self._last_line = 0.0

    def advance(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if self._tty:
            self.stream.write("\r" + self._render(now))
            self.stream.flush()
        elif now - self._last_line >= LINE_INTERVAL_S:
            self._last_line = now
            self.stream.write(self._render(now) + "\n")
            self.stream.flush()

    def finish(self) -> None:
        # On a terminal, overwrite the bar one last time; elsewhere, a closing line.
        prefix = "\r" if self._tty else ""
        self.stream.write(prefix + self._render(time.monotonic()) + "\n")
        self.stream.flush()

    def _render(self, now: float) -> str:
        elapsed = max(now - self.started, 1e-6)
        rate = f"{self.done / elapsed:,.0f}/s"
        if not self.total:
            return f"{self.label}: {self.done:,} {rate}"
        share = min(self.done / self.total, 1.0)
        bar = "#" * int(share * WIDTH) + "." * (WIDTH - int(share * WIDTH))
        return f"{self.label} [{bar}] {self.done:,}/{self.total:,} {share:4.0%} {rate}"
