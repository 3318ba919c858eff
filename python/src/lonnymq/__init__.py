"""lonnymq: Python client for the multi-tenant message queue inside PostgreSQL.

``Queue``/``AsyncQueue`` mirror the SQL API; ``Worker``/``AsyncWorker`` run handlers with
heartbeats, LISTEN wake-ups, retries and graceful shutdown. See docs/python.md.
"""

from ._backoff import Backoff
from .amessage import AsyncMessage
from .aqueue import AsyncQueue
from .aworker import AsyncWorker
from .errors import LonnymqError, Retry
from .hooks import WorkerHooks
from .message import Message
from .models import (
    ArchivedMessage,
    Channel,
    ChannelStats,
    CompleteResult,
    CreateResult,
    QueueStats,
    RequeueResult,
)
from .queue import Queue
from .worker import Worker

__all__ = [
    "ArchivedMessage",
    "AsyncMessage",
    "AsyncQueue",
    "AsyncWorker",
    "Backoff",
    "Channel",
    "ChannelStats",
    "CompleteResult",
    "CreateResult",
    "LonnymqError",
    "Message",
    "Queue",
    "QueueStats",
    "RequeueResult",
    "Retry",
    "Worker",
    "WorkerHooks",
]

# The extension's major.minor (lonnymq.control), so a client release names the SQL API it
# speaks; tests/test_packaging.py fails when they drift. pyproject.toml reads it from here.
__version__ = "2.0.0"
