"""Standing for a role: registering, waiting one's turn and challenging.

`acquire_epoch_leadership`, where `krabka.acquire.acquire_leadership` comes in
epoch mode, registers the member, waits its turn by tailing the role's
partition, challenges (InitProducerId, then the first lease record) and
returns an `EpochLeadership` that renews in the background. Safety comes from
the broker: every write of a `Leadership` goes through the producer its
epoch binds, and a superseded epoch's writes are rejected. The lease and the
fence deadline only time failover and bound side effects the broker cannot
guard.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from krabka.clock import Clock
from krabka.epoch.tenure import EpochLeadership, hand_back
from krabka.errors import EpochLostError, FencedError, FormatError, TransportError
from krabka.follower import PartitionFollower
from krabka.format.partition import role_partition
from krabka.format.records import (
    Lease,
    decode_lease,
    encode_key,
    encode_lease,
    lease_key,
    registration_key,
)
from krabka.format.token import FencingToken
from krabka.options import LeadershipOptions
from krabka.registration import register
from krabka.rules.evaluate import Step, challenger_index, challengers, evaluate
from krabka.rules.state import RoleState
from krabka.runtime.cancellation import through_cancellation
from krabka.scale.admission import Admission, wait_ms
from krabka.transport import GuardedTransaction, Transport

__all__ = ["FirstWrite", "acquire_epoch_leadership"]

log = logging.getLogger("krabka.leadership")

MAX_BACKOFF_LEASES = 8

# A challenge decides on the read its tail just delivered, without reading
# the partition again, when that read is at most this old. The re-read is
# there for a challenger that waited (for its preparation, for a busy event
# loop): the member ranked next may have taken the role at its own slot
# meanwhile, one challenge stagger after this member's. This bound is far
# below any stagger, and whatever was committed within it is found after the
# first lease (`_predecessor_until`), as anything committed between the read
# and InitProducerId always is.
FRESH_READ_MS = 10

FirstWrite = Callable[[GuardedTransaction], Awaitable[None]]
"""``async def first(txn)``: the tenure's first guarded records, added to the
transaction that commits its first lease (`acquire_leadership`'s ``first``)."""


async def acquire_epoch_leadership(
    transport: Transport,
    role: str,
    member: str,
    options: LeadershipOptions,
    clock: Clock,
    admission: Admission | None = None,
    first: FirstWrite | None = None,
) -> EpochLeadership:
    """Register, wait, challenge: return once this member committed the first
    lease record of its tenure of `role` under a freshly minted epoch.

    The state topic is checked first (`StateTopicError`). `first` rides in
    the transaction of each challenge's first lease (`krabka.acquire`). A
    cancellation or error that arrives after the epoch was minted hands it
    back before it propagates.
    """
    check = await transport.check_topic(options.partitions, options.lease_duration)
    candidate = _Candidate(transport, role, member, options, clock,
                           check.abort_cleanup_interval_ms, admission, first)
    return await candidate.run()


class _Candidate:
    """The wait-and-challenge loop of one member for one role."""

    def __init__(
        self,
        transport: Transport,
        role: str,
        member: str,
        options: LeadershipOptions,
        clock: Clock,
        abort_cleanup_interval_ms: int,
        admission: Admission | None = None,
        first: FirstWrite | None = None,
    ) -> None:
        self.transport = transport
        self.admission = admission
        self.first = first
        self.role = role
        self.member = member
        self.options = options
        self.clock = clock
        self.abort_cleanup_interval_ms = abort_cleanup_interval_ms
        self.partition = role_partition(role, options.partitions)
        self.follower = PartitionFollower(transport, self.partition, role, clock,
                                          options.placement, options.challenge_stagger)
        self.registered_offset: int | None = None
        self.losses = 0
        self.not_before = 0
        self.not_before_mark: int | None = None
        self.stall_expired_at_lso: int | None = None
        self.warned_shared_id = False
        self.out_of_order_seen = 0
        self.prepared = False

    async def run(self) -> EpochLeadership:
        try:
            await self.follower.refresh()
            await self._register()
            while True:
                leadership = await self._step()
                if leadership is not None:
                    # No await between the Leadership's creation and this
                    # return: nothing can cancel the caller in between.
                    return leadership
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # A cancellation requested while a step ran its clean-up
                    # (a challenge the broker refused hands its epoch back) is
                    # not always raised in it; it ends the campaign here.
                    raise asyncio.CancelledError
        except BaseException:
            # Through a cancellation: a shielded clean-up whose caller is
            # cancelled would be left running, its error never retrieved.
            await through_cancellation(asyncio.ensure_future(self._stop_waiting()))
            raise

    async def _stop_waiting(self) -> None:
        await self.follower.close()
        if self.prepared:
            self.prepared = False
            await self.transport.discard_prepared(self.role)

    async def _step(self) -> EpochLeadership | None:
        if not self._own_registration_visible():
            await self.follower.wait(None)
            return None
        state = self.follower.state()
        self._forget_backoff_if_lease_moved(state)
        self._warn_if_member_id_shared(state)
        self._warn_if_out_of_order(state)
        now = self.clock.now_ms()
        step = self._evaluate(state, now)
        if step.action == "register":
            await self._register()
        elif step.action == "wait" or now < self.not_before:
            await self._prepare_if_first(state)
            await self.follower.wait(max(step.at_ms, self.not_before))
        elif step.action == "challenge":
            closed_ms = wait_ms(self.admission)
            if closed_ms:
                await self.follower.wait(now + closed_ms)
                return None
            return await self._challenge()
        return None

    async def _prepare_if_first(self, state: RoleState) -> None:
        """While first in line, keep the transport ready for this member's challenge.

        The next challenge is most likely this member's, and on Kafka a
        prepared producer leaves only InitProducerId for the handover to
        wait for. Only the first in line prepares: a transport keeps few
        producers prepared, and the later ones would rarely be used.
        """
        first = challenger_index(state, self.member, self.options.placement) == 0
        if first and not self.prepared:
            await self.transport.prepare_epoch(self.role, self.options.lease_duration,
                                               self.partition, self.options.outputs)
        elif self.prepared and not first:
            await self.transport.discard_prepared(self.role)
        self.prepared = first

    def _own_registration_visible(self) -> bool:
        return (
            self.registered_offset is None
            or self.follower.last_stable_offset > self.registered_offset
        )

    def _evaluate(self, state: RoleState, now: int) -> Step:
        return evaluate(state, self.member, now, self.options.challenge_stagger,
                        placement=self.options.placement)

    async def _register(self) -> None:
        """Append a registration: every incarnation of a member joins at the tail."""
        self.registered_offset = await register(self.transport, self.partition, self.role,
                                                self.member, self.clock.now_ms())
        log.info("%s: %s registered at offset %d", self.role, self.member, self.registered_offset)

    async def _challenge(self) -> EpochLeadership | None:
        """Decide again on a fresh read, then mint an epoch and commit the first lease.

        The decision stands on everything committed up to a stable offset
        read at most `FRESH_READ_MS` before the epoch is minted: a renewal or
        a new tenure committed before that read is in the state evaluated.
        When the tail's last read is that fresh (the common handover: the
        tail delivered the predecessor's tombstone, and the preparation was
        ready), the challenge decides on it and reads nothing again;
        otherwise it reads the partition (`PartitionFollower.refresh`, only
        the records since the follower's last read). A tenure committed after
        the read the decision stood on is found after the first lease
        (`_predecessor_until`), whichever read that was.

        The transport gets the epoch ready first (`Transport.prepare_epoch`
        with ``wait``), so that only InitProducerId comes between that read
        and the epoch: a process slow to connect (one starting hundreds of
        roles) would otherwise mint seconds after it read, and fence a member
        ranked after it that took the role at its own slot meanwhile.
        """
        # Never mint an epoch on a topic whose partition count changed under us.
        check = await self.transport.check_topic(self.options.partitions,
                                                 self.options.lease_duration)
        self.abort_cleanup_interval_ms = check.abort_cleanup_interval_ms
        self.prepared = True
        await self.transport.prepare_epoch(self.role, self.options.lease_duration,
                                           self.partition, self.options.outputs, wait=True)
        if not self.follower.read_within(FRESH_READ_MS):
            await self.follower.refresh()
        state = self.follower.state()
        now = self.clock.now_ms()
        if (await self._stalled() or self._evaluate(state, now).action != "challenge"
                or now < self.not_before):
            await self._withdraw()
            return None
        read_end = self.follower.last_stable_offset
        self.prepared = False  # acquire_epoch takes (or drops) what was prepared
        token = await self.transport.acquire_epoch(self.role, self.options.lease_duration)
        began = False
        try:
            sent_mono = self.clock.monotonic_ms()
            fence_deadline = sent_mono + self.options.lease_ms - self.options.margin_ms
            granted = self.clock.now_ms()
            lease = Lease(self.member, token.producer_id, token.producer_epoch, granted,
                          granted + self.options.lease_ms)
            began = True
            try:
                tenure = await self._first_lease(token, lease, self._passed_over(state))
            except (FencedError, EpochLostError) as exc:
                if isinstance(exc, EpochLostError) and not await self._superseded(token):
                    raise
                began = False  # the broker refused it: no lease of ours exists
                with contextlib.suppress(FencedError):
                    await self.transport.release(self.role, token)
                await self._lost(token)
                return None
            predecessor_until = await self._predecessor_until(read_end, tenure, token)
            await self.follower.close()
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # A cancellation requested while this task ran on without
                # suspending would only be delivered after the return, and
                # asyncio would drop the returned Leadership: hand it back now.
                raise asyncio.CancelledError
        except BaseException:
            await hand_back(self.transport, self.role, token, self.partition,
                             self.options.lease_duration, tombstone=began,
                             retire_epoch=self.clock.monotonic_ms() < fence_deadline)
            raise
        if self.clock.monotonic_ms() >= fence_deadline:
            # Committed, but answered after the lease's own fence deadline: the
            # tenure would be over before it began. Handed back (the tombstone
            # lets the next in rank go at once), and this member stands again.
            log.warning("%s: %s committed its first lease under %s %d ms after sending it, "
                        "past its fence deadline; handing it back and standing again",
                        self.role, self.member, token, self.clock.monotonic_ms() - sent_mono)
            await hand_back(self.transport, self.role, token, self.partition,
                            self.options.lease_duration, tombstone=True, retire_epoch=False)
            return None
        self.losses = 0
        log.info("%s: %s leads with token %s, tenure %d", self.role, self.member, token, tenure)
        leadership = EpochLeadership(self.transport, self.role, self.member, self.partition, token,
                                tenure, lease, self.options, self.clock, sent_mono)
        leadership._began((self.clock.monotonic_ms() - sent_mono) / 1000, self.admission)
        leadership.predecessor_until = predecessor_until
        return leadership

    async def _withdraw(self) -> None:
        """Give up the challenge's preparation (it is pinned outside the transport's
        limit); a member first in line prepares again as it waits."""
        self.prepared = False
        await self.transport.discard_prepared(self.role)

    async def _predecessor_until(self, read_end: int, tenure: int,
                                 token: FencingToken) -> int | None:
        """Until when a tenure this one superseded while it was live may run on.

        A challenger decides on a read of the partition, then mints its epoch.
        If another member's first lease commits in between (a rank-0
        challenger that took longer than one stagger, a freshly started
        process slow to find the coordinator), the new epoch fences a tenure
        that has just begun, whose function runs until its next write or
        renewal is refused: two role functions at once (seen in the worker
        group's fault run, about 360 ms). Records between the read and this
        tenure's first lease are looked at; the latest lease among them, if
        another token's and still live, is that predecessor, and the runner
        waits for its fence deadline (this member's wall clock against the
        deadline it wrote) before it starts the function. None when there is
        no such lease: the common case costs nothing, as no record came
        between. Only the records from `read_end` on are looked at: the
        decision had folded everything below it. They are taken from the
        follower's tail when it has delivered them all (the common handover:
        the predecessor's deregistration came in between, and the tail
        fetched it while the lease was being written); else they are read.
        """
        if tenure <= read_end:
            return None
        key = encode_key(lease_key(self.role))
        records = await self.follower.delivered(tenure)
        if records is None:
            try:
                records = (await self.transport.read_partition(self.partition, read_end)).records
            except TransportError as exc:
                log.warning("%s: could not tell whether this tenure superseded a live one (%r); "
                            "the function waits as if it had", self.role, exc)
                return self.clock.now_ms() + self.options.lease_ms - self.options.margin_ms
        between = [r for r in records if read_end <= r.offset < tenure and r.key == key]
        if not between or not between[-1].value:
            return None
        try:
            lease = decode_lease(between[-1].value)
        except FormatError:
            return None
        if FencingToken(lease.producer_id, lease.producer_epoch) == token:
            return None
        until = lease.deadline - self.options.margin_ms
        if until <= self.clock.now_ms():
            return None
        log.warning("%s: %s superseded the live tenure of %s (token %d:%d) that began after it "
                    "last read the partition; its function starts at that tenure's fence "
                    "deadline, in %d ms", self.role, self.member, lease.member, lease.producer_id,
                    lease.producer_epoch, until - self.clock.now_ms())
        return until

    async def _first_lease(self, token: FencingToken, lease: Lease, passed: list[str]) -> int:
        """Commit the tenure's first lease record and, in the same transaction,
        the deregistrations of the members it passed over and the records of
        the caller's first write (`acquire_leadership`'s ``first``).

        In one fenced transaction a winner that was itself superseded before
        it committed deregisters nobody and writes nothing: its tombstones
        and its first write are aborted with its lease, so a stale view of
        the roster never removes a member that has since become holder, and
        the first write is fenced exactly as any later guarded write is.
        """
        txn = await self.transport.begin_transaction(self.role, token)
        try:
            offset = await txn.write_lease(self.partition, encode_key(lease_key(self.role)),
                                           encode_lease(lease))
            for member in passed:
                await txn.write_lease(
                    self.partition, encode_key(registration_key(self.role, member)), None
                )
            if self.first is not None:
                await self.first(txn)
            await txn.commit()
        except BaseException:
            with contextlib.suppress(Exception):
                # Through a cancellation, so the abort's own error is retrieved.
                await through_cancellation(asyncio.ensure_future(txn.abort()))
            raise
        for member in passed:
            log.info("%s: deregistered %s, whose slot passed unused", self.role, member)
        return offset

    def _passed_over(self, state: RoleState) -> list[str]:
        """The members ranked ahead of this one, whose slots passed unused, and
        the holder whose lease lapsed.

        A crashed member's registration would otherwise rank ahead of every
        live standby forever, adding a stagger to each later failover. One
        that is only slow finds itself unregistered and registers again at
        the tail, which is where the no-failback rule puts it anyway.
        """
        rank = challenger_index(state, self.member, self.options.placement)
        passed = [name for name in challengers(state, self.options.placement)[:rank]
                  if name != self.member]
        lapsed = state.lease.member if state.lease is not None else None
        if lapsed is not None and lapsed in state.roster and lapsed != self.member:
            # Its lease lapsed unrenewed. (A holder that resigned keeping its
            # registration left a vacancy instead, and stays a candidate; a
            # lapsed lease of this member id is this member's own past and
            # its registration is the fresh one.)
            passed.append(lapsed)
        return passed

    async def _stalled(self) -> bool:
        """Hold a challenge while an open transaction hides the partition's tail.

        A holder that died inside a transaction leaves the stable offset below
        the high watermark, hiding every role's renewals on the partition. The
        coordinator aborts that transaction once its timeout (its role's
        lease) has passed, at its next abort cleanup pass. So wait for the
        stable offset to pass the high watermark seen now, for at most the
        longest lease seen on the partition plus the broker's abort cleanup
        interval; then move this member's slot after that instant, keeping
        rank order.
        """
        follower = self.follower
        stuck_at = follower.last_stable_offset
        if stuck_at >= follower.high_watermark or stuck_at == self.stall_expired_at_lso:
            return False
        seen_hw = follower.high_watermark
        hold_ms = (max(self.options.lease_ms, await follower.longest_lease())
                   + self.abort_cleanup_interval_ms)
        give_up = self.clock.now_ms() + hold_ms
        log.info("%s: stable offset %d below high watermark %d; holding the challenge for "
                 "up to %d ms", self.role, stuck_at, seen_hw, hold_ms)
        # The wait below is for the marks to move, which a tail of one role
        # does not wake for.
        await follower.refresh(every_record=True)
        while follower.last_stable_offset < seen_hw and self.clock.now_ms() < give_up:
            await follower.wait(give_up)
        ended = self.clock.now_ms()
        if follower.last_stable_offset < seen_hw:
            self.stall_expired_at_lso = follower.last_stable_offset
        await follower.refresh()
        state = follower.state()
        rank = challenger_index(state, self.member, self.options.placement)
        self._defer_to(ended + rank * self.options.stagger_ms, state)
        return True

    async def _superseded(self, token: FencingToken) -> bool:
        """Whether another challenger's epoch replaced `token` at the coordinator.

        A first lease's commit can fail fatally instead of as fenced when
        another challenger's InitProducerId is fencing it at that moment: Kafka
        4.4's coordinator then answers EndTxn with UNKNOWN_SERVER_ERROR (an
        IllegalStateException on its pending PREPARE_EPOCH_FENCE). The fence
        aborts the transaction, so the challenge was lost like any fenced one.
        When the coordinator cannot say, the error stands.
        """
        try:
            status = await self.transport.describe_epoch(self.role)
        except TransportError:
            return False
        return status.token != token

    async def _lost(self, token: FencingToken) -> None:
        """Back off after losing a challenge, so losers never fence a winner
        that is still writing its first lease."""
        self.losses += 1
        fenced_at = self.clock.now_ms()
        await self.follower.refresh()
        state = self.follower.state()
        backoff = min(2 ** (self.losses - 1), MAX_BACKOFF_LEASES) * self.options.lease_ms
        rank = challenger_index(state, self.member, self.options.placement)
        self._defer_to(fenced_at + backoff + rank * self.options.stagger_ms, state)
        log.info("%s: %s lost a challenge with %s (loss %d); next try at %d",
                 self.role, self.member, token, self.losses, self.not_before)

    def _defer_to(self, at_ms: int, state: RoleState) -> None:
        self.not_before = max(self.not_before, at_ms)
        self.not_before_mark = state.lease_offset

    def _forget_backoff_if_lease_moved(self, state: RoleState) -> None:
        if self.not_before and state.lease_offset != self.not_before_mark:
            self.not_before = 0
            self.not_before_mark = None

    def _warn_if_out_of_order(self, state: RoleState) -> None:
        # Only tenures begun while this call stands: an old one would be
        # warned of again at every campaign (the role's state still shows it).
        seen = state.out_of_order
        last = state.last_out_of_order
        if (seen > self.out_of_order_seen and last is not None
                and self.registered_offset is not None
                and last.offset > self.registered_offset):
            log.warning(
                "%s: %s took the role at %d, before its slot at %d under this member's "
                "placement %r (offset %d): the role's members mix placement policies (or "
                "challenge staggers); give every member of a role the same ones",
                self.role, last.member, last.granted_at, last.slot, last.placement,
                last.offset,
            )
        self.out_of_order_seen = seen

    def _warn_if_member_id_shared(self, state: RoleState) -> None:
        lease = state.lease
        if (
            lease is not None
            and lease.member == self.member
            and self.clock.now_ms() < lease.deadline
            and not self.warned_shared_id
        ):
            self.warned_shared_id = True
            log.warning(
                "%s: a live lease names member %r under token %d:%d that this process did "
                "not acquire: a previous incarnation, or another process with the same member "
                "id. This member ranks last until that lease lapses; give every process its "
                "own member id.",
                self.role, self.member, lease.producer_id, lease.producer_epoch,
            )

