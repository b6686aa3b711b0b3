"""A term-mode hand-over at its edges, on the in-process model with time driven by hand.

What these pin down: the runner starts the role's function only once this
term's barrier is on every declared output partition, so a deposed term's
record either precedes the function's start or is dropped by every
`TermFilter`; a resigning leader's sends still in flight land before its
resign heartbeat; a claim answered after its own fence deadline is handed
back and the member claims again; and a claim whose answer is in flight
when the campaign is stopped is given back, so a standby claims at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from krabka import (
    TERMS_TOPIC,
    LeaderRunner,
    Leadership,
    LeadershipOptions,
    RunnerObserver,
    TermFilter,
    TermLeadership,
    TermToken,
    TransportError,
    acquire_leadership,
    decode_term_header,
    role_partition,
)
from krabka.format.terms import TERM_HEADER, TermKind, decode_heartbeat, decode_term_key
from krabka.term.fold import build_term_view
from krabka.testing import MemoryBroker, MemoryTransport
from tests.support.sim import LEASE, RENEW, STAGGER, Cluster

ROLE = "billing"
OUTPUTS = ("out", "wide")
TERM = LeadershipOptions(partitions=4, lease_duration=LEASE, renew_interval=RENEW,
                         challenge_stagger=STAGGER, fencing="term", outputs=OUTPUTS)
FENCE_DEADLINE_MS = TERM.lease_ms - TERM.margin_ms


def term_cluster() -> Cluster:
    cluster = Cluster()
    cluster.broker.create_topic("wide", 3, compacted=False)
    return cluster


def terms_view(cluster: Cluster):
    partition = role_partition(ROLE, cluster.partitions)
    return build_term_view(ROLE, cluster.broker.partition(TERMS_TOPIC, partition)
                           .read_committed(0).records)


def resigns(cluster: Cluster) -> list[tuple[str, int]]:
    """The resign heartbeats on the role's terms partition: ``(member, term)``."""
    partition = role_partition(ROLE, cluster.partitions)
    found = []
    for record in cluster.broker.partition(TERMS_TOPIC, partition).read_committed(0).records:
        if decode_term_key(record.key).kind == TermKind.HEARTBEAT:
            heartbeat = decode_heartbeat(record.value)
            if heartbeat.resigned:
                found.append((heartbeat.member, heartbeat.term))
    return found


async def sleep_ms(clock, ms: int) -> None:
    await clock.sleep_until_monotonic(clock.monotonic_ms() + ms)


class Landings(list[tuple[str, str, int | None]]):
    """What reached the broker, in the order it did: ``(what, member, term)``,
    `what` one of ``record``, ``barrier``, ``claim``, ``heartbeat``, ``resign``."""


class LateProducer(MemoryTransport):
    """A member's client whose output records reach the broker `record_ms`
    (data) or `barrier_ms` (barriers) of clock time after they are sent, and
    whose first `slow_claims` claims take `claim_ms`.

    As with a real producer, what was handed over is not recalled: a record
    lands after its delay even when its sender has been cancelled meanwhile.
    Every landing is appended to `landings`.
    """

    def __init__(self, broker: MemoryBroker, member: str, landings: Landings, *,
                 record_ms: int = 0, barrier_ms: int = 0, claim_ms: int = 0,
                 slow_claims: int = 0) -> None:
        super().__init__(broker)
        self.member = member
        self.landings = landings
        self.record_ms = record_ms
        self.barrier_ms = barrier_ms
        self.claim_ms = claim_ms
        self.slow_claims = slow_claims
        self.in_flight: set[asyncio.Future[int]] = set()

    def _handed_over(self, landing: Awaitable[int]) -> Awaitable[int]:
        task = asyncio.ensure_future(landing)
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)
        return asyncio.shield(task)

    async def write_output(self, topic, partition, key, value, headers):
        stamp = decode_term_header(dict(headers)[TERM_HEADER])
        delay = self.barrier_ms if stamp.barrier else self.record_ms
        return await self._handed_over(self._land_output(delay, topic, partition, key, value,
                                                         headers, stamp))

    async def _land_output(self, delay, topic, partition, key, value, headers, stamp) -> int:
        await sleep_ms(self.clock, delay)
        offset = await super().write_output(topic, partition, key, value, headers)
        what = "barrier" if stamp.barrier else "record"
        self.landings.append((what, self.member, stamp.term))
        return offset

    async def append_term(self, partition: int, key: bytes, value: bytes) -> int:
        kind = decode_term_key(key).kind
        delay = 0
        if kind == TermKind.CLAIM and self.slow_claims > 0:
            self.slow_claims -= 1
            delay = self.claim_ms
        return await self._handed_over(self._land_term(delay, partition, key, value))

    async def _land_term(self, delay: int, partition: int, key: bytes, value: bytes) -> int:
        await sleep_ms(self.clock, delay)
        offset = await super().append_term(partition, key, value)
        kind = decode_term_key(key).kind
        if kind == TermKind.CLAIM:
            self.landings.append(("claim", self.member, decode_term_key(key).term))
        else:
            heartbeat = decode_heartbeat(value)
            what = "resign" if heartbeat.resigned else "heartbeat"
            self.landings.append((what, self.member, heartbeat.term))
        return offset


