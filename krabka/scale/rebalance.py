"""Rebalancing balanced roles by handover, never by preemption.

Under ``placement="balanced"`` a role's challengers are ordered by a
rendezvous hash, so a group's roles spread over its members as they
acquire them; but a live holder is never preempted, so a member that joins
a running group gets nothing until a failover, and a hash split is only
binomially even. Rebalancing evens it out with the one move the protocol
already has, a clean handover (docs/design.md#rebalancing):

- The **fair share** is ``ceil(roles / live members)``, and the roles each
  member holds are counted, over the roles **every live member hosts**
  (is registered for); a live member still standing up (below) is not
  counted yet. Members may host different roles (a rolling deploy,
  a canary that adds roles); counted over the roles each member hosts, two
  members would disagree on the counts and hand one role back and forth.
  Over the shared roles every live member counts the same, and a role
  hosted by only some of them is left where the election put it.
- A member holding more than its fair share hands over surplus roles, **one
  at a time**: it plans again once the last handover has **landed** (the
  role leased by another member, in the states it plans from), or one
  `Rebalancer.interval` after making it, whichever is first; with nothing in
  flight it plans every interval. So the rate is bounded by the handover's
  own round trip, and the plan never counts a role that is still moving.
- A role is handed over only to its **successor**: the member its
  placement puts first among the others (`ordered_challengers` without the
  holder), which is who claims it at once after the resignation. So the
  handover is a resignation; no rule of the election changes. It is done only
  when the successor is live, not standing up (the **settle** rule, below),
  and holds fewer roles than its fair share. That is the **hysteresis**: a role moves only from
  over the fair share to under it, so each move narrows the gap between the
  two by two and takes neither across the fair share; a member at the fair
  share neither gives nor takes. Members that agree on the counts therefore
  stop after at most as many moves as they held roles over the fair share.
- A member that has just registered is still **standing up**: a worker
  that joins registers for all its roles at once and reads each of them, so
  for the first seconds its claim of a handed role waits behind hundreds of
  others. Handed a role then, it leaves it vacant for longer than a stagger
  and the next in order challenges too, superseding it (seen on the real
  broker, four members of 300 roles in one process,
  docs/decisions/0042-a-joiner-is-handed-roles-only-once-its.md).
  Counted while it registers, it would also shrink the roles every live
  member hosts to the few it has registered for yet, and the others would
  even those out among themselves. So a live member counts only once every
  registration of it the plan sees has stood for the settle time; until
  then it is neither counted nor handed a role (nor is a role whose
  successor it is), and the plan lists it as `standing`. The time is
  measured on the planning member's monotonic clock, from the first plan
  that saw the member registered for the role, not from the record's
  timestamp: that is the registering member's wall clock, and a member
  whose clock runs ahead would wait as long again as its skew (one behind
  would be counted at once). A registration written again (a member stands
  again after each handover) keeps its time.
- The runner's clean stop does the rest: the function stops first, then the
  role is resigned (the registration kept), and the successor takes it within
  its election round trip; a successor that died meanwhile leaves the role to
  the next in order one stagger later.

`plan` is pure: the decision at one instant from the roles' states. It is
the seed's ``LastPlan``: what was counted, the fair share, and the moves, in
order, with the reason for each. `Rebalancer` enacts the first move of each
plan through the roles' `LeaderRunner`s and keeps the last plan and the
moves it made for observers. Which members are **live** is the caller's
knowledge (the worker's group membership, a test's list): the state topic
says who registered, not who is still running.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from krabka.clock import Clock
from krabka.rules.evaluate import ordered_challengers
from krabka.rules.state import RoleState
from krabka.runner import LeaderRunner, RunnerState

__all__ = ["Move", "Plan", "Rebalancer", "plan"]

log = logging.getLogger("krabka.scale.rebalance")

MOVES_KEPT = 100
LANDING_POLL = 0.02
"""Seconds between looks at a handed role's state while its handover is in
flight: a dictionary lookup, against a handover of tens of milliseconds."""


@dataclass(frozen=True, slots=True)
class Move:
    """`giver` hands `role` to `taker` by resigning it; `reason` says why."""

    role: str
    giver: str
    taker: str
    reason: str
    at_ms: int = 0
    """When it was enacted (wall-clock epoch ms); 0 while only planned."""


@dataclass(frozen=True, slots=True)
class Plan:
    """One member's rebalancing decision at `at_ms`.

    `roles` is how many roles every live member hosts, of the `hosted` this
    member hosts; `held` counts the live leases of each live member among
    those `roles`, and the fair share is theirs too; `moves` are the
    handovers this member would make, first first (`Rebalancer` enacts only
    the first, then plans again); `standing` the live members not counted
    yet, still standing up (the settle rule), so a plan without moves says
    whether it is waiting.
    """

    member: str
    at_ms: int
    roles: int
    hosted: int
    members: tuple[str, ...]
    fair_share: int
    held: Mapping[str, int]
    moves: tuple[Move, ...] = ()
    standing: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        """The plan as the web view and the API show it."""
        return {"member": self.member, "at": self.at_ms, "roles": self.roles,
                "hosted": self.hosted, "members": list(self.members),
                "fair_share": self.fair_share,
                "held": dict(sorted(self.held.items())),
                "moves": [_move_json(m) for m in self.moves],
                "standing": list(self.standing)}


def _move_json(move: Move) -> dict[str, object]:
    return {"role": move.role, "from": move.giver, "to": move.taker, "reason": move.reason}


def _holder(state: RoleState, now_ms: int) -> str | None:
    lease = state.lease
    return lease.member if lease is not None and now_ms < lease.deadline else None


def plan(states: Mapping[str, RoleState], member: str, live: Collection[str],
         now_ms: int, *, settle_ms: int = 0,
         known_ms: Mapping[tuple[str, str], int] | None = None) -> Plan:
    """What `member` should hand over now to even out the balanced roles in `states`.

    `states` are the roles `member` hosts; `live` names the members known to
    be running (`member` counts as live whatever it says). A live member
    that `member` has known registered for one of these roles for less than
    `settle_ms` is standing up, and not counted: `known_ms` gives, by (role,
    member), how long `member` has known each registration, on its own
    clock; one it does not list counts as just seen. Only the roles every
    counted member is registered for are planned over (`Plan.roles`). Roles
    are considered in name order, so two members planning from one state
    agree on what each would move.
    """
    running = set(live) | {member}
    registered = {role: {entry.member for entry in state.entries}
                  for role, state in states.items()}
    known = known_ms or {}
    standing = tuple(sorted(
        name for name in running - {member}
        if any(known.get((role, name), 0) < settle_ms
               for role, names in registered.items() if name in names)))
    members = tuple(sorted(running - set(standing)))
    others = set(members) - {member}
    shared = sorted(role for role in states if others <= registered[role])
    holders = {role: _holder(state, now_ms) for role, state in states.items()}
    held = Counter(holders[role] for role in shared if holders[role] in members)
    counts = {name: held.get(name, 0) for name in members}
    fair = math.ceil(len(shared) / len(members)) if shared else 0
    surplus = counts[member] - fair
    moves: list[Move] = []
    taking = Counter[str]()
    for role in shared:
        if len(moves) >= surplus:
            break
        if holders[role] != member:
            continue
        # A member still standing up claims the role too if it comes first.
        order = ordered_challengers([entry.member for entry in states[role].entries
                                     if entry.member in running], member, role=role,
                                    placement="balanced")
        if not order or order[0] in standing:
            continue
        taker = order[0]
        # The hysteresis: the giver is over the fair share and the taker under
        # it, so the move narrows the gap between them and crosses it for neither.
        if counts[taker] + taking[taker] >= fair:
            continue
        taking[taker] += 1
        moves.append(Move(role, member, taker, (
            f"{member} holds {counts[member]} of the {len(shared)} roles every live member "
            f"hosts, over the fair share of {fair} among {len(members)} live members; "
            f"{taker}, which holds {counts[taker]}, is the role's successor")))
    return Plan(member, now_ms, len(shared), len(states), members, fair, counts, tuple(moves),
                standing)


@dataclass(slots=True)
class Rebalancer:
    """Enacts `member`'s rebalancing plans through its roles' runners.

    It plans from `states()` and `live()`, keeps the plan in `last_plan`, and
    steps down from the first planned role whose runner leads (keeping the
    registration, so the member stays a candidate). `next_turn` says when to
    plan again: as soon as that handover has landed (another member leases
    the role), else one `interval` (on `clock`'s monotonic time) after the
    last plan. Choose an interval longer than the challenge stagger, so that
    a handover whose successor died has landed on the next in order before
    the next plan counts it. A live member is counted, and handed roles,
    only once its registrations have been known for `settle` seconds
    (`plan`'s `settle_ms`; one interval unless given), on `clock`'s
    monotonic time from the first plan that saw each: a member that joined
    with many roles needs that long to stand for all of them, a few seconds
    for 300 roles on a 2-core machine. `moves` keeps the latest handovers
    made, newest last.
    """

    member: str
    runners: Mapping[str, LeaderRunner]
    states: Callable[[], Mapping[str, RoleState]]
    live: Callable[[], Collection[str]]
    clock: Clock
    interval: float = 10.0
    settle: float | None = None
    last_plan: Plan | None = None
    moves: list[Move] = field(default_factory=list)
    in_flight: Move | None = field(default=None, init=False)
    """The handover the last plan made, until `next_turn` begins to wait for it."""
    seen: dict[tuple[str, str], int] = field(default_factory=dict, init=False)
    """When a plan first saw each member registered for each role, by (role,
    member), in monotonic ms; only those in the last plan's states."""

    def step(self) -> Move | None:
        """Plan once and hand over the first planned role this member leads."""
        now = self.clock.now_ms()
        states = self.states()
        decided = plan(states, self.member, self.live(), now,
                       settle_ms=round((self.interval if self.settle is None
                                        else self.settle) * 1000),
                       known_ms=self._known(states))
        self.last_plan = decided
        for move in decided.moves:
            runner = self.runners.get(move.role)
            if runner is None or runner.state is not RunnerState.LEADING:
                continue
            runner.step_down()
            made = Move(move.role, move.giver, move.taker, move.reason, now)
            self.moves = [*self.moves, made][-MOVES_KEPT:]
            self.in_flight = made
            log.info("%s: handing %s to %s: %s", self.member, move.role, move.taker,
                     move.reason)
            return made
        return None

    def _known(self, states: Mapping[str, RoleState]) -> dict[tuple[str, str], int]:
        """How long each registration in `states` has been known, by (role, member)."""
        now = self.clock.monotonic_ms()
        seen = {(role, entry.member): now
                for role, state in states.items() for entry in state.entries}
        seen.update((key, at) for key, at in self.seen.items() if key in seen)
        self.seen = seen
        return {key: now - at for key, at in seen.items()}

    def _landed(self, move: Move) -> bool:
        """Whether `move` is done: another member leases its role."""
        state = self.states().get(move.role)
        holder = None if state is None else _holder(state, self.clock.now_ms())
        return holder not in (None, self.member)

    async def next_turn(self) -> None:
        """Wait until the next plan is due: one `interval` from now, or as soon
        as the handover in flight has landed."""
        clock = self.clock
        due = clock.monotonic_ms() + round(self.interval * 1000)
        # Taken now, so a turn whose plan fails before making a move waits a
        # whole interval instead of finding the old handover landed again.
        moving, self.in_flight = self.in_flight, None
        if moving is None:
            await clock.sleep_until_monotonic(due)
            return
        poll = round(LANDING_POLL * 1000)
        while not self._landed(moving) and clock.monotonic_ms() < due:
            await clock.sleep_until_monotonic(min(due, clock.monotonic_ms() + poll))

    async def run(self) -> None:
        """Plan at each `next_turn` until cancelled."""
        while True:
            await self.next_turn()
            self.step()
