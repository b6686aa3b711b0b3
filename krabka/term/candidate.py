"""Standing for a role in term mode: register, wait one's turn, claim the next term.

`acquire_leadership` comes here with ``fencing="term"``. The member
registers on the state topic as in epoch mode (rank and the no-failback rule
are the same), follows its role's partition of the terms topic, and when
`evaluate_term` says its slot has come, appends a claim for the highest term
it has seen plus one and reads the partition back to its claim: it leads if
its claim is the first of its term in offset order
(docs/term-mode.md#the-election-rule). No transactional producer is created
and no InitProducerId names the role (the plain idempotent producer's own,
with a null transactional id, mints no role's epoch): the offset order is
the referee. The winner tombstones the claims its win settled
(`krabka.term.compaction`), so the terms topic stays bounded.
"""

from __future__ import annotations

import asyncio
import logging

from krabka.clock import Clock
from krabka.follower import PartitionFollower
from krabka.format.partition import role_partition
from krabka.format.terms import (
    Claim,
    Heartbeat,
    claim_key,
    encode_claim,
    encode_heartbeat,
    encode_term_key,
    heartbeat_key,
)
from krabka.options import LeadershipOptions
from krabka.registration import deregister, register
from krabka.rules.evaluate import ordered_challengers
from krabka.runtime.cancellation import through_cancellation
from krabka.scale.admission import Admission, wait_ms
from krabka.term.compaction import settle_claims
from krabka.term.election import evaluate_term
from krabka.term.follower import TermFollower
from krabka.term.outputs import check_outputs
from krabka.term.tenure import TermLeadership
from krabka.transport import Transport

__all__ = ["acquire_term_leadership"]

log = logging.getLogger("krabka.leadership")


async def acquire_term_leadership(
    transport: Transport, role: str, member: str, options: LeadershipOptions, clock: Clock,
    admission: Admission | None = None,
) -> TermLeadership:
    """Register, wait, claim: return once this member won a term of `role`.

    Both topics are checked first (`StateTopicError`), and the declared
    outputs (`CompactedOutputError`). A cancellation or an
    error after the claim was appended resigns the term if the claim won, so
    no tenure is left that nobody holds. A closed `admission` holds the claim
    as it holds an epoch-mode challenge.
    """
    await transport.check_topic(options.partitions, None)
    await transport.check_terms_topic(options.partitions)
    await check_outputs(transport, options)
    return await _TermCandidate(transport, role, member, options, clock, admission).run()


