"""The web view on the Faust web server: JSON, Prometheus, dashboard.

The JSON shapes are in docs/app.md#web-view.

    GET /roles/                       every role, gathered from every worker
    GET /roles/{role}/                one role, answered by the worker owning it
    GET /roles/{role}/authoritative   ?producer_id=&producer_epoch= (live check; term
                                      mode: ?term=, read from the terms topic)
    GET /events/                      the leadership events as server-sent events
                                      (every worker's, or ``scope=local``; app.web.event_stream)
    GET /rebalance/                   the rebalancing plans and handovers, gathered from
                                      every worker (``scope=local``: this worker's)
    GET /metrics                      this worker's Prometheus metrics
    GET /health                       liveness: 200, or 503 while a role this worker leads
                                      is overdue for its renewal past the health tolerance
                                      (app.health.liveness); member id, connected, roles
    GET /ready                        readiness: 200 or 503, with the reasons (app.readiness)
    GET /                             the HTML dashboard

Any worker answers any request. Errors are JSON ``{"error": ...}`` with 400
(bad parameter), 404 (unknown role or path) or 503 (owner unreachable, group
rebalancing, cluster unreachable); a middleware turns anything unexpected
into a 503 too, never a 500.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any, cast

from aiohttp import web

from agents.fold import partition_value, role_value
from agents.fold.partition_value import partition_key
from agents.peers import Unreachable, fetch_json
from agents.rebalancing import rebalance_json
from app.context import Context
from app.health import liveness, verdict
from app.web.dashboard import DASHBOARD_HTML
from app.web.event_stream import stream_events
from app.web.role_view import detail, merged_state, row, skips_of_values
from app.web.routing import owner_of
from app.web.term_view import term_detail, term_fields
from krabka import FencingToken, TermToken, describe_leadership
from krabka.format.partition import role_partition
from krabka.format.token import NO_EPOCH

__all__ = ["Views", "install", "json_errors"]

log = logging.getLogger("app.web.views")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

DESCRIBE_TIMEOUT = 5.0
MAX_NAME_BYTES = 0x7FFF
_INTEGER = re.compile(r"-?[0-9]{1,20}")


def error(status: int, message: str) -> web.Response:
    """The JSON error body every failing endpoint answers with."""
    return web.json_response({"error": message}, status=status)


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own 404/405 as JSON, and any unexpected failure as a 503 JSON."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error(exc.status, exc.reason)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("%s %s failed", request.method, request.path)
        return error(503, f"this worker could not answer: {exc!r}")


class BadRequest(Exception):
    """A request parameter that is missing, malformed or out of range."""


def _role_name(request: web.Request) -> str:
    role = request.match_info["role"]
    try:
        size = len(role.encode("utf-8"))
    except UnicodeEncodeError:
        raise BadRequest("the role name is not valid UTF-8") from None
    if not role or size > MAX_NAME_BYTES:
        raise BadRequest(f"a role name has 1 to {MAX_NAME_BYTES} UTF-8 bytes, got {size}")
    return role


def _int_param(request: web.Request, name: str, bits: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        raise BadRequest(f"missing query parameter {name}")
    if not _INTEGER.fullmatch(raw):
        raise BadRequest(f"{name}={raw!r} is not an integer")
    value = int(raw)
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise BadRequest(f"{name}={value} does not fit in a signed {bits}-bit integer")
    return value


def _token(token: FencingToken) -> dict[str, int] | None:
    if token == NO_EPOCH:
        return None
    return {"producer_id": token.producer_id, "producer_epoch": token.producer_epoch}


ROUTES: tuple[tuple[str, str], ...] = (
    ("/", "dashboard"),
    ("/health", "health"),
    ("/ready", "ready"),
    ("/metrics", "metrics"),
    ("/roles/", "roles"),
    ("/roles/{role}/", "role"),
    ("/roles/{role}/authoritative", "authoritative"),
    ("/events/", "events"),
    ("/rebalance/", "rebalance"),
)
"""Every endpoint: its path and the `Views` method that answers it."""


class Views:
    """The handlers, bound to one worker's `Context`."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def routes(self) -> list[tuple[str, Handler]]:
        """Every endpoint as (path, handler)."""
        return [(path, getattr(self, name)) for path, name in ROUTES]

    @property
    def _session(self) -> Any:
        return self.ctx.http or self.ctx.app.http_client

    # --- local reads -----------------------------------------------------------------

    def _owned(self) -> set[int] | None:
        for url, partitions in self.ctx.router.owners().items():
            if self.ctx.router.is_self(url):
                return set(partitions)
        return None

    def _local_rows(self, now_ms: int) -> list[dict[str, Any]]:
        owned = self._owned()
        rows = []
        for _, raw in list(self.ctx.tables.role_state.items()):
            value = role_value.decode(raw)
            if owned is not None and value.partition not in owned:
                continue
            rows.append(self._with_terms(row(value, now_ms), value, now_ms, term_fields))
        return sorted(rows, key=lambda row: row["role"])

    def _local_detail(self, role: str, now_ms: int) -> web.Response:
        raw = self.ctx.tables.role_state.get(role.encode("utf-8"))
        if raw is None:
            return error(404, f"unknown role {role!r}: no record of it in the state topic")
        value = role_value.decode(raw)
        raw_partition = self.ctx.tables.partition_state.get(partition_key(value.partition))
        skipped = None if raw_partition is None else partition_value.decode(raw_partition)
        body = self._with_terms(detail(merged_state(value, skipped),
                                       skips_of_values(value, skipped), value.partition,
                                       now_ms, value.last_offset), value, now_ms, term_detail)
        body["served_by"] = str(self.ctx.app.conf.canonical_url)
        return web.json_response(body)

    def _with_terms(self, body: dict[str, Any], value: role_value.RoleValue, now_ms: int,
                    fields: Callable[[role_value.RoleValue, int, int], dict[str, Any]]
                    ) -> dict[str, Any]:
        """`body` with the term-mode fields over the lease's, on a term-mode worker."""
        settings = self.ctx.settings
        if not settings.term_mode:
            return body
        return {**body, **fields(value, now_ms, settings.leadership_options.lease_ms)}

    # --- endpoints -------------------------------------------------------------------

    async def roles(self, request: web.Request) -> web.Response:
        """Every role: this worker's own when ``scope=local``, else gathered."""
        now = self.ctx.clock.now_ms()
        if request.query.get("scope") == "local":
            return web.json_response({"roles": self._local_rows(now), "now": now})
        owners = self.ctx.router.owners()
        if not owners:
            return error(503, "no worker owns the state partitions yet (the group is "
                              "rebalancing); retry shortly")
        rows: list[dict[str, Any]] = []
        unavailable: list[dict[str, Any]] = []

        async def gather(url: str, partitions: list[int]) -> None:
            if self.ctx.router.is_self(url):
                rows.extend(self._local_rows(now))
                return
            try:
                status, body = await fetch_json(self._session, f"{url.rstrip('/')}/roles/"
                                                "?scope=local")
                if status != 200:
                    raise Unreachable(f"answered {status}: {body}")
                rows.extend(body["roles"])
            except (Unreachable, KeyError, TypeError) as exc:
                unavailable.append({"worker": url, "partitions": partitions,
                                    "error": str(exc)})

        await asyncio.gather(*(gather(url, parts) for url, parts in owners.items()))
        rows.sort(key=lambda row: row["role"])
        return web.json_response({"roles": rows, "now": now, "unavailable": unavailable})

    async def role(self, request: web.Request) -> web.Response:
        """One role's full state, from the worker that owns its partition."""
        try:
            role = _role_name(request)
        except BadRequest as exc:
            return error(400, str(exc))
        now = self.ctx.clock.now_ms()
        partition = role_partition(role, self.ctx.partitions)
        if request.query.get("forwarded"):
            # Asked by another worker: answer from here, never forward again.
            return self._local_detail(role, now)
        owner = owner_of(self.ctx.router, partition)
        if owner is None:
            return error(503, f"no worker owns partition {partition} of role {role!r} yet "
                              "(the group is rebalancing); retry shortly")
        if self.ctx.router.is_self(owner):
            return self._local_detail(role, now)
        # raw_path keeps the role's percent-encoding as the client sent it.
        target = f"{owner.rstrip('/')}{request.rel_url.raw_path}?forwarded=1"
        try:
            status, body = await fetch_json(self._session, target)
        except Unreachable as exc:
            return error(503, f"the worker owning partition {partition} ({owner}) is "
                              f"unreachable: {exc}")
        return web.json_response(body, status=status)

    async def authoritative(self, request: web.Request) -> web.Response:
        """Is this token the role's current one? Asked of the role's referee now:
        the transaction coordinator (DescribeTransactions), or in term mode the
        role's partition of the terms topic, read to its end."""
        if self.ctx.settings.term_mode:
            return await self._term_authoritative(request)
        try:
            role = _role_name(request)
            token = FencingToken(_int_param(request, "producer_id", 64),
                                 _int_param(request, "producer_epoch", 16))
        except BadRequest as exc:
            return error(400, str(exc))
        transport = self.ctx.transport
        if transport is None:
            return error(503, "this worker is not connected to the Kafka cluster yet")
        try:
            status = await asyncio.wait_for(describe_leadership(transport, role),
                                            DESCRIBE_TIMEOUT)
        except Exception as exc:
            return error(503, f"the transaction coordinator did not answer: {exc!r}")
        return web.json_response({"role": role, "authoritative": status.authoritative(token),
                                  "current": _token(status.token)})

    async def _term_authoritative(self, request: web.Request) -> web.Response:
        """Term mode: ``?term=``; authoritative is the library's rule (the
        highest term, its holder not resigned), and ``live`` says whether its
        heartbeats are younger than the election timeout."""
        try:
            role = _role_name(request)
            term = _int_param(request, "term", 64)
        except BadRequest as exc:
            return error(400, str(exc))
        transport = self.ctx.transport
        if transport is None:
            return error(503, "this worker is not connected to the Kafka cluster yet")
        settings = self.ctx.settings
        try:
            status = await asyncio.wait_for(
                describe_leadership(transport, role, fencing="term",
                                    partitions=settings.partitions,
                                    election_timeout=settings.lease_duration,
                                    clock=self.ctx.clock),
                DESCRIBE_TIMEOUT)
        except Exception as exc:
            return error(503, f"the terms topic could not be read: {exc!r}")
        current = None if status.token is None else {"term": status.token.term}
        return web.json_response({"role": role,
                                  "authoritative": status.authoritative(TermToken(term)),
                                  "current": current, "holder": status.holder,
                                  "live": status.live})

    async def events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: the leadership events of every worker (relayed), or of
        this worker's partitions with ``scope=local``; ``role=`` (repeatable) filters."""
        roles = request.query.getall("role", [])
        for role in roles:
            try:
                size = len(role.encode("utf-8"))
            except UnicodeEncodeError:
                return error(400, "a role name is not valid UTF-8")
            if not role or size > MAX_NAME_BYTES:
                return error(400, f"a role name has 1 to {MAX_NAME_BYTES} UTF-8 bytes, "
                                  f"got {size}")
        local = request.query.get("scope") == "local"
        return await stream_events(request, self.ctx.feed, roles=roles, session=self._session,
                                   peers=None if local else self._peers)

    async def rebalance(self, request: web.Request) -> web.Response:
        """Each worker's last rebalancing plan and recent handovers (``scope=local``:
        this worker's), and every worker's handovers merged, oldest first."""
        mine = rebalance_json(self.ctx)
        if request.query.get("scope") == "local":
            return web.json_response(mine)
        workers = [mine]
        unavailable: list[dict[str, Any]] = []

        async def gather(url: str) -> None:
            try:
                status, body = await fetch_json(self._session, f"{url.rstrip('/')}/rebalance/"
                                                "?scope=local")
                if status != 200 or not isinstance(body, dict):
                    raise Unreachable(f"answered {status}: {body}")
                workers.append(body)
            except Unreachable as exc:
                unavailable.append({"worker": url, "error": str(exc)})

        await asyncio.gather(*(gather(url) for url in self._peers()))
        workers.sort(key=lambda worker: str(worker.get("member")))
        moves = sorted((move for worker in workers for move in worker.get("moves", [])),
                       key=lambda move: (move.get("at", 0), move.get("role", "")))
        return web.json_response({"workers": workers, "moves": moves,
                                  "unavailable": unavailable, "now": self.ctx.clock.now_ms()})

    def _peers(self) -> list[str]:
        return sorted(url for url in self.ctx.router.owners() if not self.ctx.router.is_self(url))

    async def metrics(self, request: web.Request) -> web.Response:
        """This worker's registry, in the format the scraper accepts (`app.metrics`)."""
        body, content_type = self.ctx.metrics.render(request.headers.get("Accept", ""))
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def ready(self, request: web.Request) -> web.Response:
        """Whether this worker should get traffic: 200, or 503 with the reasons."""
        answer = verdict(self.ctx)
        body = {"member": self.ctx.member, **answer.json()}
        return web.json_response(body, status=200 if answer.ready else 503)

    async def health(self, request: web.Request) -> web.Response:
        """Liveness: answering at all shows the event loop turns, and a 200 that
        every role this worker leads renews within the health tolerance (a 503
        names each that does not). Then this worker's member id, connection and
        roles, cheaply (no request to anyone)."""
        report = liveness(self.ctx)
        return web.json_response({
            "member": self.ctx.member,
            "healthy": report.healthy,
            "reasons": list(report.reasons),
            "health_tolerance": report.tolerance,
            "connected": self.ctx.transport is not None,
            "roles": {
                name: {"leading": runner.leading, "running": runner.running,
                       "tenures": runner.tenures,
                       "state": runner.state.value,
                       "last_stop": None if runner.last_stop is None
                       else dataclasses.asdict(runner.last_stop),
                       "fence_deadline": None if runner.leadership is None
                       else runner.leadership.fence_deadline}
                for name, runner in sorted(self.ctx.runners.items())
            },
        }, status=200 if report.healthy else 503)

    async def dashboard(self, request: web.Request) -> web.Response:
        """The HTML dashboard (it reads /roles/ once, then follows /events/)."""
        return web.Response(text=DASHBOARD_HTML, content_type="text/html")


def install(ctx: Context) -> Views:
    """Register the views on the Faust web server of `ctx.app`."""
    views = Views(ctx)
    web_app = cast(Any, ctx.app.web).web_app  # the aiohttp driver's Application
    web_app.middlewares.append(json_errors)

    async def end_streams(_: web.Application) -> None:
        # aiohttp waits for open handlers at shutdown (60 s): end the streams first.
        ctx.feed.close()

    web_app.on_shutdown.append(end_streams)
    for path, handler in views.routes():
        ctx.app.page(path, name=f"coordination:{path}")(_faust_view(handler))
    return views


def _faust_view(handler: Handler) -> Any:
    async def get(view: Any, request: web.Request, **match_info: Any) -> web.StreamResponse:
        return await handler(request)
    get.__name__ = handler.__name__
    return get