class Starts:
    """Role functions that note, as each starts, the end of every declared
    output partition, then send one record per `every_ms` until cancelled."""

    def __init__(self, cluster: Cluster, every_ms: int = 100) -> None:
        self.cluster = cluster
        self.every_ms = every_ms
        self.started: dict[str, tuple[int, dict[tuple[str, int], int]]] = {}

    def function(self, member: str) -> Callable[[Leadership], Awaitable[None]]:
        async def work(leadership: Leadership) -> None:
            ends = {(topic, p): len(self.cluster.broker.records(topic, p))
                    for topic in OUTPUTS
                    for p in range(self.cluster.broker.partition_count(topic))}
            self.started[member] = (leadership.token.term, ends)
            count = 0
            while True:
                async with leadership.transaction() as txn:
                    for topic in OUTPUTS:
                        await txn.send(topic, f"{member}-{count}".encode(), partition=0)
                count += 1
                await sleep_ms(self.cluster.clock, self.every_ms)
        return work


def runner(cluster: Cluster, transport: MemoryTransport, member: str,
           fn: Callable[[Leadership], Awaitable[None]], **kw) -> LeaderRunner:
    return LeaderRunner(transport, ROLE, member, fn, options=TERM, clock=cluster.clock,
                        stop_timeout=LEASE, **kw)


def verdicts(cluster: Cluster, topic: str, partition: int) -> list[tuple[int, str, int]]:
    """Every record of `topic`'s `partition` as a fresh filtering reader judges
    it, in offset order: ``(offset, verdict, term)``."""
    reader = TermFilter(fenced_topics=OUTPUTS)
    return [(offset, reader.admit(topic, partition, r.headers),
             decode_term_header(dict(r.headers)[TERM_HEADER]).term)
            for offset, r in enumerate(cluster.broker.records(topic, partition))]


async def test_a_successors_function_starts_only_once_its_barriers_are_on_every_output_partition():
    """The old leader's last send is in flight when it is stopped; the
    successor's barriers take longer to land than that send. The successor's
    function starts once every declared partition has its barrier, so the old
    record, admitted because it precedes the barrier, also precedes the
    function's start."""
    cluster = term_cluster()
    landings = Landings()
    starts = Starts(cluster)
    old = runner(cluster, LateProducer(cluster.broker, "a", landings, record_ms=300), "a",
                 starts.function("a"))
    new = runner(cluster, LateProducer(cluster.broker, "b", landings, barrier_ms=400), "b",
                 starts.function("b"))
    try:
        old.start()
        await cluster.until(lambda: "a" in starts.started, within=LEASE)
        new.start()
        await cluster.advance(RENEW)
        # The old function is cancelled with a record handed to the producer.
        stopping = asyncio.ensure_future(old.stop())
        await cluster.until(lambda: "b" in starts.started, within=LEASE * 2)
        await cluster.until(stopping.done, within=LEASE)
        await cluster.advance(RENEW)
    finally:
        await cluster.stop_runners(old, new)
    term, ends = starts.started["b"]
    assert term == 2
    for (topic, partition), end in ends.items():
        before_start = verdicts(cluster, topic, partition)[:end]
        assert ("barrier", 2) in [(verdict, t) for _, verdict, t in before_start], \
            f"{topic}-{partition} had no barrier of term 2 when the function started"
        admitted_old = [offset for offset, verdict, t in verdicts(cluster, topic, partition)
                        if verdict == "pass" and t < term]
        assert all(offset < end for offset in admitted_old), \
            f"an old-term record of {topic}-{partition} was admitted after the function started"


