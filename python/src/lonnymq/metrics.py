"""``WorkerMetrics``: Prometheus metrics of a ``Worker``/``AsyncWorker`` (extra
``lonnymq[web]``, which brings ``prometheus_client``).

    metrics = WorkerMetrics()                 # registers in prometheus_client's default registry
    Worker(queue, handle, hooks=metrics).run()
    metrics.serve(9100)                       # or export the registry your app already serves

Names are ``lonnymq_*`` with a ``queue`` label; a ``channel`` label only with
``per_channel=True`` (one channel per tenant multiplies the series). Dead letters happen
inside the database (``message_dequeue`` archives a message out of max_attempts and returns
nothing about it), so no worker sees one: ``lonnymq_dead_letters_total`` comes from the
dashboard's ``/metrics``, which counts the archive's new dead rows.
"""

from __future__ import annotations

import time

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import start_http_server

from .hooks import WorkerHooks
from .models import MessageData

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
LAG_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)


class WorkerMetrics(WorkerHooks):
    def __init__(
        self, registry: CollectorRegistry | None = None, *, per_channel: bool = False
    ) -> None:
        self.registry = registry if registry is not None else REGISTRY
        self.per_channel = per_channel
        labels = ["queue", "channel"] if per_channel else ["queue"]
        r = self.registry
        self.deliveries = Counter(
            "lonnymq_deliveries", "Messages delivered to a handler.", labels, registry=r
        )
        self.completions = Counter("lonnymq_completions", "Messages completed.", labels, registry=r)
        self.retries = Counter(
            "lonnymq_retries", "Messages deferred for another attempt.", labels, registry=r
        )
        self.failures = Counter(
            "lonnymq_failures", "Messages failed into the archive.", labels, registry=r
        )
        self.duration = Histogram(
            "lonnymq_handler_duration_seconds",
            "Time from delivery to settle.",
            labels,
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.lag = Histogram(
            "lonnymq_delivery_lag_seconds",
            "Delivery time minus the message's dequeue_at: how late work starts.",
            labels,
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "lonnymq_in_flight", "Messages held by handlers now.", labels, registry=r
        )

    def _labels(self, message: MessageData) -> list[str]:
        return [message.queue, message.channel or ""] if self.per_channel else [message.queue]

    def on_deliver(self, message: MessageData) -> None:
        labels = self._labels(message)
        self.deliveries.labels(*labels).inc()
        self.in_flight.labels(*labels).inc()
        lag = time.time() - message.dequeue_at.timestamp()
        self.lag.labels(*labels).observe(max(lag, 0.0))

    def on_complete(self, message: MessageData, duration_s: float) -> None:
        labels = self._labels(message)
        self.completions.labels(*labels).inc()
        self.duration.labels(*labels).observe(duration_s)

    def on_retry(self, message: MessageData, duration_s: float, delay_ms: int) -> None:
        labels = self._labels(message)
        self.retries.labels(*labels).inc()
        self.duration.labels(*labels).observe(duration_s)

    def on_fail(self, message: MessageData, duration_s: float, error: str | None) -> None:
        labels = self._labels(message)
        self.failures.labels(*labels).inc()
        self.duration.labels(*labels).observe(duration_s)

    def on_finish(self, message: MessageData) -> None:
        self.in_flight.labels(*self._labels(message)).dec()

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        """Serves this registry's /metrics on its own port (a background thread)."""
        start_http_server(port, addr=addr, registry=self.registry)
