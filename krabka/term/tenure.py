"""Term mode's tenure: heartbeats on the terms topic, writes stamped with the term.

`TermLeadership` is the `Leadership` `acquire_leadership` returns with
``fencing="term"`` (docs/term-mode.md). Nothing on the broker refuses a
deposed leader here: the tenure ends when the leader reads a claim of a
higher term on its terms partition (`FencedError`, `done`), or at its fence
deadline, and readers that apply `krabka.TermFilter` drop whatever it
wrote after the newer term's barrier.

The broker acknowledges a deposed leader's heartbeat as readily as a
current one's, so an acknowledgement proves nothing: a heartbeat extends the
fence deadline only once this tenure has read it back on its terms tail with
its term still the highest. A leader whose tail cannot read, whether it
fails or stalls, therefore runs into its fence deadline exactly as an
epoch-mode leader whose renewals the broker refuses; the deadline is still
counted on the monotonic clock from the heartbeat's send.

Writes go through `transaction()` as in epoch mode, to the declared output
topics only (`LeadershipOptions.outputs`). Before the tenure's first data
record on a partition, every partition of every declared topic gets a term
barrier; the tenure starts writing them at once, so readers learn the term
even if the leader has nothing to say, and it is `ready()` once every
declared partition has one: a record of an older term then either precedes
that barrier (and so the start of this tenure's work) or is dropped by every
`TermFilter`. A transaction buffers its records and writes them, in order,
when its body exits cleanly: an exception in the body writes nothing. The
records are written one after another through an idempotent producer, not
atomically: a failure part-way leaves the records already acknowledged
written (each carries the term, so readers judge each alone). A send once
handed to the transport is not recalled by a cancellation, and the
resignation waits for every send before its heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from krabka.clock import Clock
from krabka.errors import FencedError, TransportError, UndeclaredTopicError, retryable
from krabka.format.partition import murmur2, to_positive
from krabka.format.terms import (
    TERM_HEADER,
    Barrier,
    Heartbeat,
    TermStamp,
    barrier_key,
    encode_barrier,
    encode_heartbeat,
    encode_term_header,
    encode_term_key,
    heartbeat_key,
)
from krabka.format.token import TermToken
from krabka.guarded import RecordWriter
from krabka.options import LeadershipOptions
from krabka.tenure import Leadership, TenureState
from krabka.term.election import deposed
from krabka.term.follower import TermFollower
from krabka.transport import Transport

__all__ = ["TermLeadership", "TermWriter"]

log = logging.getLogger("krabka.leadership")

BARRIER_RETRY_MS = 250


@dataclass(frozen=True, slots=True)
class _Sent:
    """A heartbeat the broker acknowledged at `offset`, sent at these instants."""

    offset: int
    monotonic_ms: int
    wall_ms: int


@dataclass(frozen=True, slots=True)
class _Pending:
    topic: str
    key: bytes | None
    value: bytes | None
    partition: int | None


class TermWriter:
    """Collects the records of one term-mode transaction; `TermLeadership` writes them."""

    def __init__(self, leadership: TermLeadership) -> None:
        self._leadership = leadership
        self.records: list[_Pending] = []

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
    ) -> None:
        """Add a record; it is written, stamped with the term, when the transaction commits.

        `UndeclaredTopicError` for a topic not in the tenure's outputs, and
        `FencedError` once the tenure is over.
        """
        self._leadership._check_output(topic)
        self._leadership._raise_if_over()
        self.records.append(_Pending(topic, key, value, partition))


class TermLeadership(Leadership):
    """A term-mode tenure: `token` is the `TermToken` of the term this member won."""

    token: TermToken

    def __init__(
        self,
        transport: Transport,
        role: str,
        member: str,
        partition: int,
        term: int,
        tenure: int,
        follower: TermFollower,
        options: LeadershipOptions,
        clock: Clock,
        claim_sent_monotonic_ms: int,
        claim_sent_wall_ms: int,
    ) -> None:
        super().__init__(transport, role, member, partition, tenure, options, clock,
                         claim_sent_monotonic_ms, claim_sent_wall_ms)
        self.token = TermToken(term)
        self._transport = transport
        self._follower = follower
        self._stamp = encode_term_header(TermStamp(role, term))
        self._barrier_stamp = encode_term_header(TermStamp(role, term, barrier=True))
        self._heartbeat_key = encode_term_key(heartbeat_key(role))
        self._outputs = frozenset(options.outputs)
        self._barriered: dict[str, int] = {}
        """Per declared topic, how many of its partitions have this term's barrier."""
        self._round_robin = {topic: itertools.count() for topic in options.outputs}
        self._unread: list[_Sent] = []
        """Heartbeats acknowledged but not yet read back, in offset order."""
        self._sends: set[asyncio.Future[int]] = set()
        """Output writes handed to the transport and not yet answered."""
        self._barriers_due_mono = self.fence_deadline_monotonic
        """Until when a barrier write that failed is retried: the claim's fence deadline."""
        self._start_tasks(("terms tail", self._watch_terms), ("barriers", self._write_barriers))

    @property
    def term(self) -> int:
        """The term this tenure holds."""
        return self.token.term

    @contextlib.asynccontextmanager
    async def _guarded(self) -> AsyncIterator[RecordWriter]:
        """Buffer the body's records; on a clean exit write them, barriers first.

        `FencedError` when the tenure ends before every record is
        acknowledged (those acknowledged stay written; readers drop them if
        a newer term's barrier came first on their partition).
        """
        writer = TermWriter(self)
        try:
            yield writer
        except FencedError as exc:
            self._end(exc)
            raise
        if writer.records:
            await self._bounded(self._write(writer.records))

    async def _write(self, records: list[_Pending]) -> None:
        for record in records:
            partition = await self._place(record)
            self._raise_if_over()
            await self._send(record.topic, partition, record.key, record.value, self._stamp)

    async def _send(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
                    stamp: bytes) -> None:
        """Write one record stamped with `stamp`, in a task the caller's
        cancellation leaves alone.

        A record handed to a producer is sent whatever becomes of the caller,
        so the send is kept until it is answered: the resignation waits for
        every one (`_hand_back_steps`), and in a hand-over each record of this
        term is on its partition before the resign heartbeat lets the next
        term be claimed.
        """
        sending = asyncio.ensure_future(self._transport.write_output(
            topic, partition, key, value, [(TERM_HEADER, stamp)]))
        self._sends.add(sending)
        sending.add_done_callback(self._answered)
        await asyncio.shield(sending)

    def _answered(self, sending: asyncio.Future[int]) -> None:
        self._sends.discard(sending)
        if not sending.cancelled():
            sending.exception()  # retrieved: a cancelled caller no longer waits for it

    async def _place(self, record: _Pending) -> int:
        """The record's partition, with this term's barrier written there first.

        A keyed record goes where Kafka's default partitioner puts it
        (murmur2 of the key), an unkeyed one round-robin: the partition must
        be known before the record is sent, to barrier it first.
        """
        count = await self._barrier_topic(record.topic)
        if record.partition is not None:
            if not 0 <= record.partition < count:
                raise ValueError(f"{record.topic} has {count} partitions; there is no "
                                 f"partition {record.partition}")
            return record.partition
        if record.key is not None:
            return to_positive(murmur2(record.key)) % count
        return next(self._round_robin[record.topic]) % count

    async def _barrier_topic(self, topic: str) -> int:
        """Barrier every partition of `topic` not yet barriered; its partition count."""
        count = await self._transport.output_partitions(topic)
        done = self._barriered.get(topic, 0)
        if done >= count:
            return count
        key = encode_term_key(barrier_key(self.role, self.member, self.term))
        for partition in range(done, count):
            self._raise_if_over()
            value = encode_barrier(Barrier(self.member, self.term, self._clock.now_ms()))
            await self._send(topic, partition, key, value, self._barrier_stamp)
            self._barriered[topic] = partition + 1
        return count

    async def _write_barriers(self) -> None:
        """Barrier every declared topic at once, then mark the tenure ready.

        Doing it at the start makes readers drop a deposed leader's writes
        even while this one has nothing to write, and the role's work waits
        for it (`ready`). A `TransportError` is retried until the claim's
        fence deadline, the time a renewal gets: a leader that cannot barrier
        its outputs by then cannot start its work, so its tenure ends with a
        `TransportError` and the role passes on (the runner hands it back and
        campaigns again). Any other error ends the tenure at once.
        """
        pending = sorted(self._outputs)
        while pending:
            try:
                async with self._lock:
                    await self._barrier_topic(pending[0])
                pending.pop(0)
            except FencedError:
                return
            except Exception as exc:
                if not retryable(exc):
                    self._end(exc)
                    return
                retry_at = self._clock.monotonic_ms() + BARRIER_RETRY_MS
                if retry_at >= self._barriers_due_mono:
                    failed = TransportError(
                        f"{self.role}: the barriers of term {self.term} could not be written "
                        f"to {pending[0]} before the claim's fence deadline: {exc}")
                    failed.__cause__ = exc
                    self._end(failed)
                    return
                log.warning("%s: could not write the term barrier to %s yet: %r", self.role,
                            pending[0], exc)
                await self._clock.sleep_until_monotonic(retry_at)
        self._mark_ready()

    def _check_output(self, topic: str) -> None:
        if topic not in self._outputs:
            declared = ", ".join(sorted(self._outputs)) or "none"
            raise UndeclaredTopicError(
                f"{self.role}: {topic!r} is not a declared output of this term-mode leader "
                f"(declared: {declared}); pass it in outputs= so it gets the term's barrier")

    async def _watch_terms(self) -> None:
        """Tail the terms partition: a claim of a higher term ends the tenure, and
        each heartbeat read back extends the fence deadline.

        While the tail cannot read, no heartbeat counts, so the fence deadline
        ends a leader that stays blind. A `TransportError` of the tail is
        logged once per outage; the follower then reads the partition to its
        end and tails again, so the news of a higher claim arrives as soon as
        reading works again.
        """
        outage: BaseException | None = None
        while not self._done.done():
            try:
                await self._follower.wait(None)
            except Exception as exc:
                if not retryable(exc):
                    self._end(exc)
                    return
                if outage is None:
                    log.warning("%s: the terms tail failed, reading again until the fence "
                                "deadline: %r", self.role, exc)
                outage = exc
                await self._clock.sleep_until_monotonic(self._clock.monotonic_ms()
                                                        + BARRIER_RETRY_MS)
                continue
            if outage is not None:
                log.info("%s: the terms tail reads again after %r", self.role, outage)
                outage = None
            if self._read_back():
                return

    def _read_back(self) -> bool:
        """Judge what the fold has read: True once the tenure is deposed (ended).

        Otherwise every acknowledged heartbeat the fold has read past counts
        toward the fence deadline: no higher claim precedes it, nor any
        record read after it.
        """
        view = self._follower.view
        if deposed(view, self.term):
            self._end(FencedError(
                f"{self.role}: {view.holder or 'another member'} claimed term {view.term}, "
                f"superseding this member's term {self.term}"))
            return True
        read_to = self._follower.end_offset
        while self._unread and self._unread[0].offset < read_to:
            sent = self._unread.pop(0)
            self._extend_fence(sent.monotonic_ms, sent.wall_ms)
        return False

    async def _write_renewal(self) -> None:
        sent_wall = self._clock.now_ms()
        heartbeat = Heartbeat(self.member, self.term, sent_wall)
        sent = self._clock.monotonic_ms()
        offset = await self._transport.append_term(self.partition, self._heartbeat_key,
                                                   encode_heartbeat(heartbeat))
        if self._state is TenureState.LEADING:
            self._renewed(heartbeat, sent, sent_wall, counts=False)
            self._unread.append(_Sent(offset, sent, sent_wall))
            # The tail may have delivered it before the acknowledgement came.
            self._read_back()

    async def _hand_back_steps(self) -> list[BaseException]:
        """A heartbeat marked resigned, so the next in rank claims at once.

        Sent only once every output send of this tenure has been answered
        (each is bounded by the transport), so none lands after the next
        term's claim. Sent even after the fence deadline or a higher claim:
        the fold ignores a resign that is not the current holder's.
        """
        errors: list[BaseException] = []
        if self._sends:
            await asyncio.wait(set(self._sends))
        try:
            resign = Heartbeat(self.member, self.term, self._clock.now_ms(), resigned=True)
            await self._transport.append_term(self.partition, self._heartbeat_key,
                                              encode_heartbeat(resign))
        except Exception as exc:
            errors.append(exc)
        with contextlib.suppress(Exception):
            await self._follower.close()
        return errors

    async def _check_topics(self) -> None:
        await self._transport.check_topic(self.options.partitions, None)
        await self._transport.check_terms_topic(self.options.partitions)
