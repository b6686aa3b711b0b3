"""Term mode's election and tenure on the in-process model, with time driven by hand.

A member claims the next term on the terms topic and leads if its claim is
the first of that term; the leader heartbeats, tails the partition, stamps
its writes with the term and barriers its declared outputs
(docs/term-mode.md). The same scenarios run against a real broker in
tests/kafka/.
"""

import asyncio
import logging

import pytest

from krabka import (
    TERMS_TOPIC,
    CompactedOutputError,
    FencedError,
    TermFilter,
    TermKind,
    TermLeadership,
    TermToken,
    TransportError,
    UndeclaredTopicError,
    claim_key,
    decode_heartbeat,
    decode_term_header,
    decode_term_key,
    encode_claim,
    encode_term_key,
    role_partition,
)
from krabka.format.terms import TERM_HEADER, Claim
from krabka.term.fold import build_term_view
from krabka.term.follower import TermFollower
from krabka.term.outputs import compacts
from krabka.testing import MemoryTransport
from tests.support.sim import LEASE, RENEW, STAGGER, Cluster, crash

TERM = {"fencing": "term", "outputs": ("out",)}


async def lead(cluster: Cluster, member: str, **kw) -> TermLeadership:
    task = cluster.candidate(member, **{**TERM, **kw})
    await cluster.until(task.done, within=1)
    leadership = task.result()
    assert isinstance(leadership, TermLeadership)
    return leadership


def terms_view(cluster: Cluster, role: str = "billing"):
    partition = role_partition(role, cluster.partitions)
    return build_term_view(role, cluster.broker.partition(TERMS_TOPIC, partition)
                           .read_committed(0).records)


async def write(leader: TermLeadership, *records: tuple[str, bytes],
                fail: Exception | None = None) -> None:
    """One transaction sending `records`, whose body raises `fail` at its end."""
    async with leader.transaction() as txn:
        for topic, value in records:
            await txn.send(topic, value)
        if fail is not None:
            raise fail


def output(cluster: Cluster):
    return cluster.broker.records("out", 0)


async def test_the_first_registered_member_wins_term_one_without_any_epoch():
    cluster = Cluster()
    leadership = await lead(cluster, "a")
    assert leadership.token == TermToken(1)
    assert leadership.token.term == 1
    view = terms_view(cluster)
    assert (view.term, view.holder) == (1, "a")
    assert leadership.tenure == view.winner(1).offset
    assert cluster.broker.epochs_minted == 0


async def test_a_heartbeating_leader_keeps_its_term_and_standbys_wait():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    standby = cluster.candidate("b", **TERM)
    await cluster.advance(LEASE * 10)
    assert not standby.done()
    assert not leader.done.done()
    assert not leader.fenced()
    view = terms_view(cluster)
    assert (view.term, view.holder) == (1, "a")
    assert view.heartbeat is not None
    assert view.heartbeat.member == "a"
    standby.cancel()


async def test_after_the_leader_dies_the_first_in_rank_claims_the_next_term():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    first = cluster.candidate("b", **TERM)
    second = cluster.candidate("c", **TERM)
    await cluster.settle()
    crash(leader)
    died = cluster.clock.monotonic_ms()
    await cluster.until(first.done, within=LEASE * 2)
    assert cluster.clock.monotonic_ms() - died >= LEASE * 1000 - 1000  # the election timeout
    assert first.result().token == TermToken(2)
    assert not second.done()
    await cluster.advance(LEASE * 3)
    assert not second.done()
    assert terms_view(cluster).holder == "b"
    second.cancel()


async def test_a_resign_lets_the_next_in_rank_claim_at_once():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    standby = cluster.candidate("b", **TERM)
    await cluster.settle()
    await leader.resign()
    started = cluster.clock.monotonic_ms()
    await cluster.until(standby.done, within=LEASE)
    assert cluster.clock.monotonic_ms() - started < LEASE * 1000 / 2
    assert standby.result().token == TermToken(2)
    assert leader.err is None
    assert leader.done.done()