async def test_a_resigning_leaders_sends_in_flight_land_before_its_resign_heartbeat():
    cluster = term_cluster()
    landings = Landings()
    starts = Starts(cluster)
    leader = runner(cluster, LateProducer(cluster.broker, "a", landings, record_ms=300), "a",
                    starts.function("a"))
    try:
        leader.start()
        await cluster.until(lambda: "a" in starts.started, within=LEASE)
        await cluster.advance(RENEW)
        stopping = asyncio.ensure_future(leader.stop())
        await cluster.until(stopping.done, within=LEASE)
        await cluster.advance(1)  # anything still in the producer lands
    finally:
        await cluster.stop_runners(leader)
    resign = landings.index(("resign", "a", 1))
    assert ("record", "a", 1) in landings
    assert all(what != "record" for what, _, _ in landings[resign:]), landings


async def test_a_barrier_that_cannot_be_written_ends_the_tenure_before_any_function_runs():
    cluster = Cluster()  # no topic "wide": every barrier write to it fails
    starts = Starts(cluster)
    observer_fenced: list[Leadership] = []

    class Fenced(RunnerObserver):
        def fenced(self, role: str, leadership: Leadership) -> None:
            observer_fenced.append(leadership)

    leader = runner(cluster, cluster.transport(), "a", starts.function("a"), observer=Fenced())
    try:
        leader.start()
        await cluster.until(lambda: observer_fenced, within=LEASE)
    finally:
        await cluster.stop_runners(leader)
    assert starts.started == {}
    assert isinstance(observer_fenced[0].err, TransportError)
    assert "barriers of term 1" in str(observer_fenced[0].err)


# A win whose tenure is already over.


async def test_a_claim_answered_after_its_fence_deadline_is_resigned_and_the_member_claims_again():
    cluster = term_cluster()
    slow = LateProducer(cluster.broker, "a", Landings(), claim_ms=FENCE_DEADLINE_MS + 500,
                        slow_claims=1)
    task = asyncio.ensure_future(acquire_leadership(slow, ROLE, "a", options=TERM,
                                                    clock=cluster.clock))
    await cluster.until(task.done, within=LEASE * 2)
    leadership = task.result()
    assert isinstance(leadership, TermLeadership)
    assert leadership.token == TermToken(2)
    assert not leadership.fenced()
    assert terms_view(cluster).winner(1).member == "a"
    assert resigns(cluster) == [("a", 1)]
    await leadership.resign()


async def test_a_runner_whose_claim_is_answered_late_runs_no_function_in_that_term_and_leads():
    cluster = term_cluster()
    slow = LateProducer(cluster.broker, "a", Landings(), claim_ms=FENCE_DEADLINE_MS + 500,
                        slow_claims=1)
    elected: list[int] = []

    class Elected(RunnerObserver):
        def elected(self, role: str, leadership: Leadership) -> None:
            elected.append(leadership.token.term)

    starts = Starts(cluster)
    leader = runner(cluster, slow, "a", starts.function("a"), observer=Elected())
    try:
        leader.start()
        await cluster.until(lambda: "a" in starts.started, within=LEASE * 4)
    finally:
        await cluster.stop_runners(leader)
    assert elected == [2]
    assert starts.started["a"][0] == 2


