"""A group of members rebalancing balanced roles on the in-process model: each
member runs a `LeaderRunner` per role and a `Rebalancer`, every member is live
from the moment it joins, and a read-only watcher keeps the roles' states the
rebalancers plan from.

And the checks the rebalancing tests apply to the state topic's records, on
the model and on the real broker: how long each role stood vacant, and
whether a holder was replaced without resigning."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from krabka import LeaderRunner, LeadershipOptions, Transport
from krabka.clock import Clock
from krabka.format.records import Kind, decode_key, decode_lease
from krabka.observe.watch import watch_roles
from krabka.rules.state import RoleState
from krabka.scale.rebalance import Rebalancer


class Record(Protocol):
    """A state-topic record as both the in-process broker and aiokafka give it."""

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def timestamp(self) -> int: ...


class Group:
    """Members each running one LeaderRunner per role of `roles`, and a Rebalancer each."""

    def __init__(self, roles: Sequence[str], options: LeadershipOptions, clock: Clock,
                 interval: float) -> None:
        self.roles = list(roles)
        self.options = options
        self.clock = clock
        self.interval = interval
        self.states: dict[str, RoleState] = {}
        self.members: list[str] = []
        self.runners: dict[str, dict[str, LeaderRunner]] = {}
        self.rebalancers: dict[str, Rebalancer] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def watch(self, transport: Transport) -> None:
        """Keep `states` current from the state topic's beginning (registers nothing)."""
        async def follow() -> None:
            async with watch_roles(transport, self.options.partitions,
                                   since="beginning") as watch:
                async for change in watch:
                    self.states[change.role] = change.state
        self._tasks.append(asyncio.create_task(follow()))

    def join(self, member: str, transport: Transport) -> None:
        """`member` starts a runner for every role, and its rebalancer, which counts
        every member that joined as live."""
        self.members.append(member)
        runners = {role: LeaderRunner(transport, role, member, self.work,
                                      options=self.options, clock=self.clock)
                   for role in self.roles}
        self.runners[member] = runners
        for runner in runners.values():
            runner.start()
        rebalancer = Rebalancer(member, runners, lambda: self.states, lambda: self.members,
                                self.clock, interval=self.interval)
        self.rebalancers[member] = rebalancer
        self._tasks.append(asyncio.create_task(rebalancer.run()))

    @staticmethod
    async def work(leadership: Any) -> None:
        await leadership.done

    def split(self) -> dict[str, int]:
        """How many roles each member leads now."""
        counts = dict.fromkeys(self.members, 0)
        for runners in self.runners.values():
            for runner in runners.values():
                if runner.leading:
                    counts[runner.member] += 1
        return counts

    def within_ten_percent(self) -> bool:
        """Whether every role is led and each member leads within ±10 % of an even split."""
        split = self.split()
        even = len(self.roles) / len(split)
        return (sum(split.values()) == len(self.roles)
                and all(abs(count - even) <= even / 10 for count in split.values()))

    def every_runner(self) -> list[LeaderRunner]:
        return [runner for runners in self.runners.values() for runner in runners.values()]

    async def stop_rebalancing(self) -> None:
        """Stop the rebalancers and the watcher (the runners are the caller's to stop)."""
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@dataclass(frozen=True)
class Vacancy:
    """`role` stood vacant from its lease tombstone at `since` (ms) for `ms`, until
    `taker`'s lease record."""

    role: str
    since: int
    ms: int
    taker: str


def vacancies(records: Iterable[Record]) -> tuple[list[Vacancy], dict[str, int]]:
    """Per role, each time from a lease tombstone to the role's next lease record,
    by the records' timestamps; and the roles vacant at the end, with the
    timestamp of the tombstone that cleared them.

    `records` are the committed records of the state topic, each partition in
    offset order (a role lives in one partition).
    """
    cleared: dict[str, int] = {}
    found = []
    for record in records:
        key = decode_key(record.key)
        if key.kind is not Kind.LEASE:
            continue
        if record.value is None:
            cleared.setdefault(key.role, record.timestamp)
        elif key.role in cleared:
            since = cleared.pop(key.role)
            found.append(Vacancy(key.role, since, record.timestamp - since,
                                 decode_lease(record.value).member))
    return found, cleared


def long_vacancies(records: Sequence[Record], since_ms: float, read_ms: float,
                   limit_ms: float) -> list[str]:
    """Each vacancy that began at or after `since_ms` and lasted over `limit_ms`,
    described; a role still vacant when the topic was read (at `read_ms`) counts
    up to the read, since a handover can be in flight then."""
    found, open_since = vacancies(records)
    long = [f"{v.role} for {v.ms} ms from {v.since - since_ms:.0f} ms after the join, "
            f"to {v.taker}" for v in found if v.since >= since_ms and v.ms > limit_ms]
    long += [f"{role}, vacant since {read_ms - since:.0f} ms before the read"
             for role, since in open_since.items() if read_ms - since > limit_ms]
    return long


def replaced_without_resignation(records: Iterable[Record], since_ms: float) -> list[str]:
    """Each lease record from `since_ms` on whose member replaced another holder
    whose lease had not been tombstoned (resigned) first, described."""
    holder: dict[str, str | None] = {}
    replaced = []
    for record in records:
        key = decode_key(record.key)
        if key.kind is not Kind.LEASE:
            continue
        member = None if record.value is None else decode_lease(record.value).member
        if record.timestamp >= since_ms and member is not None \
                and holder.get(key.role) not in (None, member):
            replaced.append(f"{key.role}: {member} replaced {holder[key.role]}")
        holder[key.role] = member
    return replaced


def role_history(records: Iterable[Record], role: str, since_ms: float) -> list[str]:
    """The state-topic records of `role`, each a line with its timestamp in ms
    relative to `since_ms`: what a failed check shows of how the role moved."""
    lines = []
    for record in records:
        key = decode_key(record.key)
        if key.role != role:
            continue
        at = f"{record.timestamp - since_ms:+.0f} ms"
        if key.kind is Kind.REGISTRATION:
            lines.append(f"{at} {'deregistered' if record.value is None else 'registered'} "
                         f"{key.member}")
        elif record.value is None:
            lines.append(f"{at} lease tombstone")
        else:
            lease = decode_lease(record.value)
            lines.append(f"{at} lease of {lease.member}, token {lease.producer_id}:"
                         f"{lease.producer_epoch}, granted {lease.granted_at - since_ms:+.0f} ms")
    return lines