async def test_a_leader_that_reads_a_higher_claim_is_fenced():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    partition = role_partition("billing", cluster.partitions)
    await cluster.transport().append_term(
        partition, encode_term_key(claim_key("billing", "z", 2)), encode_claim(Claim("z", 2, 0)))
    await cluster.until(leader.done.done, within=1)
    assert isinstance(leader.err, FencedError)
    assert leader.fenced()
    with pytest.raises(FencedError):
        async with leader.transaction() as txn:
            await txn.send("out", b"late")


async def test_simultaneous_claims_elect_exactly_the_first_in_offset_order():
    cluster = Cluster()
    a = cluster.candidate("a", **TERM, challenge_stagger=0)
    b = cluster.candidate("b", **TERM, challenge_stagger=0)
    await cluster.advance(LEASE * 2)
    done = [task for task in (a, b) if task.done()]
    assert len(done) == 1
    winner = done[0].result()
    view = terms_view(cluster)
    assert (view.term, view.holder) == (1, winner.member)
    for task in (a, b):
        task.cancel()


async def test_a_compacted_output_is_refused_before_the_member_registers():
    cluster = Cluster()
    cluster.broker.create_topic("table", 1, compacted=True)
    task = cluster.candidate("a", **{**TERM, "outputs": ("out", "table")})
    await cluster.until(task.done, within=1)
    with pytest.raises(CompactedOutputError, match=r"'table' has cleanup\.policy='compact'") as err:
        task.result()
    assert (err.value.topic, err.value.cleanup_policy) == ("table", "compact")
    state = role_partition("billing", cluster.partitions)
    assert cluster.broker.partition("__coordination_state", state).read_committed(0).records == []
    assert terms_view(cluster).term == 0


async def test_a_compacted_output_is_written_when_the_options_allow_it():
    cluster = Cluster()
    cluster.broker.create_topic("table", 1, compacted=True)
    leader = await lead(cluster, "a", outputs=("table",), allow_compacted_outputs=True)
    async with leader.transaction() as txn:
        await txn.send("table", b"v", key=b"k")
    assert [r.value for r in cluster.broker.records("table", 0)][-1] == b"v"


def test_a_cleanup_policy_compacts_when_any_of_its_parts_is_compact():
    assert [compacts(p) for p in ("compact", "compact,delete", "delete, compact")] == [True] * 3
    assert [compacts(p) for p in ("delete", "", None)] == [False] * 3


async def test_every_record_carries_the_term_after_a_barrier_on_every_partition():
    cluster = Cluster()
    cluster.broker.create_topic("wide", 3, compacted=False)
    leader = await lead(cluster, "a", outputs=("out", "wide"))
    async with leader.transaction() as txn:
        await txn.send("out", b"one", key=b"k")
        await txn.send("wide", b"two", partition=2)
    records = output(cluster)
    stamps = [decode_term_header(dict(r.headers)[TERM_HEADER]) for r in records]
    assert [(s.term, s.barrier) for s in stamps] == [(1, True), (1, False)]
    assert records[1].value == b"one"
    for partition in range(3):
        first = cluster.broker.records("wide", partition)[0]
        assert decode_term_header(dict(first.headers)[TERM_HEADER]).barrier
    readers = TermFilter(fenced_topics=["out"])
    assert [readers.admit("out", 0, r.headers) for r in records] == ["barrier", "pass"]


async def test_an_undeclared_topic_is_refused_and_nothing_of_the_transaction_is_written():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    await cluster.settle()
    before = len(output(cluster))
    with pytest.raises(UndeclaredTopicError, match="not a declared output"):
        await write(leader, ("out", b"kept back"), ("elsewhere", b"refused"))
    assert len(output(cluster)) == before
    assert not leader.fenced()


async def test_an_error_in_the_body_writes_nothing():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    await cluster.settle()
    before = len(output(cluster))
    with pytest.raises(RuntimeError, match="the body failed"):
        await write(leader, ("out", b"never"), fail=RuntimeError("the body failed"))
    assert len(output(cluster)) == before
    async with leader.transaction() as txn:
        await txn.send("out", b"after")
    assert output(cluster)[-1].value == b"after"