async def test_a_runner_handed_a_win_already_past_its_fence_deadline_reports_no_election(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """However the campaign's answer reaches the runner late, a tenure that is
    over is handed back unreported, and the runner campaigns again."""
    cluster = term_cluster()
    import krabka.runner as runner_module
    real_acquire = runner_module.acquire_leadership
    late = [True]

    async def acquire_then_stall(*args, **kwargs) -> Leadership:
        leadership = await real_acquire(*args, **kwargs)
        if late[0]:
            late[0] = False
            cluster.clock.advance_ms(FENCE_DEADLINE_MS)
        return leadership

    monkeypatch.setattr(runner_module, "acquire_leadership", acquire_then_stall)
    elected: list[int] = []

    class Elected(RunnerObserver):
        def elected(self, role: str, leadership: Leadership) -> None:
            elected.append(leadership.token.term)

    starts = Starts(cluster)
    leader = runner(cluster, cluster.transport(), "a", starts.function("a"),
                    observer=Elected())
    try:
        leader.start()
        await cluster.until(lambda: "a" in starts.started, within=LEASE * 4)
    finally:
        await cluster.stop_runners(leader)
    assert elected == [2]
    assert terms_view(cluster).winner(1).member == "a"


# A claim whose answer is in flight when its campaign stops.


async def test_a_runner_stopped_while_its_claim_is_in_flight_gives_the_claim_back():
    cluster = term_cluster()
    slow = LateProducer(cluster.broker, "a", Landings(), claim_ms=200, slow_claims=1)
    starts = Starts(cluster)
    claimant = runner(cluster, slow, "a", starts.function("a"))
    standby = runner(cluster, cluster.transport(), "b", starts.function("b"))
    try:
        claimant.start()
        await cluster.until(lambda: slow.in_flight, within=LEASE)
        standby.start()
        await cluster.settle()
        stopping = asyncio.ensure_future(claimant.stop())
        stopped_at = cluster.clock.monotonic_ms()
        await cluster.until(lambda: "b" in starts.started, within=LEASE)
        assert cluster.clock.monotonic_ms() - stopped_at < TERM.lease_ms / 2
        await cluster.until(stopping.done, within=LEASE)
    finally:
        await cluster.stop_runners(claimant, standby)
    assert "a" not in starts.started
    view = terms_view(cluster)
    assert view.winner(1).member == "a"
    assert view.winner(2).member == "b"
    assert ("a", 1) in resigns(cluster)


async def test_a_cancelled_acquisition_whose_claim_is_in_flight_gives_the_claim_back():
    cluster = term_cluster()
    slow = LateProducer(cluster.broker, "a", Landings(), claim_ms=200, slow_claims=1)
    task = asyncio.ensure_future(acquire_leadership(slow, ROLE, "a", options=TERM,
                                                    clock=cluster.clock))
    standby = asyncio.ensure_future(acquire_leadership(cluster.transport(), ROLE, "b",
                                                       options=TERM, clock=cluster.clock))
    await cluster.until(lambda: slow.in_flight, within=LEASE)
    task.cancel()
    cancelled_at = cluster.clock.monotonic_ms()
    await cluster.until(task.done, within=LEASE)
    assert task.cancelled()
    assert terms_view(cluster).winner(1).member == "a"
    assert resigns(cluster) == [("a", 1)]
    await cluster.until(standby.done, within=LEASE)
    assert cluster.clock.monotonic_ms() - cancelled_at < TERM.lease_ms / 2
    leadership = standby.result()
    assert leadership.token == TermToken(2)
    await leadership.resign()


class LostAnswer(LateProducer):
    """A client whose first claim reaches the broker, but whose answer is lost:
    the append fails with a `TransportError` as a timed-out request does."""

    def __init__(self, broker: MemoryBroker, member: str) -> None:
        super().__init__(broker, member, Landings())
        self.answered_claims = 0

    async def append_term(self, partition: int, key: bytes, value: bytes) -> int:
        offset = await super().append_term(partition, key, value)
        if decode_term_key(key).kind == TermKind.CLAIM:
            self.answered_claims += 1
            if self.answered_claims == 1:
                raise TransportError("no acknowledgement within the request timeout")
        return offset


async def test_a_claim_whose_answer_was_lost_is_found_on_the_partition_and_given_back():
    cluster = term_cluster()
    lossy = LostAnswer(cluster.broker, "a")
    task = asyncio.ensure_future(acquire_leadership(lossy, ROLE, "a", options=TERM,
                                                    clock=cluster.clock))
    standby = asyncio.ensure_future(acquire_leadership(cluster.transport(), ROLE, "b",
                                                       options=TERM, clock=cluster.clock))
    await cluster.until(task.done, within=LEASE)
    with pytest.raises(TransportError, match="no acknowledgement"):
        task.result()
    failed_at = cluster.clock.monotonic_ms()
    assert terms_view(cluster).winner(1).member == "a"
    assert resigns(cluster) == [("a", 1)]
    await cluster.until(standby.done, within=LEASE)
    assert cluster.clock.monotonic_ms() - failed_at < TERM.lease_ms / 2
    leadership = standby.result()
    assert leadership.token == TermToken(2)
    await leadership.resign()
