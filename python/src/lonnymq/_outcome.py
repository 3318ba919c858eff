"""What a worker does with a message once its handler returned or raised.

Shared by ``Worker`` and ``AsyncWorker`` so both settle messages by the same rules.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Literal

from ._backoff import Backoff
from ._content import encode_optional
from .errors import Retry

# The archive keeps the error text; a whole traceback is rarely worth more than its tail.
MAX_ERROR_CHARS = 4000


@dataclass(frozen=True)
class Outcome:
    action: Literal["complete", "defer", "fail"]
    delay_ms: int = 0
    state: bytes | None = None
    error: str | None = None


COMPLETE = Outcome("complete")


def error_text(exc: BaseException) -> str:
    """``Type: message`` followed by the traceback, truncated from the front."""
    text = "".join(traceback.format_exception(exc)).strip()
    headline = f"{type(exc).__name__}: {exc}"
    if len(text) > MAX_ERROR_CHARS:
        text = "..." + text[-MAX_ERROR_CHARS:]
    return f"{headline}\n{text}"


def for_exception(
    exc: BaseException, num_attempts: int, max_attempts: int | None, backoff: Backoff
) -> Outcome:
    """Retry → defer as asked; anything else → backoff, or fail once attempts are used up."""
    if isinstance(exc, Retry):
        return Outcome("defer", delay_ms=exc.delay_ms, state=encode_optional(exc.state))
    if max_attempts is not None and num_attempts >= max_attempts:
        return Outcome("fail", error=error_text(exc))
    return Outcome("defer", delay_ms=backoff.delay_ms(num_attempts))
