"""Rebalancing converges when the members host different sets of roles (a
rolling deploy, a canary that adds roles): every member plans from its own
view, the handovers it makes are applied as the election would apply them,
and the group reaches a state where no member wants to move, in a bounded
number of handovers (docs/design.md#rebalancing)."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from krabka.format.records import Lease
from krabka.rules.evaluate import ordered_challengers
from krabka.rules.state import RoleState, RosterEntry
from krabka.scale.rebalance import plan

NOW = 1_000_000


class Model:
    """Members, the roles each hosts (and is registered for), who is live, and
    who holds each role.

    A handover is the runner's step-down: the giver resigns and stands again
    after every other candidate, so the role goes to the first live member
    registered for it in the balanced order without the giver (a registered
    member that is not live lets its slot pass), and back to the giver only
    when no other live member is registered.
    """

    def __init__(self, hosts: Mapping[str, frozenset[str]], live: frozenset[str],
                 holders: Mapping[str, str | None]) -> None:
        self.hosts = dict(hosts)
        self.live = live
        self.holders = dict(holders)

    def roster(self, role: str) -> list[str]:
        return sorted(member for member, roles in self.hosts.items() if role in roles)

    def view(self, member: str) -> dict[str, RoleState]:
        """The states of the roles `member` hosts, as it reads them."""
        states = {}
        for role in self.hosts[member]:
            entries = [RosterEntry(name, offset, 0, 0)
                       for offset, name in enumerate(self.roster(role))]
            holder = self.holders.get(role)
            lease = None if holder is None else Lease(holder, 1, 0, NOW - 1, NOW + 30_000)
            states[role] = RoleState(role, entries=entries, lease=lease)
        return states

    def wanted(self, member: str) -> str | None:
        """The role `member`'s plan would hand over first, if any."""
        moves = plan(self.view(member), member, self.live, NOW).moves
        return moves[0].role if moves else None

    def hand_over(self, role: str, giver: str) -> str:
        order = ordered_challengers(self.roster(role), giver, role=role, placement="balanced")
        taker = next((name for name in order if name in self.live), giver)
        self.holders[role] = taker
        return taker

    def common(self) -> set[str]:
        """The roles every live member hosts."""
        return set.intersection(*(set(self.hosts[member]) for member in self.live))

    def surplus(self) -> int:
        """How far the live members are over the fair share of the roles they all host."""
        roles = self.common()
        fair = -(-len(roles) // len(self.live))
        held = [sum(self.holders.get(role) == member for role in roles) for member in self.live]
        return sum(max(0, count - fair) for count in held)

    def run_plans(self, limit: int) -> int:
        """Let the live members plan in turn, each enacting its first move, until a
        whole round moves nothing; the handovers made. More than `limit` fails."""
        made = 0
        while True:
            moved = False
            for member in sorted(self.live):
                role = self.wanted(member)
                if role is None:
                    continue
                self.hand_over(role, member)
                made += 1
                moved = True
                assert made <= limit, f"still moving after {made} handovers: {self.holders}"
            if not moved:
                return made


def test_members_hosting_different_roles_do_not_hand_one_role_back_and_forth():
    r_roles = frozenset(f"r{i}" for i in range(1, 7))
    c_roles = frozenset(f"c{i}" for i in range(1, 5))
    # a runs the old release (r1..r6); b the new one, which adds c1..c4.
    model = Model({"a": r_roles, "b": r_roles | c_roles}, frozenset({"a", "b"}),
                  {**{f"r{i}": "a" for i in (1, 2, 3)}, **{f"r{i}": "b" for i in (4, 5, 6)},
                   **dict.fromkeys(c_roles, "b")})
    # The roles both host are split 3 / 3 already: nothing is to move.
    assert model.run_plans(limit=12) == 0
    # From 5 / 1 of the shared roles, two handovers even it out, and it stays so.
    model.holders.update({"r4": "a", "r5": "a"})
    assert model.run_plans(limit=12) == 2
    held = [model.holders[f"r{i}"] for i in range(1, 7)]
    assert (held.count("a"), held.count("b")) == (3, 3)
    assert all(model.holders[role] == "b" for role in c_roles)


MEMBERS = ["m0", "m1", "m2", "m3", "m4"]
ROLES = [f"role-{i}" for i in range(12)]


@st.composite
def groups(draw: st.DrawFn) -> Model:
    """Up to five members, each hosting a random subset of twelve roles; a random
    non-empty set of them live; each role held by one of its hosts (live or not)
    or by no one."""
    members = MEMBERS[:draw(st.integers(1, len(MEMBERS)))]
    hosts = {member: frozenset(draw(st.sets(st.sampled_from(ROLES)))) for member in members}
    live = frozenset(draw(st.sets(st.sampled_from(members), min_size=1)))
    holders: dict[str, str | None] = {}
    for role in ROLES:
        candidates = [member for member in members if role in hosts[member]]
        holders[role] = draw(st.sampled_from([None, *candidates]))
    return Model(hosts, live, holders)


@settings(max_examples=400, deadline=None)
@given(groups())
def test_the_plans_reach_a_fixpoint_within_the_surplus_over_the_fair_share(model: Model):
    """However the members' role sets, the live set and the holdings are drawn,
    the live members planning in turn, each from its own view, stop moving after
    at most S handovers, S being how many roles the live members held over the
    fair share (of the roles every live member hosts) at the start.

    Why S bounds it: every live member plans over the same roles (those every
    live member is registered for) and the same members, so all agree on the
    counts and the fair share; a role moves only from a member over the fair
    share to one under it, so the giver never falls below it and the taker
    never rises above it, and each handover lowers the total surplus by one.
    """
    bound = model.surplus()
    model.run_plans(limit=bound)
    assert all(model.wanted(member) is None for member in model.live)