async def test_a_zombies_record_after_the_new_barrier_is_dropped_by_a_filtering_reader():
    cluster = Cluster()
    zombie = await lead(cluster, "a")
    async with zombie.transaction() as txn:
        await txn.send("out", b"before")
    successor = cluster.candidate("b", **TERM)
    await cluster.settle()
    crash(zombie)
    await cluster.until(successor.done, within=LEASE * 2)
    await cluster.settle()  # the successor's barriers
    # The paused zombie wakes and writes under its old term, as a process that
    # has not yet read the higher claim would.
    await cluster.transport().write_output("out", 0, None, b"zombie",
                                           [(TERM_HEADER, zombie._stamp)])
    reader = TermFilter(fenced_topics=["out"])
    verdicts = [(r.value, reader.admit("out", 0, r.headers)) for r in output(cluster)]
    assert (b"before", "pass") in verdicts
    assert (b"zombie", "drop") in verdicts
    assert reader.dropped == {"stale": 1}


async def test_a_cancelled_acquisition_whose_claim_won_resigns_the_term():
    cluster = Cluster()
    claimant = ClaimsThenSignals(cluster.broker)
    task = cluster.candidate("a", transport=claimant, **TERM)
    standby = cluster.candidate("b", **TERM)
    # Cancelled as soon as the claim is on the log, before the read back.
    await claimant.appended.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    view = terms_view(cluster)
    assert view.term == 1
    assert view.resigned
    await cluster.until(standby.done, within=STAGGER * 4)
    assert standby.result().token == TermToken(2)


class ClaimsThenSignals(MemoryTransport):
    """A member whose every term record, once appended, sets `appended`."""

    def __init__(self, broker) -> None:
        super().__init__(broker)
        self.appended = asyncio.Event()

    async def append_term(self, partition: int, key: bytes, value: bytes | None) -> int:
        offset = await super().append_term(partition, key, value)
        self.appended.set()
        return offset




# The leader's terms tail: what it cannot read does not keep it leading.


class TermsTailControl(MemoryTransport):
    """A member whose terms tails the test can stall or fail.

    A stalled tail holds every read it gets from then on (nothing is
    delivered, nothing raised: a tail that lags without end). Armed with
    `fail_next`, a tail drops its next read and raises that error instead,
    as a tail whose fetch failed.
    """

    def __init__(self, broker) -> None:
        super().__init__(broker)
        self.stalled = False
        self.fail_next: Exception | None = None
        self.opened = 0

    async def tail_terms(self, partition, from_offset, *, role=None):
        self.opened += 1
        return ControlledTail(self, await super().tail_terms(partition, from_offset, role=role))


class ControlledTail:
    def __init__(self, control: TermsTailControl, inner) -> None:
        self._control = control
        self._inner = inner

    async def next(self):
        read = await self._inner.next()
        if self._control.fail_next is not None:
            error, self._control.fail_next = self._control.fail_next, None
            raise error
        if self._control.stalled:
            await asyncio.get_running_loop().create_future()  # never delivered
        return read

    def returned_to(self) -> int:
        return self._inner.returned_to()

    async def close(self) -> None:
        await self._inner.close()


def claim_term(cluster: Cluster, member: str, term: int, role: str = "billing"):
    return cluster.transport().append_term(
        role_partition(role, cluster.partitions),
        encode_term_key(claim_key(role, member, term)), encode_claim(Claim(member, term, 0)))


def heartbeats_of(cluster: Cluster, member: str, term: int) -> int:
    partition = role_partition("billing", cluster.partitions)
    records = cluster.broker.partition(TERMS_TOPIC, partition).read_committed(0).records
    return sum(1 for r in records
               if decode_term_key(r.key).kind is TermKind.HEARTBEAT
               and decode_heartbeat(r.value).term == term)


