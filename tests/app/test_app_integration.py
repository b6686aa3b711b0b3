"""Three real worker processes of the Faust app on the real broker.

One worker group (unique topics) is shared by the tests of this module, in
file order: the web view and CLI first, then garbage in the state topic, then
a SIGKILL of the demo role's holder, a clean shutdown, and a restart with a
wiped data directory. Every wait polls a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from krabka import acquire_leadership, describe_role_state
from krabka.format.partition import role_partition
from krabka.format.records import (
    Registration,
    encode_key,
    encode_registration,
    lease_key,
    registration_key,
)
from krabka.kafka import KafkaTransport
from krabka.rules.state import RoleState
from tests.app.test_app_harness import AppGroup, AppWorker, get_text, poll
from tests.support.browser import Browser, chromium
from tests.support.doc_snippets import snippet_at
from tests.support.event_schema import published

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DEMO = "demo"
EXTRA_ROLES = [f"extra-{i}" for i in range(8)]
START = 120  # a worker's start-up, group join and table recovery
FAILOVER = 60


@pytest.fixture(scope="module")
def group(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory):
    group = AppGroup(kafka_bootstrap, tmp_path_factory.mktemp("app-group"))
    group.create_topics()
    try:
        for _ in range(3):
            group.start()
        for worker in group.workers:
            poll(worker.health, START, f"worker {worker.port} serving")
        asyncio.run(_register_extra_roles(group))
        poll(lambda: (_holder(group.workers[0]) or {}).get("members") == 3, START,
             "a holder of the demo role and all three workers registered")
        yield group
    finally:
        group.stop_all()


async def _register_extra_roles(group: AppGroup) -> None:
    async with KafkaTransport(group.bootstrap, topic=group.state_topic) as transport:
        for role in EXTRA_ROLES:
            await transport.append(
                role_partition(role, group.partitions),
                encode_key(registration_key(role, "outsider")),
                encode_registration(Registration("outsider", int(time.time() * 1000))),
            )


def _library_state(group: AppGroup, role: str) -> RoleState:
    async def read() -> RoleState:
        async with KafkaTransport(group.bootstrap, topic=group.state_topic) as transport:
            return await describe_role_state(transport, role, group.partitions)
    return asyncio.run(read())


def _holder(worker: AppWorker) -> dict[str, Any] | None:
    status, body = worker.get(f"/roles/{DEMO}/")
    if status == 200 and body["status"] == "held":
        return body
    return None


def _live(group: AppGroup) -> list[AppWorker]:
    return [w for w in group.workers if w.alive()]


def _worker_of(group: AppGroup, member: str) -> AppWorker:
    return next(w for w in _live(group) if w.member == member)


def _events(group: AppGroup) -> list[dict[str, Any]]:
    seen, events = set(), []
    for record in group.read(group.events_topic):
        event = published(record.value)
        key = (event["role"], event["kind"], event["offset"])
        if key not in seen:
            seen.add(key)
            events.append(event)
    return events


# --- the web view over HTTP --------------------------------------------------------------


def test_every_worker_lists_every_role_in_the_documented_shape(group):
    expected = {DEMO, *EXTRA_ROLES}

    def listing(worker: AppWorker) -> list[dict[str, Any]] | None:
        status, body = worker.get("/roles/")
        roles = body.get("roles", []) if status == 200 else []
        return roles if {row["role"] for row in roles} == expected else None

    for worker in group.workers:
        rows = poll(lambda w=worker: listing(w), 30, f"all roles from {worker.port}")
        for row in rows:
            assert set(row) == {"role", "holder", "token", "deadline", "status", "members",
                                "offset"}
            assert isinstance(row["offset"], int)
        demo = next(row for row in rows if row["role"] == DEMO)
        assert demo["status"] == "held"
        assert demo["members"] == 3
        extra = next(row for row in rows if row["role"] == EXTRA_ROLES[0])
        assert {**extra, "offset": None} == {
            "role": EXTRA_ROLES[0], "holder": None, "token": None, "deadline": None,
            "status": "vacant", "members": 1, "offset": None}


def test_a_role_is_served_by_the_worker_owning_its_partition(group):
    owners = set()
    for role in [DEMO, *EXTRA_ROLES]:
        answers = [poll(lambda w=w, r=role: _ok(w.get(f"/roles/{r}/")), 30, f"{role} detail")
                   for w in group.workers]
        served_by = {body["served_by"] for body in answers}
        assert len(served_by) == 1  # every worker routes to the same owner
        owners |= served_by
        detail = answers[0]
        assert {"roster", "lease", "skipped", "last_error"} <= set(detail)
        assert detail["partition"] == role_partition(role, group.partitions)
    assert owners <= {w.url for w in group.workers}
    assert len(owners) >= 2  # the partitions are spread: some requests were forwarded


def _ok(answer: tuple[int, Any]) -> Any:
    status, body = answer
    return body if status == 200 else None


def test_the_demo_role_detail_and_the_authoritative_check(group):
    worker = group.workers[1]
    detail = poll(lambda: _holder(worker), 30, "the demo holder")
    lease = detail["lease"]
    assert lease["member"] == detail["holder"]
    assert [entry["rank"] for entry in detail["roster"]] == [0, 1, 2]
    assert {entry["member"] for entry in detail["roster"]} == {w.member for w in group.workers}
    token = lease["token"]
    base = f"/roles/{DEMO}/authoritative?producer_id={token['producer_id']}"
    status, body = worker.get(f"{base}&producer_epoch={token['producer_epoch']}")
    assert (status, body) == (200, {"role": DEMO, "authoritative": True, "current": token})
    status, body = worker.get(f"{base}&producer_epoch={token['producer_epoch'] - 1}")
    assert (status, body["authoritative"]) == (200, False)


@pytest.mark.parametrize(("path", "status"), [
    ("/roles/no-such-role/", 404),
    ("/roles/demo/authoritative", 400),
    ("/roles/demo/authoritative?producer_id=1&producer_epoch=x", 400),
    ("/roles/demo/authoritative?producer_id=1&producer_epoch=40000", 400),
    ("/no/such/path", 404),
])
def test_bad_requests_get_json_errors(group, path, status):
    for worker in group.workers:
        got, body = worker.get(path)
        assert got == status
        assert isinstance(body, dict)
        assert isinstance(body["error"], str)


def _metrics(worker: AppWorker) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, ctype, text = get_text(worker.url + "/metrics")
    assert (status, ctype) == (200, "text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_and_dashboard(group):
    holder = poll(lambda: _holder(group.workers[0]), 30, "the demo holder")["holder"]
    leader = _worker_of(group, holder)
    figures = _metrics(leader)
    role = (("role", DEMO),)
    assert figures[("coordination_roles_held", role)] == 1
    assert figures[("coordination_elections_total", role)] >= 1
    assert figures[("coordination_lease_write_seconds_count", role)] >= 1
    assert figures[("process_open_fds", ())] > 0
    for worker in group.workers:
        if worker is not leader:
            assert _metrics(worker)[("coordination_roles_held", role)] == 0  # stands, not held
    # Faust's own sensor counts what this worker consumed and committed.
    poll(lambda: _metrics(leader)[("faust_messages_received_total", ())] > 0, 30,
         "Faust's sensor counting received messages")
    poll(lambda: _metrics(leader)[("faust_consumer_commit_latency_count", ())] > 0, 30,
         "Faust's sensor timing commits")
    # Every state partition is folded by one worker, which exports its lag.
    poll(lambda: {dict(labels)["partition"] for worker in group.workers
                  for (name, labels) in _metrics(worker) if name == "coordination_fold_lag_offsets"}
         == {str(p) for p in range(group.partitions)}, 30, "the fold lag of every state partition")
    status, ctype, _html = get_text(group.workers[2].url + "/")
    assert (status, ctype) == (200, "text/html")


@pytest.mark.skipif(chromium() is None, reason="Debian's chromium package is not installed")
def test_the_dashboard_in_headless_chromium_follows_the_roles_through_server_sent_events(
        group):
    """The page lists every role with its holder, then shows a role elected and
    resigned after it loaded, without a reload and without asking /roles/ again."""
    asyncio.run(_dashboard_follows_the_events(group, group.workers[0]))


ROWS = """Object.fromEntries([...document.querySelectorAll('#roles tbody tr')].map(tr =>
  [tr.dataset.role, {status: tr.querySelector('.status').textContent,
                     holder: tr.querySelector('.holder').textContent,
                     tenures: [...tr.querySelectorAll('.tenure')].map(t =>
                       [t.dataset.member, t.dataset.end])}]))"""
FEED = "[...document.querySelectorAll('#feed li')].map(li => [li.dataset.role, li.dataset.kind])"


async def _dashboard_follows_the_events(group: AppGroup, worker: AppWorker) -> None:
    async def until(expression: str, check, what: str, within: float = 60) -> Any:
        deadline = time.monotonic() + within
        while True:
            value = await browser.evaluate(expression)
            if check(value):
                return value
            assert time.monotonic() < deadline, f"{what}: still {value!r} after {within} s"
            await asyncio.sleep(0.2)

    late = f"late-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    async with Browser() as browser, \
            KafkaTransport(group.bootstrap, topic=group.state_topic) as transport:
        await browser.open(worker.url + "/")
        await until("document.body && document.body.dataset.stream", lambda s: s == "open",
                    "the EventSource connected")
        shown = await until(ROWS, lambda rows: {DEMO, *EXTRA_ROLES} <= set(rows or {}),
                            "every role listed")
        status, api = worker.get("/roles/")
        assert status == 200
        # The demo holder is stable between the two reads (nobody is failing over).
        assert {role: row["holder"] for role, row in shown.items()} == {
            row["role"]: row["holder"] or "\u2014" for row in api["roles"]}
        loaded = len(browser.requests)

        leadership = await acquire_leadership(
            transport, late, "outsider-late", partitions=group.partitions,
            lease_duration=10, renew_interval=2, challenge_stagger=1)
        rows = await until(ROWS, lambda rows: rows.get(late, {}).get("holder") ==
                           "outsider-late", "the role elected after the page loaded")
        assert rows[late]["status"] == "held"
        assert rows[late]["tenures"] == [["outsider-late", "ongoing"]]
        await leadership.resign()
        rows = await until(ROWS, lambda rows: rows[late]["status"] == "vacant",
                           "the resignation")
        assert rows[late]["tenures"] == [["outsider-late", "resigned"]]
        # The vacancy and the deregistration are two records, so the row can turn
        # vacant before the member-left event arrives: wait for the last event.
        feed = await until(FEED, lambda feed: any(item == [late, "member-left"] for item in feed),
                           "the member-left event")
        assert [kind for role, kind in reversed(feed) if role == late] == [
            "member-joined", "elected", "resigned", "member-left"]
        workers = await browser.evaluate(
            "Object.fromEntries([...document.querySelectorAll('#workers li')].map(li =>"
            " [li.dataset.worker, Number(li.querySelector('.count').textContent)]))")
        holder = next(row["holder"] for row in api["roles"] if row["role"] == DEMO)
        assert workers[holder] >= 1

        # The filter keeps the roles whose name or worker matches.
        async def filtered(text: str) -> set[str]:
            await browser.evaluate(
                "(() => { const f = document.getElementById('filter'); "
                f"f.value = {json.dumps(text)}; f.dispatchEvent(new Event('input')); }})()")
            return set(await browser.evaluate(ROWS))
        assert await filtered(late) == {late}
        assert await filtered(holder) == {DEMO}  # the only role it holds, or held while seen
        assert await filtered("") >= {DEMO, late, *EXTRA_ROLES}

        after = browser.requests[loaded:]
        assert [r["url"] for r in after if "/roles/" in r["url"]] == []  # no polling
        streams = [r for r in browser.requests if r["type"] == "EventSource"]
        assert [r["url"] for r in streams] == [worker.url + "/events/"]  # never reconnected
        artifacts = ROOT / "test-artifacts"
        artifacts.mkdir(exist_ok=True)
        screenshot = artifacts / "dashboard.png"
        screenshot.unlink(missing_ok=True)
        screenshot.write_bytes(await browser.screenshot())
        assert screenshot.stat().st_size > 10_000
        print(f"\ndashboard screenshot: {screenshot}")


# --- the operator CLI -----------------------------------------------------------------


def test_the_operator_cli_lists_the_workers_roles_and_their_tokens(group):
    listed = group.cli("roles", "--topic", group.state_topic,
                       "--partitions", str(group.partitions))
    assert listed.returncode == 0, listed.stderr
    rows = {row["role"]: row for row in orjson.loads(listed.stdout)["roles"]}
    assert {DEMO, *EXTRA_ROLES} <= set(rows)
    assert rows[DEMO]["status"] == "held"
    assert rows[DEMO]["holder"] is not None
    # The demo holder keeps its tenure (nobody is failing over): the token the
    # log lists is the coordinator's current one.
    described = group.cli("describe", DEMO)
    assert described.returncode == 0, described.stderr
    assert orjson.loads(described.stdout)["token"] == rows[DEMO]["token"]


# --- garbage in the state topic --------------------------------------------------------


def test_garbage_is_counted_shown_and_does_not_stop_the_fold(group):
    partition = role_partition(DEMO, group.partitions)
    elsewhere = next(f"m{i}" for i in range(100)
                     if role_partition(f"m{i}", group.partitions) != partition)
    before = poll(lambda: _holder(group.workers[0]), 30, "the demo holder")
    offsets = asyncio.run(_produce(group.bootstrap, group.state_topic, partition, [
        (b"\xde\xad\xbe\xef garbage key", b"garbage value"),
        (encode_key(lease_key(DEMO)), b"\x00\x00 not a lease"),
        (encode_key(registration_key(elsewhere, "x")), b"misplaced"),
    ]))

    def counted() -> dict[str, Any] | None:
        body = _ok(group.workers[0].get(f"/roles/{DEMO}/"))
        if body and body["skipped"] >= before["skipped"] + 3 and \
                body["last_error"]["offset"] == offsets[-1]:
            return body
        return None

    after = poll(counted, 30, "the garbage counted in the demo role's view")
    assert after["misplaced"] >= 1
    reasons = {e["offset"]: e["reason"] for e in after["errors"]}
    assert "malformed key" in reasons[offsets[0]]
    assert "malformed lease value" in reasons[offsets[1]]
    assert "belongs to partition" in reasons[offsets[2]]
    # The fold goes on: later renewals of the demo lease still reach the table.
    poll(lambda: (_holder(group.workers[0]) or {"lease": {"granted_at": 0}})["lease"][
        "granted_at"] > after["lease"]["granted_at"], 30, "a renewal after the garbage")
    assert after["holder"] == before["holder"]


async def _produce(bootstrap: str, topic: str, partition: int,
                   records: list[tuple[bytes, bytes]]) -> list[int]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        return [(await producer.send_and_wait(topic, value, key=key, partition=partition)).offset
                for key, value in records]
    finally:
        await producer.stop()


# --- the events snippet of the README ----------------------------------------------------


def test_the_subscriber_snippet_in_the_readme_prints_the_events(group, tmp_path):
    snippet = snippet_at("README.md", "integration", "tests/app/test_app_integration.py")
    script = tmp_path / "follow_events.py"
    script.write_text(snippet.code)
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": group.bootstrap,
           "COORDINATION_EVENTS_TOPIC": group.events_topic, "EVENTS_STOP_WHEN_IDLE": "1"}
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                         text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    printed = [published(orjson.loads(line)) for line in run.stdout.splitlines()]
    keys = [(e["role"], e["kind"], e["offset"]) for e in printed]
    assert len(keys) == len(set(keys))
    assert any(e["kind"] == "elected" and e["role"] == DEMO for e in printed)
    assert any(e["kind"] == "member-joined" and e["role"] == EXTRA_ROLES[0] for e in printed)


# --- failover ----------------------------------------------------------------------------


def test_a_sigkill_moves_the_role_and_the_events_carry_both_elections(group):
    first = poll(lambda: _holder(group.workers[0]), 30, "the demo holder")
    victim = _worker_of(group, first["holder"])
    survivor = next(w for w in _live(group) if w is not victim)
    # A role on a partition the victim owns, for the 503 while it is gone.
    owned = next((r for r in EXTRA_ROLES
                  if (_ok(survivor.get(f"/roles/{r}/")) or {}).get("served_by") == victim.url),
                 None)
    victim.kill()
    killed_at = time.time() * 1000
    if owned is not None:
        status, body = survivor.get(f"/roles/{owned}/")
        assert status in {503, 200}  # 200 once the group has rebalanced
        if status == 503:
            assert "unreachable" in body["error"] or "rebalancing" in body["error"]

    def moved() -> RoleState | None:
        state = _library_state(group, DEMO)
        lease = state.lease
        if lease and lease.member != first["holder"] and lease.deadline > time.time() * 1000:
            return state
        return None

    second = poll(moved, FAILOVER, "the demo role on another worker", interval=0.5)
    assert second.holder in {w.member for w in _live(group)}
    assert second.lease is not None
    print(f"\nSIGKILL failover: new lease granted {second.lease.granted_at - killed_at:.0f} ms "
          f"after the kill (lease {group.settings['lease']} s)")

    def both_elections() -> tuple[dict[str, Any], dict[str, Any]] | None:
        elected = [e for e in _events(group) if e["role"] == DEMO and e["kind"] == "elected"]
        old = [e for e in elected if e["tenure"] == first["lease"]["tenure"]]
        new = [e for e in elected if e["tenure"] == second.tenure]
        return (old[0], new[0]) if old and new else None

    old, new = poll(both_elections, FAILOVER, "elected events of both tenures", interval=0.5)
    assert (old["member"], old["token"]) == (first["holder"], first["lease"]["token"])
    assert new["member"] == second.holder
    assert new["tenure"] > old["tenure"]
    assert new["offset"] > old["offset"]  # in tenure order in the partition
    assert (new["previous_holder"], new["previous_token"]) == (first["holder"],
                                                               first["lease"]["token"])
    assert new["partition"] == role_partition(DEMO, group.partitions)
    _check_demo_output(group, {old["tenure"], new["tenure"]})
    # Replace the killed worker (same port and data directory: an unclean restart).
    # It keeps its tables (they hold only what was committed) and reads the rest.
    replacement = group.start(victim.port)
    poll(replacement.health, START, "the replacement worker")
    poll(lambda: "table recovery: read" in replacement.log.read_text(), START,
         "the replacement's table recovery")
    assert "rebuilding the tables" not in replacement.log.read_text()


def _check_demo_output(group: AppGroup, tenures: set[int]) -> None:
    """The fenced output, read_committed, never shows an older tenure after a newer one."""
    def complete() -> list[dict[str, Any]] | None:
        records = [orjson.loads(r.value) for r in group.read(group.demo_topic)]
        return records if tenures <= {r["tenure"] for r in records} else None

    records = poll(complete, FAILOVER, "demo output of both tenures", interval=0.5)
    seen = [r["tenure"] for r in records]
    assert seen == sorted(seen)
    for tenure in tenures:
        sequence = [r["seq"] for r in records if r["tenure"] == tenure]
        assert sequence == sorted(sequence)


def test_a_clean_shutdown_resigns_and_hands_over_before_the_deadline(group):
    current = poll(lambda: _holder(_live(group)[0]), FAILOVER, "the demo holder")
    leaving = _worker_of(group, current["holder"])
    took = leaving.stop()
    assert took < 15
    assert leaving.process.returncode == 0, leaving.log_tail()

    def handover() -> tuple[dict[str, Any], dict[str, Any]] | None:
        events = [e for e in _events(group) if e["role"] == DEMO]
        resigned = [e for e in events if e["kind"] == "resigned"
                    and e["tenure"] == current["lease"]["tenure"]]
        if not resigned:
            return None
        elected = [e for e in events if e["kind"] == "elected"
                   and e["offset"] > resigned[0]["offset"]]
        return (resigned[0], elected[0]) if elected else None

    resigned, elected = poll(handover, FAILOVER, "resigned, then elected", interval=0.5)
    assert resigned["member"] == current["holder"]
    assert elected["member"] != current["holder"]
    assert elected["previous_holder"] == current["holder"]
    # The successor's lease was granted before the resigned lease would have lapsed.
    assert elected["granted_at"] < resigned["deadline"]
    print(f"\nclean shutdown took {took:.2f} s; handover "
          f"{elected['granted_at'] - resigned['timestamp']} ms after the tombstone")
    group.start(leaving.port)


def test_a_worker_restarted_with_a_wiped_data_dir_restores_its_tables(group):
    worker = next(w for w in _live(group) if w.health())
    worker.stop()
    shutil.rmtree(group.folder / f"data-{worker.port}")
    restarted = group.start(worker.port)
    poll(restarted.health, START, "the restarted worker")

    def local_roles() -> list[str] | None:
        status, body = restarted.get("/roles/?scope=local")
        return [row["role"] for row in body["roles"]] if status == 200 and body["roles"] \
            else None

    roles = poll(local_roles, START, "roles on the restarted worker's partitions")
    for role in roles:
        poll(lambda r=role: _agrees(restarted, group, r), 30,
             f"the restored {role} agreeing with describe_role_state")


def _agrees(worker: AppWorker, group: AppGroup, role: str) -> bool:
    status, body = worker.get(f"/roles/{role}/")
    if status != 200 or body["served_by"] != worker.url:
        return False
    state = _library_state(group, role)
    roster = [(e["member"], e["offset"], e["registered_at"]) for e in body["roster"]]
    lease = body["lease"]
    expected_lease = None if state.lease is None else {
        "member": state.lease.member,
        "token": {"producer_id": state.lease.producer_id,
                  "producer_epoch": state.lease.producer_epoch},
        "tenure": state.tenure, "granted_at": state.lease.granted_at,
        "deadline": state.lease.deadline,
    }
    return (roster == [(e.member, e.offset, e.registered_at) for e in state.entries]
            and lease == expected_lease)
