"""Typed results returned by Queue and AsyncQueue (one dataclass per SQL result shape)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ._content import decode_json


@dataclass(frozen=True)
class CreateResult:
    """Result of ``message_create``: ``created``, ``deduplicated`` (id of the live duplicate),
    ``dropped`` (channel full, id is None) or ``duplicate_batch``."""

    status: str
    id: int | None


@dataclass(frozen=True)
class CompleteResult:
    """One row of ``message_complete_batch``."""

    id: int
    status: str


@dataclass(frozen=True)
class RequeueResult:
    """Result of a bulk ``archive_requeue``: messages re-created, and those left archived
    because their channel was full."""

    requeued: int
    dropped: int


@dataclass(frozen=True)
class Channel:
    """A channel's policy as stored by ``channel_set`` (NULL limits mean unlimited)."""

    queue: str
    channel: str
    max_concurrency: int | None
    release_interval_ms: int
    max_size: int | None
    max_attempts: int | None
    retain_completed: bool


@dataclass(frozen=True)
class ChannelStats:
    """One row of the ``lonnymq.channel_stats`` view (channel None: channel-less messages)."""

    queue: str
    channel: str | None
    ready: int
    scheduled: int
    locked: int
    max_concurrency: int | None
    release_interval_ms: int | None
    max_size: int | None
    max_attempts: int | None
    oldest_ready_ms: int | None


@dataclass(frozen=True)
class QueueStats:
    """One row of the ``lonnymq.queue_stats`` view."""

    queue: str
    channels: int
    ready: int
    scheduled: int
    locked: int
    archived: int


@dataclass(frozen=True)
class ArchivedMessage:
    """One row of ``lonnymq.message_archive``: a terminal message kept for inspection."""

    id: int
    message_id: int
    queue: str
    channel: str | None
    content: bytes
    state: bytes | None
    num_attempts: int
    outcome: str
    error: str | None
    created_at: datetime
    archived_at: datetime

    def json(self) -> Any:
        """The content decoded as JSON."""
        return decode_json(self.content)


@dataclass(frozen=True)
class MessageData:
    """What a dequeue delivers; ``Message`` and ``AsyncMessage`` add the actions.

    ``num_attempts`` is the fencing token: it is passed back by every action, so an action
    on a delivery whose lock expired (and was redelivered) is refused with ``state_invalid``.
    """

    id: int
    queue: str
    channel: str | None
    content: bytes
    state: bytes | None
    num_attempts: int
    dequeue_at: datetime
    recovered: bool

    def json(self) -> Any:
        """The content decoded as JSON."""
        return decode_json(self.content)

    def text(self) -> str:
        """The content decoded as UTF-8."""
        return self.content.decode("utf-8")