async def test_a_leader_whose_terms_tail_stalls_is_fenced_by_its_fence_deadline():
    """The broker acknowledges the deposed leader's heartbeats, but a heartbeat
    extends the fence deadline only once the leader has read it back: a blind
    leader stops at the deadline of the last heartbeat it read."""
    cluster = Cluster()
    control = TermsTailControl(cluster.broker)
    leader = await lead(cluster, "a", transport=control)
    await cluster.advance(RENEW * 3)  # heartbeats, each read back
    deadline = leader.fence_deadline_monotonic
    assert deadline > leader.tenure  # moved past the claim's
    control.stalled = True
    await claim_term(cluster, "z", 2)
    sent_before = heartbeats_of(cluster, "a", 1)
    await cluster.until(leader.fenced, within=LEASE * 2)
    assert deadline <= cluster.clock.monotonic_ms() <= deadline + 10  # one step of the clock
    assert leader.fence_deadline_monotonic == deadline
    assert heartbeats_of(cluster, "a", 1) > sent_before  # acknowledged, and not counted
    await cluster.until(leader.done.done, within=1)
    assert isinstance(leader.err, FencedError)
    assert "fence deadline" in str(leader.err)


async def test_heartbeats_read_back_keep_the_fence_deadline_ahead_of_the_clock():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    for _ in range(10):
        await cluster.advance(RENEW)
        assert leader.remaining() > (LEASE - RENEW) / 2
    assert not leader.fenced()


async def test_a_terms_tail_that_fails_once_says_so_once_and_reads_on(caplog):
    """The failed read is not waited on again: the leader reads the partition
    to its end, tails again, and finds the higher claim that the failed read
    held, long before its fence deadline."""
    cluster = Cluster()
    control = TermsTailControl(cluster.broker)
    leader = await lead(cluster, "a", transport=control)
    await cluster.settle()
    control.fail_next = TransportError("the fetch failed")
    with caplog.at_level(logging.WARNING, logger="krabka.leadership"):
        await claim_term(cluster, "z", 2)  # the read that holds it fails
        claimed = cluster.clock.monotonic_ms()
        await cluster.until(leader.done.done, within=LEASE)
    assert cluster.clock.monotonic_ms() - claimed < RENEW * 1000
    assert isinstance(leader.err, FencedError)
    assert "z claimed term 2" in str(leader.err)
    assert control.opened == 2
    failed = [r for r in caplog.records if "terms tail failed" in r.getMessage()]
    assert len(failed) == 1, [r.getMessage() for r in caplog.records]


async def test_a_members_terms_tail_is_woken_by_its_own_role_only():
    """The heartbeats of the partition's other roles neither reach the fold nor
    wake a member waiting on its role."""
    cluster = Cluster(partitions=1)
    follower = TermFollower(cluster.transport(), 0, "billing", cluster.clock)
    await follower.read_to_end()
    waiting = asyncio.ensure_future(follower.wait(None))
    for term in (1, 2, 3):
        await claim_term(cluster, "z", term, role="shipping")
    await cluster.settle()
    assert not waiting.done()
    await claim_term(cluster, "a", 1)
    await cluster.until(waiting.done, within=1)
    assert waiting.result() is True
    assert (follower.view.term, follower.view.holder) == (1, "a")
    assert follower.view.errors == []
    await follower.close()
async def test_after_compaction_a_role_that_changed_hands_keeps_one_claim_and_its_heartbeat():
    cluster = Cluster()
    for n in range(6):
        leader = await lead(cluster, "ab"[n % 2])
        await leader.resign()
    partition = role_partition("billing", cluster.partitions)
    log = cluster.broker.partition(TERMS_TOPIC, partition)
    cluster.broker.compact(TERMS_TOPIC)
    keys = [decode_term_key(r.key) for r in log.read_committed(0).records]
    assert [(k.kind, k.member, k.term) for k in keys] == [
        (TermKind.CLAIM, "b", 6), (TermKind.HEARTBEAT, "", 0)]
    view = terms_view(cluster)
    assert (view.term, view.holder, view.resigned) == (6, "b", True)
    # Terms never restart: the next claim reads term 6 and claims 7.
    assert (await lead(cluster, "a")).token == TermToken(7)
