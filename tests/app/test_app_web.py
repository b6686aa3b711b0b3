"""The web view over HTTP, without Kafka: two workers' Faust web apps served by
aiohttp's test server, with a static partition map and the in-process model
for the live authoritative check (in term mode: a term against the terms
topic)."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp.test_utils import TestServer, make_mocked_request
from prometheus_client.parser import text_string_to_metric_families

from agents.fold import partition_value, role_value
from agents.fold.partition_value import partition_key
from agents.fold.rules import Unattributed, fold, fold_unattributed, route
from app.factory import build
from app.settings import Settings
from app.web.views import BadRequest, _role_name
from krabka import (
    STATE_TOPIC,
    TERMS_TOPIC,
    Claim,
    Record,
    claim_key,
    encode_claim,
    encode_term_key,
    role_partition,
)
from krabka.testing import ManualClock, MemoryBroker, MemoryTransport
from tests.support.logs import Log
from tests.support.ports import free_port

PARTITIONS = 4
NOW = 1_700_000_000_000


def roles_in(partitions: set[int], count: int, prefix: str) -> list[str]:
    found = []
    for i in range(1000):
        name = f"{prefix}-{i}"
        if role_partition(name, PARTITIONS) in partitions:
            found.append(name)
        if len(found) == count:
            return found
    raise AssertionError("no role names found")


A_PARTS, B_PARTS = {0, 1}, {2, 3}
A_ROLE, A_OTHER = roles_in(A_PARTS, 2, "alpha")
B_ROLE = roles_in(B_PARTS, 1, "beta")[0]


class StaticRouter:
    def __init__(self, owners: dict[str, list[int]], me: str) -> None:
        self._owners = owners
        self.me = me

    def owners(self) -> dict[str, list[int]]:
        return self._owners

    def is_self(self, url: str) -> bool:
        return url == self.me


def fold_into(ctx, records: list[Record], partition: int, **checks) -> None:
    """Put folded values in a worker's table store (as its fold agent would,
    given its `placement` and `challenge_stagger` in `checks`)."""
    values: dict[str, role_value.RoleValue] = {}
    skipped = None
    for record in records:
        key = route(record, partition, PARTITIONS)
        if isinstance(key, Unattributed):
            skipped = fold_unattributed(skipped, record, partition, key)
            continue
        value, _ = fold(values.get(key.role), record, partition, PARTITIONS, **checks)
        values[key.role] = value
    for role, value in values.items():
        ctx.tables.role_state.data[role.encode()] = role_value.encode(value)
    if skipped is not None:
        ctx.tables.partition_state.data[partition_key(partition)] = (
            partition_value.encode(skipped))


class Worker:
    def __init__(self, name: str, clock: ManualClock, broker: MemoryBroker,
                 fencing: str = "epoch") -> None:
        self.port = free_port()
        settings = Settings(partitions=PARTITIONS, web_port=self.port, web_host="127.0.0.1",
                            member_id=name, app_id=f"test-{name}", fencing=fencing)
        self.ctx = build(settings, store="memory://", roles={}, clock=clock,
                         transport_factory=lambda: MemoryTransport(broker))
        self.ctx.transport = MemoryTransport(broker)
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = TestServer(self.ctx.app.web.web_app, host="127.0.0.1", port=self.port)


@pytest.fixture
async def workers():
    clock = ManualClock(NOW)
    broker = MemoryBroker(clock=clock)
    broker.create_topic(STATE_TOPIC, PARTITIONS)
    a, b = Worker("a", clock, broker), Worker("b", clock, broker)
    owners = {a.url: sorted(A_PARTS), b.url: sorted(B_PARTS)}
    async with aiohttp.ClientSession() as session:
        for worker in (a, b):
            worker.ctx.router = StaticRouter(owners, worker.url)
            worker.ctx.http = session
            await worker.server.start_server()
        log = Log()
        log.register(A_ROLE, "a")
        log.register(A_ROLE, "b")
        log.lease(A_ROLE, "a", _token(1000, 3), granted_at=NOW - 1000, deadline=NOW + 29_000)
        log.raw(b"\x01garbage", b"\x02")
        fold_into(a.ctx, log.records, role_partition(A_ROLE, PARTITIONS))
        other = Log()
        other.register(A_OTHER, "c")
        fold_into(a.ctx, other.records, role_partition(A_OTHER, PARTITIONS))
        remote = Log()
        remote.register(B_ROLE, "b")
        remote.lease(B_ROLE, "b", _token(1001, 0), deadline=NOW - 1)  # lapsed
        fold_into(b.ctx, remote.records, role_partition(B_ROLE, PARTITIONS))
        yield a, b, session, broker
        for worker in (a, b):
            await worker.server.close()


def _token(producer_id: int, producer_epoch: int):
    from krabka import FencingToken
    return FencingToken(producer_id, producer_epoch)


async def get(session: aiohttp.ClientSession, url: str):
    async with session.get(url) as response:
        ctype = response.content_type
        body = await response.json() if ctype == "application/json" else await response.text()
        return response.status, ctype, body


SUMMARY_FIELDS = {"role", "holder", "token", "deadline", "status", "members", "offset"}


async def test_roles_gathers_every_worker_in_the_documented_shape(workers):
    a, b, session, _ = workers
    for worker in (a, b):
        status, ctype, body = await get(session, f"{worker.url}/roles/")
        assert (status, ctype) == (200, "application/json")
        rows = {row["role"]: row for row in body["roles"]}
        assert set(rows) == {A_ROLE, A_OTHER, B_ROLE}
        for row in rows.values():
            assert set(row) == SUMMARY_FIELDS
        assert rows[A_ROLE] == {
            "role": A_ROLE, "holder": "a", "token": {"producer_id": 1000, "producer_epoch": 3},
            "deadline": NOW + 29_000, "status": "held", "members": 2,
            "offset": 2,  # the last of its records folded (the garbage key is the partition's)
        }
        assert rows[B_ROLE]["status"] == "lapsed"
        assert rows[A_OTHER] == {"role": A_OTHER, "holder": None, "token": None,
                                 "deadline": None, "status": "vacant", "members": 1,
                                 "offset": 0}
        assert body["unavailable"] == []


async def test_a_role_is_answered_by_the_worker_owning_it(workers):
    a, b, session, _ = workers
    status, _, local = await get(session, f"{a.url}/roles/{A_ROLE}/")
    assert status == 200
    assert local["served_by"] == a.url
    assert local["roster"] == [
        {"member": "a", "rank": 0, "offset": 0, "registered_at": 0},
        {"member": "b", "rank": 1, "offset": 1, "registered_at": 0},
    ]
    assert local["lease"] == {"member": "a", "token": {"producer_id": 1000, "producer_epoch": 3},
                              "tenure": 2, "granted_at": NOW - 1000, "deadline": NOW + 29_000}
    # The garbage key in the role's partition is counted and shown.
    assert local["skipped"] == 1
    assert local["last_error"]["offset"] == 3
    assert SUMMARY_FIELDS | {"roster", "lease", "skipped", "last_error"} <= set(local)
    status, _, routed = await get(session, f"{a.url}/roles/{B_ROLE}/")
    assert status == 200
    assert routed["served_by"] == b.url
    assert routed["holder"] == "b"
    assert routed["status"] == "lapsed"


async def test_unknown_roles_are_404_json_wherever_they_live(workers):
    a, _, session, _ = workers
    for name in roles_in(A_PARTS, 1, "nobody") + roles_in(B_PARTS, 1, "nobody"):
        status, ctype, body = await get(session, f"{a.url}/roles/{name}/")
        assert (status, ctype) == (404, "application/json")
        assert "unknown role" in body["error"]


async def test_an_unreachable_owner_is_a_503_json(workers):
    a, b, session, _ = workers
    await b.server.close()
    status, ctype, body = await get(session, f"{a.url}/roles/{B_ROLE}/")
    assert (status, ctype) == (503, "application/json")
    assert "unreachable" in body["error"]
    status, _, body = await get(session, f"{a.url}/roles/")
    assert status == 200
    assert {row["role"] for row in body["roles"]} == {A_ROLE, A_OTHER}
    assert body["unavailable"][0]["worker"] == b.url
    assert body["unavailable"][0]["partitions"] == sorted(B_PARTS)


async def test_an_unassigned_group_is_a_503_json(workers):
    a, _, session, _ = workers
    a.ctx.router = StaticRouter({}, a.url)
    for path in ("/roles/", f"/roles/{A_ROLE}/"):
        status, _, body = await get(session, a.url + path)
        assert status == 503
        assert "rebalancing" in body["error"]


@pytest.mark.parametrize(("query", "message"), [
    ("", "missing query parameter producer_id"),
    ("producer_id=1", "missing query parameter producer_epoch"),
    ("producer_id=x&producer_epoch=0", "not an integer"),
    ("producer_id=1.5&producer_epoch=0", "not an integer"),
    ("producer_id=1_000&producer_epoch=0", "not an integer"),
    ("producer_id=1&producer_epoch=32768", "signed 16-bit"),
    ("producer_id=1&producer_epoch=-32769", "signed 16-bit"),
    ("producer_id=9223372036854775808&producer_epoch=0", "signed 64-bit"),
])
async def test_authoritative_rejects_bad_parameters_with_400(workers, query, message):
    a, _, session, _ = workers
    status, ctype, body = await get(session, f"{a.url}/roles/{A_ROLE}/authoritative?{query}")
    assert (status, ctype) == (400, "application/json")
    assert message in body["error"]


async def test_authoritative_answers_the_coordinator_s_current_token(workers):
    a, _, session, broker = workers
    token = broker.init_producer_id(A_ROLE, 30.0, None)
    base = f"{a.url}/roles/{A_ROLE}/authoritative"
    query = f"producer_id={token.producer_id}&producer_epoch={token.producer_epoch}"
    status, _, body = await get(session, f"{base}?{query}")
    current = {"producer_id": token.producer_id, "producer_epoch": token.producer_epoch}
    assert (status, body) == (200, {"role": A_ROLE, "authoritative": True, "current": current})
    stale = f"producer_id={token.producer_id}&producer_epoch={token.producer_epoch - 1}"
    status, _, body = await get(session, f"{base}?{stale}")
    assert (status, body["authoritative"], body["current"]) == (200, False, current)
    # Any in-width pair is a 200, even for a role nobody ever took.
    status, _, body = await get(
        session, f"{a.url}/roles/never-taken/authoritative?producer_id=-1&producer_epoch=-1")
    assert (status, body) == (200, {"role": "never-taken", "authoritative": False,
                                    "current": None})


async def test_authoritative_without_a_cluster_connection_is_503(workers):
    a, _, session, _ = workers
    a.ctx.transport = None
    status, _, body = await get(
        session, f"{a.url}/roles/{A_ROLE}/authoritative?producer_id=1&producer_epoch=0")
    assert status == 503
    assert "not connected" in body["error"]


async def test_an_over_long_role_name_is_a_400(workers):
    a, _, session, _ = workers
    # aiohttp refuses request lines over 8190 bytes itself (400, plain text),
    # before any handler runs.
    status, _, _ = await get(session, f"{a.url}/roles/{'r' * 9000}/")
    assert status == 400


def test_role_names_over_the_format_limit_are_bad_requests():
    request = make_mocked_request("GET", "/roles/x/", match_info={"role": "r" * 32768})
    with pytest.raises(BadRequest, match="1 to 32767 UTF-8 bytes"):
        _role_name(request)
    request = make_mocked_request("GET", "/roles/x/", match_info={"role": "\udc80"})
    with pytest.raises(BadRequest, match="not valid UTF-8"):
        _role_name(request)


async def test_unknown_paths_and_unexpected_failures_are_json_never_500(workers):
    a, _, session, _ = workers
    status, ctype, body = await get(session, f"{a.url}/no/such/path")
    assert (status, ctype) == (404, "application/json")
    a.ctx.tables.role_state.data[A_ROLE.encode()] = b"not json"
    status, ctype, body = await get(session, f"{a.url}/roles/{A_ROLE}/")
    assert (status, ctype) == (503, "application/json")
    assert "could not answer" in body["error"]


async def test_metrics_are_prometheus_text(workers):
    a, b, session, _ = workers
    a.ctx.metrics.leading("demo", True)
    a.ctx.metrics.lease_written("demo", 0.004)
    a.ctx.metrics.skip(1, "undecodable-key")
    a.ctx.metrics.fenced("demo")
    a.ctx.metrics.event("elected")
    async with session.get(f"{a.url}/metrics") as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        text = await response.text()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("coordination_roles_held", (("role", "demo"),))] == 1
    assert samples[("coordination_elections_total", (("role", "demo"),))] == 1
    assert samples[("coordination_fences_total", (("role", "demo"),))] == 1
    assert samples[("coordination_events_total", (("kind", "elected"),))] == 1
    assert samples[("coordination_skipped_records_total",
                    (("partition", "1"), ("reason", "undecodable-key")))] == 1
    assert samples[("coordination_lease_write_seconds_bucket",
                    (("le", "0.005"), ("role", "demo")))] == 1
    assert samples[("coordination_lease_write_seconds_count", (("role", "demo"),))] == 1
    assert samples[("process_open_fds", ())] > 0
    assert ("faust_total_rebalances", ()) in samples
    # The other worker in this process has figures of its own.
    _, _, other = await get(session, f"{b.url}/metrics")
    assert 'coordination_roles_held{role="demo"}' not in other


async def test_metrics_are_openmetrics_when_the_scraper_asks_for_it(workers):
    a, _, session, _ = workers
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    async with session.get(f"{a.url}/metrics", headers={"Accept": accept}) as response:
        assert response.status == 200
        assert response.content_type == "application/openmetrics-text"
        text = await response.text()
    assert text.endswith("# EOF\n")
    assert "# TYPE coordination_elections counter" in text


async def test_the_dashboard_is_one_self_contained_page_that_follows_the_events(workers):
    a, _, session, _ = workers
    status, ctype, text = await get(session, f"{a.url}/")
    assert (status, ctype) == (200, "text/html")
    assert 'new EventSource("/events/")' in text
    assert text.count('fetch("/roles/"') == 1  # the listing, read once (the browser test
    # checks that it is not asked again)
    for external in ("http://", "https://", "<script src", "<link", "@import", "url("):
        assert external not in text


async def test_a_role_detail_reports_tenures_begun_out_of_the_workers_placement_order(workers):
    a, _, session, _ = workers
    role = roles_in(A_PARTS, 3, "alpha")[2]
    log = Log()
    for member in ("x", "y", "z"):
        log.register(role, member)
    log.lease(role, "x", _token(1000, 0), granted_at=NOW - 30_000, deadline=NOW)
    # By registration y challenges at the deadline and z one stagger later:
    # z taking the role at the deadline followed other rules.
    log.lease(role, "z", _token(1001, 0), granted_at=NOW, deadline=NOW + 30_000)
    fold_into(a.ctx, log.records, role_partition(role, PARTITIONS),
              placement="registration", challenge_stagger=5.0)
    status, _, body = await get(session, f"{a.url}/roles/{role}/")
    assert status == 200
    assert body["out_of_order"] == {"count": 1, "last": {
        "offset": 4, "member": "z", "granted_at": NOW, "slot": NOW + 5000,
        "placement": "registration"}}
    _, _, calm = await get(session, f"{a.url}/roles/{A_ROLE}/")
    assert calm["out_of_order"] == {"count": 0, "last": None}


@pytest.fixture
async def term_worker():
    """A term-mode worker whose role `A_ROLE` was claimed in term 2 by "a", 1 s ago."""
    clock = ManualClock(NOW)
    broker = MemoryBroker(clock=clock)
    broker.create_topic(STATE_TOPIC, PARTITIONS)
    broker.create_topic(TERMS_TOPIC, PARTITIONS)
    worker = Worker("a", clock, broker, fencing="term")
    worker.ctx.router = StaticRouter({worker.url: list(range(PARTITIONS))}, worker.url)
    await worker.ctx.transport.append_term(
        role_partition(A_ROLE, PARTITIONS), encode_term_key(claim_key(A_ROLE, "a", 2)),
        encode_claim(Claim("a", 2, 0)))
    clock.advance(1.0)
    async with aiohttp.ClientSession() as session:
        worker.ctx.http = session
        await worker.server.start_server()
        yield worker, session, clock
        await worker.server.close()


async def test_in_term_mode_authoritative_compares_a_term_with_the_terms_topic(term_worker):
    worker, session, clock = term_worker
    base = f"{worker.url}/roles/{A_ROLE}/authoritative"
    status, _, body = await get(session, f"{base}?term=2")
    assert (status, body) == (200, {"role": A_ROLE, "authoritative": True,
                                    "current": {"term": 2}, "holder": "a", "live": True})
    status, _, body = await get(session, f"{base}?term=1")
    assert (status, body["authoritative"], body["current"]) == (200, False, {"term": 2})
    # Past the election timeout the term is still the highest, but not live.
    clock.advance(worker.ctx.settings.lease_duration)
    status, _, body = await get(session, f"{base}?term=2")
    assert (status, body["authoritative"], body["live"]) == (200, True, False)
    status, _, body = await get(session, f"{worker.url}/roles/never-claimed/authoritative?term=1")
    assert (status, body) == (200, {"role": "never-claimed", "authoritative": False,
                                    "current": None, "holder": None, "live": False})


@pytest.mark.parametrize(("query", "message"), [
    ("", "missing query parameter term"),
    ("producer_id=1&producer_epoch=0", "missing query parameter term"),
    ("term=x", "not an integer"),
    ("term=9223372036854775808", "signed 64-bit"),
])
async def test_in_term_mode_authoritative_asks_for_a_term(term_worker, query, message):
    worker, session, _ = term_worker
    status, ctype, body = await get(session,
                                    f"{worker.url}/roles/{A_ROLE}/authoritative?{query}")
    assert (status, ctype) == (400, "application/json")
    assert message in body["error"]
