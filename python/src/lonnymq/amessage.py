"""``AsyncMessage``: a delivered message with its actions.

The synchronous Message (message.py) is generated from the asyncio AsyncMessage
(amessage.py) by python/tools/async_to_sync.py.

Each action passes ``num_attempts`` back as the fencing token and returns the SQL status
(``completed``, ``deferred``, ``extended``, ``failed``, ``not_found`` or ``state_invalid``).
A message remembers the settles made through it that took effect, so a worker knows when
its handler settled the message itself (for example inside its own transaction).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from psycopg import AsyncConnection

from ._content import Content
from ._settle import APPLIED
from .models import MessageData

if TYPE_CHECKING:
    from .aqueue import AsyncQueue


def _remember(settles: list[str], status: str) -> str:
    if status in APPLIED:
        settles.append(status)
    return status


@dataclass(frozen=True)
class AsyncMessage(MessageData):
    """A message delivered by ``AsyncQueue.dequeue``; ``conn=`` joins the caller's transaction."""

    _queue: AsyncQueue = field(repr=False, compare=False)
    # Statuses of settles made through this object that took effect.
    _settles: list[str] = field(default_factory=list, repr=False, compare=False)

    def _settled(self, status: str) -> str:
        return _remember(self._settles, status)

    async def complete(self, *, conn: AsyncConnection[Any] | None = None) -> str:
        return self._settled(await self._queue.complete(self.id, self.num_attempts, conn=conn))

    async def defer(
        self,
        *,
        dequeue_at: datetime | None = None,
        delay_ms: int = 0,
        state: Content | None = None,
        conn: AsyncConnection[Any] | None = None,
    ) -> str:
        return self._settled(
            await self._queue.defer(
                self.id,
                self.num_attempts,
                dequeue_at=dequeue_at,
                delay_ms=delay_ms,
                state=state,
                conn=conn,
            )
        )

    async def heartbeat(self, lock_ms: int, *, conn: AsyncConnection[Any] | None = None) -> str:
        return await self._queue.heartbeat(self.id, self.num_attempts, lock_ms, conn=conn)

    async def fail(
        self, error: str | None = None, *, conn: AsyncConnection[Any] | None = None
    ) -> str:
        return self._settled(await self._queue.fail(self.id, self.num_attempts, error, conn=conn))
