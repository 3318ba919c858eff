"""The operations dashboard: ``create_app(...)`` builds the ASGI app that ``lonnymq web``
serves. Server-rendered pages (Jinja2) refreshed by htmx on a timer and on LISTEN
wake-ups pushed as server-sent events; actions are plain form POSTs answered with a
redirect, so every page also works without JavaScript."""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import psycopg
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from .. import _sql
from .db import CHANNEL_COUNT_LIMIT, Database, Row
from .live import Broadcaster
from .metrics import DatabaseCollector
from .security import BasicAuth, same_origin
from .throughput import Throughput

HERE = Path(__file__).parent
PAGE_SIZE = 50
# The Schedules page lists at most this many periodic messages.
PERIODIC_ROWS = 500
OUTCOMES = ("failed", "dead", "completed")
STATES = ("ready", "scheduled", "locked")
# Content shown on request is cut here: the page is for reading, not for downloading.
MAX_SHOWN_BYTES = 64 * 1024
# Throughput samples: at most one per SAMPLE_S, the chart covers the last CHART_S.
SAMPLE_S = 2.0
CHART_S = 600.0

Handler = Callable[[Request], Awaitable[Response]]


def create_app(
    conninfo_or_pool: str | AsyncConnectionPool,
    *,
    actions: bool = False,
    auth: tuple[str, str] | None = None,
    role: str | None = None,
    refresh_s: float = 5.0,
    count_limit: int = 10_000,
    metrics_cache_s: float = 10.0,
    metrics_channels: bool = False,
    registry: CollectorRegistry | None = None,
) -> Starlette:
    """The dashboard and ``/metrics`` as an ASGI app, to serve or to mount.

    ``conninfo_or_pool``: a libpq DSN (the app opens a small pool on first use) or a
    ``psycopg_pool.AsyncConnectionPool`` of yours. Read-only unless ``actions=True``: its
    transactions are read-only, and with ``role`` every connection runs ``SET ROLE`` to it
    (typically the monitoring role of the README). ``auth=(user, password)`` requires basic
    auth on every request. ``registry``: where the database metrics are registered (a
    fresh one by default; pass the one your app already exports to merge them)."""
    db = Database(conninfo_or_pool, read_only=not actions, role=role, count_limit=count_limit)
    listen_dsn = (
        conninfo_or_pool
        if isinstance(conninfo_or_pool, str)
        else getattr(conninfo_or_pool, "conninfo", None)
    )
    broadcaster = Broadcaster(listen_dsn)
    collector = DatabaseCollector(db, cache_s=metrics_cache_s, per_channel=metrics_channels)
    metrics_registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
    metrics_registry.register(collector)
    dashboard = Dashboard(
        db, broadcaster, Throughput(listen_dsn), collector, metrics_registry, actions, refresh_s
    )

    middleware = [Middleware(BasicAuth, user=auth[0], password=auth[1])] if auth else []
    app = Starlette(
        routes=dashboard.routes(),
        middleware=middleware,
        lifespan=dashboard.lifespan,
    )
    app.state.lonnymq = dashboard
    return app