class _TermCandidate:
    """The wait-and-claim loop of one member for one role."""

    def __init__(self, transport: Transport, role: str, member: str,
                 options: LeadershipOptions, clock: Clock,
                 admission: Admission | None = None) -> None:
        self.transport = transport
        self.admission = admission
        self.role = role
        self.member = member
        self.options = options
        self.clock = clock
        self.partition = role_partition(role, options.partitions)
        self.roster = PartitionFollower(transport, self.partition, role, clock,
                                        options.placement, options.challenge_stagger)
        self.terms = TermFollower(transport, self.partition, role, clock)
        self.registered_offset: int | None = None

    async def run(self) -> TermLeadership:
        won = False
        try:
            await self.roster.refresh()
            await self._register()
            await self.terms.read_to_end()
            while True:
                leadership = await self._step()
                if leadership is not None:
                    won = True
                    # No await between the TermLeadership's creation and this
                    # return: nothing can cancel the caller in between.
                    return leadership
        finally:
            await through_cancellation(asyncio.ensure_future(self._close(terms_too=not won)))

    async def _close(self, *, terms_too: bool) -> None:
        await self.roster.close()
        if terms_too:  # a winner's tail goes on in its tenure
            await self.terms.close()

    async def _step(self) -> TermLeadership | None:
        if (self.registered_offset is not None
                and self.roster.last_stable_offset <= self.registered_offset):
            await self._wait(None)
            return None
        roster = self.roster.state().roster
        step = evaluate_term(self.terms.view, roster, self.member, self.clock.monotonic_ms(),
                             self.terms.quiet_since_ms, self.options.lease_ms,
                             self.options.challenge_stagger, role=self.role,
                             placement=self.options.placement)
        if step.action == "register":
            await self._register()
        elif step.action == "wait":
            await self._wait(step.at_ms)
        elif step.action == "claim":
            closed_ms = wait_ms(self.admission)
            if closed_ms:
                await self._wait(self.clock.monotonic_ms() + closed_ms)
                return None
            return await self._claim(step.term, roster)
        return None

    async def _wait(self, until_monotonic_ms: int | None) -> None:
        """Until the roster or the terms partition changes, or the instant comes."""
        waiting = (asyncio.ensure_future(self.roster.wait(None)),
                   asyncio.ensure_future(self.terms.wait(until_monotonic_ms)))
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # Each follower keeps its pending read across a cancelled wait. Every
            # outcome is taken, also when this wait is cancelled: an error left
            # unread would be reported by asyncio as never retrieved.
            for task in waiting:
                if not task.done():
                    task.cancel()
            outcomes = await asyncio.gather(*waiting, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                raise outcome  # a follower's TransportError goes to the caller

    async def _register(self) -> None:
        """Append a registration: every incarnation of a member joins at the tail."""
        self.registered_offset = await register(self.transport, self.partition, self.role,
                                                self.member, self.clock.now_ms())
        log.info("%s: %s registered at offset %d", self.role, self.member, self.registered_offset)

    async def _claim(self, term: int, roster: list[str]) -> TermLeadership | None:
        view = self.terms.view
        passed = self._passed_over(roster, view.holder, view.resigned)
        sent_mono = self.clock.monotonic_ms()
        sent_wall = self.clock.now_ms()
        # A member claims a term at most once: a second claim would share the
        # first one's key, and compaction could keep only the later copy.
        appending = asyncio.ensure_future(self.transport.append_term(
            self.partition, encode_term_key(claim_key(self.role, self.member, term)),
            encode_claim(Claim(self.member, term, sent_wall))))
        try:
            # A claim handed to the producer may land whatever becomes of this
            # task, so its answer is waited for through a cancellation.
            offset = await through_cancellation(appending)
        except BaseException:
            # Landed (a cancellation came meanwhile) or unknown (the append
            # failed, perhaps after the broker took it): given back if it won.
            landed = (None if appending.cancelled() or appending.exception() is not None
                      else appending.result())
            await self._give_back(term, landed)
            raise
        acked_mono = self.clock.monotonic_ms()
        try:
            while self.terms.end_offset <= offset:
                await self.terms.read_to_end()
            winner = self.terms.view.winner(term)
            if winner is None or winner.offset != offset:
                log.info("%s: %s lost the claim of term %d to %s", self.role, self.member,
                         term, winner.member if winner is not None else "a higher term")
                return None
            await self._deregister(passed)
            await settle_claims(self.transport, self.partition, self.terms.view, term)
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # As in epoch mode: a cancellation requested while this task ran
                # on would only arrive after the return, dropping the tenure.
                raise asyncio.CancelledError
        except BaseException:
            await self._give_back(term, offset)
            raise
        if self.clock.monotonic_ms() >= sent_mono + self.options.lease_ms - self.options.margin_ms:
            # Won, but answered after the claim's own fence deadline: the tenure
            # would be over before it began. Given back, and the member stands
            # again (a member never claims one term twice: its next is higher).
            log.warning("%s: %s won term %d, but its claim was answered %d ms after it was "
                        "sent, past its fence deadline; resigning the term and standing again",
                        self.role, self.member, term, self.clock.monotonic_ms() - sent_mono)
            await self._give_back(term, offset)
            return None
        leadership = TermLeadership(self.transport, self.role, self.member, self.partition,
                                    term, offset, self.terms, self.options, self.clock,
                                    sent_mono, sent_wall)
        leadership._began((acked_mono - sent_mono) / 1000, self.admission)
        log.info("%s: %s leads in term %d, tenure %d", self.role, self.member, term, offset)
        return leadership

    def _passed_over(self, roster: list[str], holder: str | None, resigned: bool) -> list[str]:
        """The members ranked ahead of this one, whose slots passed unclaimed, and
        a holder whose heartbeats stopped (one that resigned stays a candidate).

        Removed after the win, as epoch mode's first lease does, so a crashed
        member does not rank ahead of every live standby forever. Not atomic
        with the claim, as there is no transaction: a member removed just as
        it claimed a higher term still leads, and registers again at the tail
        when it next stands.
        """
        order = ordered_challengers(roster, holder, role=self.role,
                                    placement=self.options.placement)
        ahead = order[:order.index(self.member)] if self.member in order else []
        if holder is not None and not resigned and holder in roster and holder != self.member:
            ahead.append(holder)
        return ahead

    async def _deregister(self, members: list[str]) -> None:
        for member in members:
            await deregister(self.transport, self.partition, self.role, member)
            log.info("%s: deregistered %s, whose slot passed unused", self.role, member)

    async def _give_back(self, term: int, offset: int | None) -> None:
        """Resign `term` if this member's claim of it won; through a cancellation.

        `offset` is the claim's, or None when the append's outcome is unknown:
        the partition is then read to its end, and the claim that won `term`
        is this member's if it names this member (a claim's key is unique to
        role, member and term). A claim that lands after that read goes
        unseen: its term lapses at the election timeout.
        """

        async def steps() -> None:
            try:
                if offset is None:
                    await self.terms.read_to_end()
                while offset is not None and self.terms.end_offset <= offset:
                    await self.terms.read_to_end()
                winner = self.terms.view.winner(term)
                if (winner is None or winner.member != self.member
                        or (offset is not None and winner.offset != offset)):
                    return
                resign = Heartbeat(self.member, term, self.clock.now_ms(), resigned=True)
                await self.transport.append_term(
                    self.partition, encode_term_key(heartbeat_key(self.role)),
                    encode_heartbeat(resign))
                log.info("%s: %s resigned term %d, won as its claim was given up", self.role,
                         self.member, term)
            except Exception as exc:
                log.warning("%s: could not resign term %d after giving the claim up (%r); "
                            "the next member claims after the election timeout", self.role,
                            term, exc)

        await through_cancellation(asyncio.ensure_future(steps()))
