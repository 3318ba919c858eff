"""Worker hooks and WorkerMetrics: every delivery is reported once and ends once, with
the outcome the database confirmed; a failing hook does not stop the work."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from lonnymq import (
    AsyncMessage,
    AsyncQueue,
    AsyncWorker,
    Backoff,
    Message,
    Queue,
    Retry,
    Worker,
    WorkerHooks,
)
from lonnymq.metrics import WorkerMetrics
from lonnymq.models import MessageData

FAST = Backoff(base_ms=1, max_ms=1)


class Recorder(WorkerHooks):
    def __init__(self) -> None:
        self.events: list[tuple[str, bytes]] = []

    def on_deliver(self, message: MessageData) -> None:
        self.events.append(("deliver", message.content))

    def on_complete(self, message: MessageData, duration_s: float) -> None:
        assert duration_s >= 0
        self.events.append(("complete", message.content))

    def on_retry(self, message: MessageData, duration_s: float, delay_ms: int) -> None:
        self.events.append(("retry", message.content))

    def on_fail(self, message: MessageData, duration_s: float, error: str | None) -> None:
        assert error is not None and "ValueError: bad" in error
        self.events.append(("fail", message.content))

    def on_finish(self, message: MessageData) -> None:
        self.events.append(("finish", message.content))


class Broken(WorkerHooks):
    def on_deliver(self, message: MessageData) -> None:
        raise RuntimeError("exporter down")


def value(registry: CollectorRegistry, name: str, queue: str) -> float:
    found = registry.get_sample_value(name, {"queue": queue})
    return 0.0 if found is None else found


def test_hooks_and_metrics_of_a_worker(queue: Queue, queue_name: str) -> None:
    for content in (b"ok", b"later", b"bad"):
        queue.create(content, channel="t")
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    recorder = Recorder()
    retried: set[int] = set()

    def handle(message: Message) -> None:
        if message.content == b"bad":
            raise ValueError("bad")
        if message.content == b"later" and message.id not in retried:
            retried.add(message.id)
            raise Retry(delay_ms=0)

    worker = Worker(
        queue, handle, max_attempts=1, backoff=FAST, hooks=[Broken(), recorder, metrics]
    )
    worker.run(until_idle=True)

    assert worker.counts["completed"] == 2 and worker.counts["failed"] == 1
    kinds = [kind for kind, _ in recorder.events]
    assert kinds.count("deliver") == kinds.count("finish") == 4  # "later" came twice
    assert ("retry", b"later") in recorder.events
    assert ("complete", b"later") in recorder.events
    assert ("fail", b"bad") in recorder.events
    assert value(registry, "lonnymq_deliveries_total", queue_name) == 4
    assert value(registry, "lonnymq_completions_total", queue_name) == 2
    assert value(registry, "lonnymq_retries_total", queue_name) == 1
    assert value(registry, "lonnymq_failures_total", queue_name) == 1
    assert value(registry, "lonnymq_in_flight", queue_name) == 0
    assert value(registry, "lonnymq_handler_duration_seconds_count", queue_name) == 4
    assert value(registry, "lonnymq_delivery_lag_seconds_count", queue_name) == 4


async def test_hooks_of_an_async_worker_with_channel_labels(
    aqueue: AsyncQueue, queue_name: str
) -> None:
    await aqueue.create(b"ok", channel="tenant-1")
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry, per_channel=True)

    async def handle(message: AsyncMessage) -> None:
        return None

    await AsyncWorker(aqueue, handle, hooks=metrics).run(until_idle=True)
    labels = {"queue": queue_name, "channel": "tenant-1"}
    assert registry.get_sample_value("lonnymq_completions_total", labels) == 1
    assert registry.get_sample_value("lonnymq_in_flight", labels) == 0
