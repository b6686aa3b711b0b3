"""Term mode's election and tenure on the in-process model, with time driven by hand.

A member claims the next term on the terms topic and leads if its claim is
the first of that term; the leader heartbeats, tails the partition, stamps
its writes with the term and barriers its declared outputs
(docs/term-mode.md). The same scenarios run against a real broker in
tests/kafka/.
"""

import asyncio

import pytest

from coordination import (
    TERMS_TOPIC,
    CompactedOutputError,
    FencedError,
    MemoryTransport,
    TermFilter,
    TermLeadership,
    TermToken,
    UndeclaredTopicError,
    claim_key,
    decode_term_header,
    decode_term_key,
    encode_claim,
    encode_term_key,
    role_partition,
)
from coordination.output_policy import compacts
from coordination.term_fold import build_term_view
from coordination.term_records import TERM_HEADER, Claim, TermKind
from tests.support.sim import LEASE, STAGGER, Cluster, crash

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
