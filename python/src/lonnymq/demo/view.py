"""Drawing the demo: a live table redrawn in place on a terminal, or a plain progress line
every few seconds when stdout is not a terminal (CI logs, pipes)."""

from __future__ import annotations

import sys
from typing import TextIO

from .recorder import Recorder
from .sampler import Samples
from .scenario import TENANTS

BAR = 20
LINE_EVERY_S = 2.0


def bar(done: int, total: int, width: int = BAR) -> str:
    filled = int(width * done / total) if total else width
    return "[" + "#" * filled + "." * (width - filled) + "]"


def frame(title: str, recorder: Recorder, samples: Samples, recent: dict[str, int]) -> list[str]:
    busiest = max(recent.values(), default=0) or 1
    lines = [
        f"{title} — {recorder.elapsed():5.1f}s",
        f"database: {samples.ready} ready, {samples.scheduled} scheduled, "
        f"{samples.locked} locked   ({samples.count} samples)",
        "",
        f"{'tenant':<10} {'limit':<17} {'progress':<22} {'done':>9} {'now':>4} {'peak':>4} "
        f"{'retried':>7} {'avg wait':>8}  share of deliveries",
    ]
    for tenant in TENANTS:
        record = recorder.tenants[tenant.name]
        share = "#" * round(10 * recent.get(tenant.name, 0) / busiest)
        lines.append(
            f"{tenant.name:<10} {tenant.limit_text:<17} {bar(record.done, tenant.jobs):<22} "
            f"{record.done:>4}/{tenant.jobs:<4} {record.in_flight:>4} {record.max_in_flight:>4} "
            f"{record.transient_failures:>7} {record.avg_wait_s:>7.2f}s  {share}"
        )
    return lines


def progress_line(recorder: Recorder, samples: Samples) -> str:
    parts = " ".join(f"{t.name} {recorder.tenants[t.name].done}/{t.jobs}" for t in TENANTS)
    return f"[{recorder.elapsed():5.1f}s] {parts} | ready {samples.ready} locked {samples.locked}"


class Screen:
    """Redraws the frame in place (ANSI) on a TTY; prints progress lines otherwise."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.tty = self.stream.isatty()
        self._drawn = 0
        self._last_line = -LINE_EVERY_S
        self._last_text = ""

    def show(
        self,
        title: str,
        recorder: Recorder,
        samples: Samples,
        recent: dict[str, int],
        final: bool = False,
    ) -> None:
        if self.tty:
            lines = frame(title, recorder, samples, recent)
            # Move up over the previous frame and overwrite it line by line.
            up = f"\x1b[{self._drawn}F" if self._drawn else ""
            self.stream.write(up + "".join(f"\x1b[2K{line}\n" for line in lines))
            self._drawn = len(lines)
        elif final or recorder.elapsed() - self._last_line >= LINE_EVERY_S:
            line = progress_line(recorder, samples)
            # The final line may coincide with a periodic one: never print a state twice.
            if line.split("]", 1)[1] != self._last_text.split("]", 1)[-1]:
                self.stream.write(line + "\n")
            self._last_line = recorder.elapsed()
            self._last_text = line
        self.stream.flush()

    def write(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()
