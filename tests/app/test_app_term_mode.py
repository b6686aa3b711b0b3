"""A term-mode worker group (``COORDINATION_FENCING=term``) on the real broker.

Two workers stand for the demo role, which declares its output topic. One is
elected with a term; when it is killed the other claims the next term after
the election timeout, and the web view (its authoritative check included),
the events and the demo output show the terms. Faust runs at_least_once
there, so no worker has a transactional producer.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from krabka.format.partition import role_partition
from krabka.format.terms import TERM_HEADER, decode_term_header
from tests.app.test_app_harness import AppGroup, AppWorker, poll
from tests.support.event_schema import published

pytestmark = pytest.mark.integration

DEMO = "demo"
START = 120  # a worker's start-up, group join and first election
FAILOVER = 60


@pytest.fixture(scope="module")
def group(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory):
    group = AppGroup(kafka_bootstrap, tmp_path_factory.mktemp("term-group"), partitions=4,
                     extra_env={"COORDINATION_FENCING": "term"})
    group.create_topics()
    try:
        for _ in range(2):
            group.start()
        for worker in group.workers:
            poll(worker.health, START, f"worker {worker.port} serving")
        yield group
    finally:
        group.stop_all()


def held(worker: AppWorker, *, not_by: str | None = None, members: int = 1
         ) -> dict[str, Any] | None:
    """The demo role's detail from `worker` while a live member holds it (not `not_by`),
    with at least `members` registered."""
    status, body = worker.get(f"/roles/{DEMO}/")
    if (status == 200 and body["status"] == "held" and body["holder"] != not_by
            and body["members"] >= members):
        return body
    raise AssertionError(f"worker {worker.port} answers {status}: {body}")


def logs_on_failure(group: AppGroup) -> Any:
    """Reraise an AssertionError with the tail of every worker's log."""
    class Show:
        def __enter__(self) -> None:
            return None

        def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
            if isinstance(exc, AssertionError):
                tails = "\n".join(f"--- worker {w.port}\n{w.log_tail(60)}" for w in group.workers)
                raise AssertionError(f"{exc}\n{tails}") from exc
    return Show()


def elected_events(group: AppGroup) -> list[dict[str, Any]]:
    seen, events = set(), []
    for record in group.read(group.events_topic):
        event = published(record.value)
        key = (event["role"], event["kind"], event["offset"])
        if event["role"] == DEMO and event["kind"] == "elected" and key not in seen:
            seen.add(key)
            events.append(event)
    return events


def test_a_term_mode_group_elects_fails_over_with_a_higher_term_and_shows_it(group):
    members = {worker.member for worker in group.workers}
    with logs_on_failure(group):
        first = poll(lambda: held(group.workers[0], members=2), START,
                     "a term-mode holder of the demo role, both workers registered")
    assert first["fencing"] == "term"
    assert first["holder"] in members
    assert first["term"] >= 1
    assert first["token"] == {"term": first["term"]}
    assert first["resigned"] is False
    assert 0 <= first["heartbeat_age"] < group.settings["lease"] * 1000
    assert first["terms"]["term"] == first["term"]
    assert first["lease"] is None  # term mode writes no lease
    listing = poll(lambda: group.workers[1].get("/roles/")[1]["roles"] or None, 30,
                   "the listing of the other worker")
    row = next(r for r in listing if r["role"] == DEMO)
    assert (row["fencing"], row["holder"], row["term"]) == ("term", first["holder"],
                                                             first["term"])
    status, check = group.workers[1].get(f"/roles/{DEMO}/authoritative?term={first['term']}")
    assert (status, check["authoritative"], check["holder"], check["live"]) == (
        200, True, first["holder"], True)
    health = next(w for w in group.workers if w.member == first["holder"]).health()
    assert health is not None
    assert health["roles"][DEMO]["leading"]

    victim = next(w for w in group.workers if w.member == first["holder"])
    survivor = next(w for w in group.workers if w is not victim)
    victim.kill()
    killed_at = time.time() * 1000
    with logs_on_failure(group):
        second = poll(lambda: held(survivor, not_by=victim.member), FAILOVER,
                      "the survivor holding the demo role in a higher term", interval=0.5)
    assert second["holder"] == survivor.member
    assert second["term"] > first["term"]
    status, check = survivor.get(f"/roles/{DEMO}/authoritative?term={first['term']}")
    assert (status, check["authoritative"], check["current"]) == (
        200, False, {"term": second["term"]})
    print(f"\nterm-mode SIGKILL failover: term {first['term']} -> {second['term']}, "
          f"the survivor's view held {time.time() * 1000 - killed_at:.0f} ms after the kill "
          f"(election timeout {group.settings['lease']} s)")

    def both() -> tuple[dict[str, Any], dict[str, Any]] | None:
        by_term = {event["token"]["term"]: event for event in elected_events(group)}
        if first["term"] in by_term and second["term"] in by_term:
            return by_term[first["term"]], by_term[second["term"]]
        return None

    old, new = poll(both, FAILOVER, "elected events of both terms", interval=0.5)
    assert old["member"] == victim.member
    assert (new["member"], new["previous_holder"]) == (survivor.member, victim.member)
    assert new["previous_token"] == {"term": first["term"]}
    assert old["token"] == {"term": first["term"]}
    assert new["token"] == {"term": second["term"]}
    assert new["partition"] == role_partition(DEMO, group.partitions)

    stamps = [decode_term_header(value) for record in group.read(group.demo_topic)
              for name, value in record.headers if name == TERM_HEADER]
    assert {stamp.term for stamp in stamps} >= {first["term"], second["term"]}
    assert {stamp.term for stamp in stamps if stamp.barrier} >= {second["term"]}
    assert {stamp.role for stamp in stamps} == {DEMO}