class Dashboard:
    def __init__(
        self,
        db: Database,
        broadcaster: Broadcaster,
        throughput: Throughput,
        collector: DatabaseCollector,
        registry: CollectorRegistry,
        actions: bool,
        refresh_s: float,
    ) -> None:
        self.db = db
        self.broadcaster = broadcaster
        self.throughput = throughput
        self.collector = collector
        self.registry = registry
        self.actions = actions
        self.refresh_s = refresh_s
        self.samples: deque[tuple[float, int, int]] = deque(maxlen=int(CHART_S / SAMPLE_S) + 1)
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.filters["age"] = format_age
        self.templates.env.filters["when"] = format_when
        self.templates.env.globals["STATES"] = STATES
        self.templates.env.globals["OUTCOMES"] = OUTCOMES

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        # Served on its own: close the pool at shutdown. (Mounted in another app, the
        # pool opens on first use and closes with the process.)
        yield
        await self.throughput.close()
        await self.db.close()

    def routes(self) -> list[Route | Mount]:
        post = ["POST"]
        return [
            Route("/", self.overview, name="overview"),
            Route("/verify", self.verify, name="verify"),
            Route("/channels", self.channels, name="channels"),
            Route("/messages", self.messages, name="messages"),
            Route("/messages/{id:int}", self.message, name="message"),
            Route("/archive", self.archive, name="archive"),
            Route("/archive/{id:int}", self.archived, name="archived"),
            Route("/schedules", self.schedules, name="schedules"),
            Route("/events", self.events, name="events"),
            Route("/metrics", self.metrics, name="metrics"),
            Route(
                "/actions/queue-pause",
                self.action(self.queue_pause),
                methods=post,
                name="queue_pause",
            ),
            Route(
                "/actions/queue-resume",
                self.action(self.queue_resume),
                methods=post,
                name="queue_resume",
            ),
            Route(
                "/actions/channel-pause",
                self.action(self.channel_pause),
                methods=post,
                name="channel_pause",
            ),
            Route(
                "/actions/channel-resume",
                self.action(self.channel_resume),
                methods=post,
                name="channel_resume",
            ),
            Route(
                "/actions/channel-policy",
                self.action(self.channel_policy),
                methods=post,
                name="channel_policy",
            ),
            Route(
                "/actions/message-cancel",
                self.action(self.message_cancel),
                methods=post,
                name="message_cancel",
            ),
            Route(
                "/actions/archive-requeue",
                self.action(self.archive_requeue),
                methods=post,
                name="archive_requeue",
            ),
            Route(
                "/actions/archive-requeue-all",
                self.action(self.archive_requeue_all),
                methods=post,
                name="archive_requeue_all",
            ),
            Route(
                "/actions/archive-prune",
                self.action(self.archive_prune),
                methods=post,
                name="archive_prune",
            ),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ]

    def page(
        self, request: Request, template: str, status_code: int = 200, **context: Any
    ) -> Response:
        context.update(
            actions=self.actions,
            refresh_s=self.refresh_s,
            live=self.broadcaster.available,
            notice=request.query_params.get("notice"),
            here=here(request),
            count_limit=self.db.count_limit,
        )
        return self.templates.TemplateResponse(request, template, context, status_code=status_code)

    # -- pages --------------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        queues = await self.db.queues()  # the only page that counts
        await self.sample()
        self.throughput.touch()
        return self.page(
            request,
            "overview.html",
            queues=queues,
            chart=self.chart(),
            sparks=self.throughput.charts(time.time()),
            reports=self.throughput.available,
        )

    async def verify(self, request: Request) -> Response:
        started = time.monotonic()
        problems = await self.db.verify()
        return self.page(
            request, "verify.html", problems=problems, took_ms=(time.monotonic() - started) * 1000
        )

    async def channels(self, request: Request) -> Response:
        queues = await self.db.queue_names()
        queue = request.query_params.get("queue") or (queues[0]["queue"] if queues else None)
        limit = bounded_int(request.query_params.get("limit"), 100, 1, 10_000) or 100
        rows = await self.db.channels(queue, limit) if queue else []
        summary = next((q for q in queues if q["queue"] == queue), None)
        return self.page(
            request,
            "channels.html",
            queues=queues,
            queue=queue,
            channels=rows,
            summary=summary,
            limit=limit,
            channel_count_limit=CHANNEL_COUNT_LIMIT,
        )

    async def messages(self, request: Request) -> Response:
        params = request.query_params
        queues = await self.db.queue_names()
        queue = params.get("queue") or (queues[0]["queue"] if queues else None)
        channel = params.get("channel") or None
        state = params.get("state") if params.get("state") in STATES else None
        message_id = bounded_int(params.get("id"), None, 1, 2**63 - 1)
        dedup_key = params.get("dedup_key") or None
        rows: list[Row] = []
        if message_id is not None:
            found = await self.db.message(message_id)
            if found is not None:
                return RedirectResponse(
                    str(request.url_for("message", id=message_id)), status_code=303
                )
        elif dedup_key and queue:
            found = await self.db.message_by_dedup_key(queue, dedup_key)
            if found is not None:
                return RedirectResponse(
                    str(request.url_for("message", id=found["id"])), status_code=303
                )
        elif queue:
            rows = await self.db.browse(queue, channel, state, PAGE_SIZE)
        return self.page(
            request,
            "messages.html",
            queues=queues,
            queue=queue,
            channel=channel,
            state=state,
            message_id=message_id,
            dedup_key=dedup_key,
            rows=rows,
            searched=message_id is not None or dedup_key is not None,
        )

    async def message(self, request: Request) -> Response:
        row = await self.db.message(request.path_params["id"])
        if row is None:
            return self.page(request, "gone.html", 404, what="message", status="not live any more")
        show = request.query_params.get("show")
        return self.page(
            request,
            "message.html",
            m=row,
            show=show,
            content=render_bytes(row["content"], show),
            state=render_bytes(row["state"], show),
        )

    async def archive(self, request: Request) -> Response:
        params = request.query_params
        queues = await self.db.queue_names()
        queue = params.get("queue") or None
        outcome = params.get("outcome") if params.get("outcome") in OUTCOMES else None
        after = parse_time(params.get("after"))
        before = parse_time(params.get("before"))
        rows = await self.db.archive(queue, outcome, after, before, PAGE_SIZE)
        return self.page(
            request,
            "archive.html",
            queues=queues,
            queue=queue,
            outcome=outcome,
            after=params.get("after") or "",
            before=params.get("before") or "",
            rows=rows,
        )

    async def archived(self, request: Request) -> Response:
        row = await self.db.archived(request.path_params["id"])
        if row is None:
            return self.page(
                request, "gone.html", 404, what="archived message", status="not archived"
            )
        show = request.query_params.get("show")
        return self.page(
            request,
            "archived.html",
            a=row,
            show=show,
            content=render_bytes(row["content"], show),
            state=render_bytes(row["state"], show),
        )

    async def schedules(self, request: Request) -> Response:
        return self.page(
            request,
            "schedules.html",
            jobs=await self.db.cron_jobs(),
            periodic=await self.db.periodic(PERIODIC_ROWS),
            periodic_rows=PERIODIC_ROWS,
        )

    async def events(self, request: Request) -> Response:
        if not self.broadcaster.available:
            return PlainTextResponse("no LISTEN connection: pass a DSN", status_code=404)
        return StreamingResponse(
            self.broadcaster.stream(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def metrics(self, request: Request) -> Response:
        await self.collector.refresh()
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

    # -- throughput -----------------------------------------------------------------------

    async def sample(self) -> None:
        now = time.monotonic()
        if self.samples and now - self.samples[-1][0] < SAMPLE_S:
            return
        activity = await self.db.table_activity()
        if activity is not None:
            self.samples.append((now, int(activity["created"]), int(activity["removed"])))

    def chart(self) -> dict[str, Any]:
        """Created and removed messages per second between samples, as SVG polylines."""
        points = [s for s in self.samples if s[0] >= time.monotonic() - CHART_S]
        rates: list[tuple[float, float, float]] = []
        for (t0, c0, r0), (t1, c1, r1) in itertools.pairwise(points):
            span = max(t1 - t0, 1e-3)
            rates.append((t1, max(c1 - c0, 0) / span, max(r1 - r0, 0) / span))
        peak = max([max(c, r) for _, c, r in rates] + [1.0])
        width, height = 600.0, 120.0
        end = time.monotonic()

        def line(index: int) -> str:
            return " ".join(
                f"{width - (end - t) / CHART_S * width:.1f},{height - v[index] / peak * height:.1f}"
                for t, *v in ((r[0], r[1], r[2]) for r in rates)
            )

        last = rates[-1] if rates else None
        return {
            "created": line(0),
            "removed": line(1),
            "peak": peak,
            "created_now": last[1] if last else None,
            "removed_now": last[2] if last else None,
            "width": width,
            "height": height,
        }

    # -- actions --------------------------------------------------------------------------

    def action(self, run: Callable[[FormData], Awaitable[str]]) -> Handler:
        """Wraps an action: refused unless enabled and same-origin; its outcome becomes a
        notice on the page it came from. Invalid input (22023) changes nothing."""

        async def handler(request: Request) -> Response:
            if not self.actions:
                return PlainTextResponse(
                    "read-only dashboard: start it with --actions", status_code=403
                )
            if not same_origin(request):
                return PlainTextResponse("cross-origin request refused", status_code=403)
            form = await request.form()
            try:
                notice = await run(form)
            except psycopg.errors.InvalidParameterValue as exc:
                notice = f"refused: {str(exc).removeprefix('lonnymq: ').strip()}"
            except ValueError as exc:
                notice = f"refused: {exc}"
            return RedirectResponse(
                with_notice(form_value(form, "next") or "", notice, request), 303
            )

        return handler

    async def queue_pause(self, form: FormData) -> str:
        queue = required(form, "queue")
        status = await self.db.value("SELECT lonnymq.queue_pause(%s)", (queue,))
        return f"queue {queue}: {status}"

    async def queue_resume(self, form: FormData) -> str:
        queue = required(form, "queue")
        status = await self.db.value("SELECT lonnymq.queue_resume(%s)", (queue,))
        return f"queue {queue}: {status}"

    async def channel_pause(self, form: FormData) -> str:
        queue, channel = required(form, "queue"), required(form, "channel")
        status = await self.db.value("SELECT lonnymq.channel_pause(%s, %s)", (queue, channel))
        return f"channel {channel}: {status}"

    async def channel_resume(self, form: FormData) -> str:
        queue, channel = required(form, "queue"), required(form, "channel")
        status = await self.db.value("SELECT lonnymq.channel_resume(%s, %s)", (queue, channel))
        return f"channel {channel}: {status}"

    async def channel_policy(self, form: FormData) -> str:
        queue, channel = required(form, "queue"), required(form, "channel")
        await self.db.row(
            _sql.CHANNEL_SET,
            (
                queue,
                channel,
                optional_int(form, "max_concurrency"),
                optional_int(form, "release_interval_ms") or 0,
                optional_int(form, "max_size"),
                optional_int(form, "max_attempts"),
                form_value(form, "retain_completed") == "on",
            ),
        )
        return f"channel {channel}: policy saved"

    async def message_cancel(self, form: FormData) -> str:
        message_id = required_int(form, "id")
        status = await self.db.value(_sql.MESSAGE_CANCEL, (message_id,))
        return f"message {message_id}: {status}"

    async def archive_requeue(self, form: FormData) -> str:
        archive_id = required_int(form, "id")
        row = await self.db.row(_sql.ARCHIVE_REQUEUE, (archive_id,))
        assert row is not None
        if row["status"] == "created":
            return f"archived {archive_id}: requeued as message {row['id']}"
        return f"archived {archive_id}: {row['status']}"

    async def archive_requeue_all(self, form: FormData) -> str:
        queue = required(form, "queue")
        outcome = form_value(form, "outcome") or None
        row = await self.db.row(
            "SELECT requeued, dropped FROM lonnymq.archive_requeue(queue => %s, outcome => %s,"
            " archived_after => %s, archived_before => %s)",
            (
                queue,
                outcome,
                parse_time(form_value(form, "after")),
                parse_time(form_value(form, "before")),
            ),
        )
        assert row is not None
        return f"requeued {row['requeued']}, {row['dropped']} left archived (channel full)"

    async def archive_prune(self, form: FormData) -> str:
        days = form_value(form, "older_than_days") or ""
        try:
            older_than = timedelta(days=float(days))
        except ValueError:
            raise ValueError("older than: a number of days") from None
        removed = await self.db.value(
            "SELECT lonnymq.archive_prune(older_than => %s, queue => %s, outcome => %s)",
            (older_than, form_value(form, "queue") or None, form_value(form, "outcome") or None),
        )
        return f"pruned {removed} archived messages"


# -- helpers ------------------------------------------------------------------------------


def here(request: Request) -> str:
    """This page's path and query without a notice: where an action returns to."""
    query = [(k, v) for k, v in request.query_params.multi_items() if k != "notice"]
    return request.url.path + ("?" + urlencode(query) if query else "")


def with_notice(next_url: str, notice: str, request: Request) -> str:
    # Only a path of this site: an action must not redirect elsewhere.
    if not next_url.startswith("/") or next_url.startswith("//") or "\\" in next_url:
        next_url = str(request.url_for("overview").path)
    return next_url + ("&" if "?" in next_url else "?") + urlencode({"notice": notice})


def form_value(form: FormData, key: str) -> str | None:
    value = form.get(key)
    return value.strip() if isinstance(value, str) else None


def required(form: FormData, key: str) -> str:
    value = form_value(form, key)
    if not value:
        raise ValueError(f"{key} is required")
    return value


def optional_int(form: FormData, key: str) -> int | None:
    value = form_value(form, key)
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{key} must be a whole number") from None


def required_int(form: FormData, key: str) -> int:
    value = optional_int(form, key)
    if value is None:
        raise ValueError(f"{key} is required")
    return value


def bounded_int(text: str | None, default: int | None, low: int, high: int) -> int | None:
    try:
        value = int(text) if text else default
    except ValueError:
        return default
    return None if value is None else min(max(value, low), high)


def parse_time(text: str | None) -> datetime | None:
    """A datetime-local form value (or ISO 8601), read as UTC when it names no zone."""
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not a time: {text}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def render_bytes(data: bytes | None, show: str | None) -> str | None:
    """Content or state as asked: JSON (pretty), text, or hex; None when not asked."""
    if data is None or show not in ("json", "text", "hex"):
        return None
    shown = bytes(data[:MAX_SHOWN_BYTES])
    cut = "\n... (cut at 64 KiB)" if len(data) > MAX_SHOWN_BYTES else ""
    if show == "hex":
        lines = (shown[i : i + 16].hex(" ") for i in range(0, len(shown), 16))
        return "\n".join(lines) + cut
    text = shown.decode("utf-8", errors="replace")
    if show == "json":
        try:
            return json.dumps(json.loads(bytes(data)), indent=2, ensure_ascii=False)
        except ValueError:
            return "(not valid JSON; as text:)\n" + text + cut
    return text + cut


def format_age(ms: int | float | None) -> str:
    if ms is None:
        return "-"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def format_when(at: datetime | None) -> str:
    return "-" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
