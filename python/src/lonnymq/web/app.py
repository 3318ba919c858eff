"""The operations dashboard: ``create_app(...)`` builds the ASGI app that ``lonnymq web``
serves. Server-rendered pages (Jinja2) refreshed by htmx on a timer and on LISTEN
wake-ups pushed as server-sent events; actions are plain form POSTs answered with a
redirect, so every page also works without JavaScript."""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
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

from ..aqueue import AsyncQueue
from .db import CHANNEL_COUNT_LIMIT, MAX_NAME_CHARS, Database, Row
from .live import Broadcaster
from .metrics import DatabaseCollector
from .security import LOOPBACK_HOSTS, BasicAuth, HostGuard, same_origin
from .throughput import Throughput

HERE = Path(__file__).parent
PAGE_SIZE = 50
# The Schedules page lists at most this many periodic messages.
PERIODIC_ROWS = 500
OUTCOMES = ("failed", "dead", "completed")
STATES = ("ready", "scheduled", "locked")
# Content shown on request is cut here: the page is for reading, not for downloading.
MAX_SHOWN_BYTES = 64 * 1024
# The SQL types of the numbers a form sends: anything outside is refused before any call.
INT4_MAX = 2**31 - 1
INT8_MAX = 2**63 - 1
# archive_prune's age in days at most: longer than anything archived (SQL returns 0 past
# 6000 years), and a timedelta can still hold it.
MAX_AGE_DAYS = 10_000 * 366
# The client's name for calls that name no queue (cancel and requeue by id, a prune of
# every queue): an AsyncQueue needs a name, which these calls do not send.
ANY_QUEUE = "-"
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
    allowed_hosts: list[str] | None = None,
) -> Starlette:
    """The dashboard and ``/metrics`` as an ASGI app, to serve or to mount.

    ``conninfo_or_pool``: a libpq DSN (the app opens a small pool on first use) or a
    ``psycopg_pool.AsyncConnectionPool`` of yours. Read-only unless ``actions=True``: its
    transactions are read-only, and with ``role`` (DSN only) every connection runs ``SET
    ROLE`` to it (typically the monitoring role of the README). ``auth=(user, password)``
    requires basic auth on every request. ``registry``: where the database metrics are registered (a
    fresh one by default; pass the one your app already exports to merge them).
    ``allowed_hosts``: the ``Host`` names it answers to (``name`` on any port, or
    ``name:port``); by default the loopback names, ``localhost``, ``127.0.0.1`` and
    ``[::1]``. Any other ``Host`` gets 400: mounted under a public name, pass that name."""
    db = Database(conninfo_or_pool, read_only=not actions, role=role, count_limit=count_limit)
    broadcaster = Broadcaster(db)
    collector = DatabaseCollector(db, cache_s=metrics_cache_s, per_channel=metrics_channels)
    metrics_registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
    metrics_registry.register(collector)
    dashboard = Dashboard(
        db, broadcaster, Throughput(db), collector, metrics_registry, actions, refresh_s
    )

    hosts = list(LOOPBACK_HOSTS) if allowed_hosts is None else list(allowed_hosts)
    middleware = [Middleware(HostGuard, allowed=hosts)]
    if auth:
        middleware.append(Middleware(BasicAuth, user=auth[0], password=auth[1]))
    app = Starlette(
        routes=dashboard.routes(),
        middleware=middleware,
        lifespan=dashboard.lifespan,
        exception_handlers={
            BadInput: dashboard.bad_input,
            psycopg.errors.DataError: dashboard.bad_input,
            psycopg.errors.InsufficientPrivilege: dashboard.forbidden,
        },
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
        # Links are paths of this site: never an absolute URL built from the Host header.
        self.templates.env.globals["url_for"] = template_path_for
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
            Route("/messages/{id}", self.message, name="message"),
            Route("/archive", self.archive, name="archive"),
            Route("/archive/{id}", self.archived, name="archived"),
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

    async def bad_input(self, request: Request, exc: Exception) -> Response:
        """A page asked with a parameter out of bounds: 400 with what was wrong, only the
        error's first line (never the statements of its context)."""
        return PlainTextResponse(f"bad request: {primary_message(exc)}", status_code=400)

    async def forbidden(self, request: Request, exc: Exception) -> Response:
        """A page the role may not read in full (say, content without column SELECT on it):
        403 with the error's first line."""
        return PlainTextResponse(f"forbidden: {primary_message(exc)}", status_code=403)

    async def queue(self, name: str) -> AsyncQueue:
        """The client for one queue, over the dashboard's pool (its role, read-only or not)."""
        await self.db.open()
        return AsyncQueue(self.db.pool, name)

    # -- pages --------------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        queues = await self.db.queues()  # the only page that counts
        await self.sample()
        self.throughput.touch([q["queue"] for q in queues])
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
        queue = name_param(request, "queue") or (queues[0]["queue"] if queues else None)
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
        queue = name_param(request, "queue") or (queues[0]["queue"] if queues else None)
        channel = name_param(request, "channel")
        state = params.get("state") if params.get("state") in STATES else None
        message_id = bounded_int(params.get("id"), None, 1, INT8_MAX)
        dedup_key = params.get("dedup_key") or None
        rows: list[Row] = []
        if message_id is not None:
            found = await self.db.message(message_id)
            if found is not None:
                return RedirectResponse(path_for(request, "message", id=message_id), 303)
        elif dedup_key and queue:
            found = await self.db.message_by_dedup_key(queue, dedup_key)
            if found is not None:
                return RedirectResponse(path_for(request, "message", id=found["id"]), 303)
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
        show = shown_as(request)
        message_id = path_id(request)
        row = (
            None if message_id is None else await self.db.message(message_id, MAX_SHOWN_BYTES, show)
        )
        if row is None:
            return self.page(request, "gone.html", 404, what="message", status="not live any more")
        return self.page(
            request,
            "message.html",
            m=row,
            show=show,
            content=render_bytes(row.get("content"), row.get("content_bytes"), show),
            state=render_bytes(row.get("state"), row.get("state_bytes"), show),
        )

    async def archive(self, request: Request) -> Response:
        params = request.query_params
        queues = await self.db.queue_names()
        queue = name_param(request, "queue")
        outcome = params.get("outcome") if params.get("outcome") in OUTCOMES else None
        try:
            after = parse_time(params.get("after"))
            before = parse_time(params.get("before"))
        except ValueError as exc:
            raise BadInput(str(exc)) from None
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
        show = shown_as(request)
        archive_id = path_id(request)
        row = (
            None
            if archive_id is None
            else await self.db.archived(archive_id, MAX_SHOWN_BYTES, show)
        )
        if row is None:
            return self.page(
                request, "gone.html", 404, what="archived message", status="not archived"
            )
        return self.page(
            request,
            "archived.html",
            a=row,
            show=show,
            content=render_bytes(row.get("content"), row.get("content_bytes"), show),
            state=render_bytes(row.get("state"), row.get("state_bytes"), show),
        )

    async def schedules(self, request: Request) -> Response:
        periodic, periodic_count = await self.db.periodic(PERIODIC_ROWS)
        return self.page(
            request,
            "schedules.html",
            jobs=await self.db.cron_jobs(),
            periodic=periodic,
            periodic_count=periodic_count,
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
            except (ValueError, psycopg.errors.DataError) as exc:
                # Bad input (SQLSTATE class 22: 22023 from lonnymq) changes nothing.
                notice = f"refused: {primary_message(exc).removeprefix('lonnymq: ')}"
            return RedirectResponse(
                with_notice(form_value(form, "next") or "", notice, request), 303
            )

        return handler

    async def queue_pause(self, form: FormData) -> str:
        queue = await self.queue(required(form, "queue"))
        return f"queue {queue.name}: {await queue.queue_pause()}"

    async def queue_resume(self, form: FormData) -> str:
        queue = await self.queue(required(form, "queue"))
        return f"queue {queue.name}: {await queue.queue_resume()}"

    async def channel_pause(self, form: FormData) -> str:
        queue, channel = await self.queue(required(form, "queue")), required(form, "channel")
        return f"channel {channel}: {await queue.channel_pause(channel)}"

    async def channel_resume(self, form: FormData) -> str:
        queue, channel = await self.queue(required(form, "queue")), required(form, "channel")
        return f"channel {channel}: {await queue.channel_resume(channel)}"

    async def channel_policy(self, form: FormData) -> str:
        queue, channel = await self.queue(required(form, "queue")), required(form, "channel")
        await queue.channel_set(
            channel,
            max_concurrency=optional_int(form, "max_concurrency", INT4_MAX),
            release_interval_ms=optional_int(form, "release_interval_ms", INT8_MAX) or 0,
            max_size=optional_int(form, "max_size", INT8_MAX),
            max_attempts=optional_int(form, "max_attempts", INT4_MAX),
            retain_completed=form_value(form, "retain_completed") == "on",
        )
        return f"channel {channel}: policy saved"

    async def message_cancel(self, form: FormData) -> str:
        message_id = required_int(form, "id")
        status = await (await self.queue(ANY_QUEUE)).cancel(message_id)
        return f"message {message_id}: {status}"

    async def archive_requeue(self, form: FormData) -> str:
        archive_id = required_int(form, "id")
        result = await (await self.queue(ANY_QUEUE)).archive_requeue(archive_id)
        if result.status == "created":
            return f"archived {archive_id}: requeued as message {result.id}"
        return f"archived {archive_id}: {result.status}"

    async def archive_requeue_all(self, form: FormData) -> str:
        queue = await self.queue(required(form, "queue"))
        result = await queue.archive_requeue(
            outcome=form_value(form, "outcome") or None,
            archived_after=parse_time(form_value(form, "after")),
            archived_before=parse_time(form_value(form, "before")),
        )
        return f"requeued {result.requeued}, {result.dropped} left archived (channel full)"

    async def archive_prune(self, form: FormData) -> str:
        days = parse_days(form_value(form, "older_than_days") or "")
        queue_name = form_value(form, "queue") or None
        removed = await (await self.queue(queue_name or ANY_QUEUE)).archive_prune(
            timedelta(days=days),
            all_queues=queue_name is None,
            outcome=form_value(form, "outcome") or None,
        )
        return f"pruned {removed} archived messages"


# -- helpers ------------------------------------------------------------------------------


class BadInput(ValueError):
    """A query parameter out of bounds: the page answers 400."""


def primary_message(exc: BaseException) -> str:
    """An error's first line: psycopg's primary message, without DETAIL, HINT or the
    CONTEXT lines of PL/pgSQL (which show internal statements)."""
    if isinstance(exc, psycopg.Error) and exc.diag.message_primary:
        return exc.diag.message_primary
    return str(exc).strip().split("\n", 1)[0]


def path_for(request: Request, name: str, /, **params: Any) -> str:
    """A route's path on this site (with the mount's root path): links and redirects are
    never absolute URLs built from the Host header."""
    return str(request.url_for(name, **params).path)


@jinja2.pass_context
def template_path_for(context: Any, name: str, /, **params: Any) -> str:
    """``url_for`` of the templates: ``path_for``."""
    return path_for(context["request"], name, **params)


def name_param(request: Request, key: str) -> str | None:
    """A queue or channel name from the query: 400 past the length SQL accepts."""
    value = request.query_params.get(key) or None
    if value is not None and len(value) > MAX_NAME_CHARS:
        raise BadInput(f"{key}: at most {MAX_NAME_CHARS} characters")
    return value


def path_id(request: Request) -> int | None:
    """A message or archive id of the path; None (not found) unless a bigint."""
    text = request.path_params["id"]
    if not (text.isascii() and text.isdigit() and len(text) <= 19):
        return None
    value = int(text)
    return value if 1 <= value <= INT8_MAX else None


def shown_as(request: Request) -> str | None:
    show = request.query_params.get("show")
    return show if show in ("json", "text", "hex") else None


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


def optional_int(form: FormData, key: str, high: int = INT8_MAX) -> int | None:
    """A whole number of the form, at most ``high`` in magnitude (the SQL type's range):
    range checks below that are the SQL function's."""
    value = form_value(form, key)
    if not value:
        return None
    try:
        number = int(value) if len(value) <= 20 else None
    except ValueError:
        number = None
    if number is None or abs(number) > high:
        raise ValueError(f"{key} must be a whole number up to {high}")
    return number


def required_int(form: FormData, key: str) -> int:
    value = optional_int(form, key)
    if value is None:
        raise ValueError(f"{key} is required")
    return value


def parse_days(text: str) -> float:
    """archive_prune's age from the form: a finite number of days (negative ones are for
    the SQL function to refuse)."""
    try:
        days = float(text) if len(text) <= 32 else math.nan
    except ValueError:
        days = math.nan
    if not math.isfinite(days) or abs(days) > MAX_AGE_DAYS:
        raise ValueError(f"older than: a number of days up to {MAX_AGE_DAYS}")
    return days


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


def render_bytes(data: bytes | None, size: int | None, show: str | None) -> str | None:
    """Content or state as asked: JSON (pretty), text, or hex; None when not asked or
    NULL. ``data`` is read cut (Database.message), ``size`` is its full length; whatever
    the form, the page shows at most MAX_SHOWN_BYTES of it."""
    if data is None or show is None:
        return None
    shown = bytes(data[:MAX_SHOWN_BYTES])
    cut = "\n... (cut at 64 KiB)" if (size or len(data)) > MAX_SHOWN_BYTES else ""
    if show == "hex":
        lines = (shown[i : i + 16].hex(" ") for i in range(0, len(shown), 16))
        return "\n".join(lines) + cut
    text = shown.decode("utf-8", errors="replace")
    if show == "json":
        if cut:
            return "(over 64 KiB: not parsed; the start as text:)\n" + text + cut
        try:
            pretty = json.dumps(json.loads(shown), indent=2, ensure_ascii=False)
        except (ValueError, RecursionError):  # RecursionError: nested too deep to parse
            return "(not valid JSON; as text:)\n" + text
        # Indenting can multiply the size: the cut applies to what is shown.
        if len(pretty) > MAX_SHOWN_BYTES:
            return pretty[:MAX_SHOWN_BYTES] + "\n... (cut at 64 KiB)"
        return pretty
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


def format_when(at: datetime | str | None) -> str:
    """A time in UTC; a str is one past datetime's range, as PostgreSQL wrote it (db.py)."""
    if at is None:
        return "-"
    return at if isinstance(at, str) else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
