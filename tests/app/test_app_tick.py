"""The tick agent's pass: a tick of one state partition reports the lapses of
that partition's roles and reads only their table values, not every role's
(the table holds the roles of every partition the worker owns)."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

import agents.fold.agent
from agents.fold import role_value
from agents.fold.agent import apply_tick, ticked
from agents.fold.rules import expire, fold
from app.factory import build
from app.settings import Settings
from krabka import STATE_TOPIC, FencingToken, Record, role_partition
from krabka.testing import ManualClock, MemoryBroker, MemoryTransport
from tests.support.faust_events import state_event
from tests.support.logs import Log

PARTITIONS = 4
NOW = 1_700_000_000_000


def roles_by_partition(per_partition: int) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    for i in range(10_000):
        name = f"role-{i}"
        roles = found[role_partition(name, PARTITIONS)]
        if len(roles) < per_partition:
            roles.append(name)
        if all(len(roles) == per_partition for roles in found.values()):
            return found
    raise AssertionError("no role names found")


def make_ctx():
    clock = ManualClock(NOW)
    broker = MemoryBroker(clock=clock)
    broker.create_topic(STATE_TOPIC, PARTITIONS)
    settings = Settings(partitions=PARTITIONS, member_id="a", app_id="test-tick")
    ctx = build(settings, store="memory://", roles={}, clock=clock,
                transport_factory=lambda: MemoryTransport(broker))
    # A plain dict: Faust's tables take writes only inside an agent's stream.
    ctx.tables = SimpleNamespace(role_state={}, partition_state={})
    return ctx


def leased(role: str, *deadlines: int) -> list[Record]:
    """The records of `role`: a registration, then a lease (renewed) ending at each deadline."""
    log = Log()
    log.register(role, "a")
    for deadline in deadlines:
        log.lease(role, "a", FencingToken(1000, 0), granted_at=deadline - 30_000,
                  deadline=deadline)
    return log.records


def folded(records: list[Record], partition: int):
    value = None
    for record in records:
        value, _ = fold(value, record, partition, PARTITIONS)
    return value


class Watched:
    """The lapses published, and how many table values were decoded."""

    def __init__(self, monkeypatch) -> None:
        self.published: list[str] = []
        self.decoded = 0
        real_decode = role_value.decode

        async def publish(_ctx, events):
            self.published.extend(f"{event.kind} {event.role}" for event in events
                                  if event.kind == "lapsed")

        def counting_decode(raw: bytes):
            self.decoded += 1
            return real_decode(raw)

        monkeypatch.setattr(agents.fold.agent, "_publish", publish)
        monkeypatch.setattr(role_value, "decode", counting_decode)


async def test_a_tick_reports_its_partition_s_lapses_and_decodes_only_its_values(monkeypatch):
    ctx = make_ctx()
    by_partition = roles_by_partition(3)
    for partition, roles in by_partition.items():
        for role in roles:
            ctx.tables.role_state[role.encode()] = role_value.encode(
                folded(leased(role, NOW - 10_000), partition))
    watched = Watched(monkeypatch)
    await apply_tick(ctx, 2, NOW)
    assert sorted(watched.published) == sorted(f"lapsed {role}" for role in by_partition[2])
    assert watched.decoded == len(by_partition[2])
    await apply_tick(ctx, 2, NOW + 1000)
    assert len(watched.published) == len(by_partition[2])  # each lapse once


async def test_a_tick_decodes_only_the_values_due_and_a_folded_lease_is_due_at_its_deadline(
        monkeypatch):
    ctx = make_ctx()
    roles = roles_by_partition(3)[1]
    renewed = leased(roles[2], NOW + 30_000, NOW + 60_000)
    for i, role in enumerate(roles):  # deadlines 10, 20 and 30 s from now
        records = renewed[:-1] if i == 2 else leased(role, NOW + 10_000 * (i + 1))
        ctx.tables.role_state[role.encode()] = role_value.encode(folded(records, 1))
    watched = Watched(monkeypatch)
    await apply_tick(ctx, 1, NOW)  # the first tick reads the partition's values once
    assert (watched.published, watched.decoded) == ([], 3)
    await apply_tick(ctx, 1, NOW + 9_000)
    assert (watched.published, watched.decoded) == ([], 3)  # nothing due: nothing decoded
    await apply_tick(ctx, 1, NOW + 20_000)
    assert (watched.published, watched.decoded) == ([f"lapsed {roles[0]}", f"lapsed {roles[1]}"],
                                                    5)
    # The fold renews the third role's lease: it is due at the new deadline, not the old one.
    await agents.fold.agent.apply_batch(ctx, [state_event(renewed[-1], 1)])
    before = watched.decoded
    await apply_tick(ctx, 1, NOW + 40_000)
    assert (len(watched.published), watched.decoded - before) == (2, 0)
    await apply_tick(ctx, 1, NOW + 60_000)
    assert watched.published[2:] == [f"lapsed {roles[2]}"]


async def test_after_a_rebalance_a_tick_finds_the_values_faust_restored_into_the_table(
        monkeypatch):
    ctx = make_ctx()
    restored = roles_by_partition(1)[3][0]
    watched = Watched(monkeypatch)
    await apply_tick(ctx, 3, NOW)  # partition 3 read, and empty
    # Recovery writes the table directly, without the agents, then Faust
    # signals the end of the rebalance.
    ctx.tables.role_state[restored.encode()] = role_value.encode(
        folded(leased(restored, NOW - 1), 3))
    await ctx.app.on_rebalance_complete.send()
    await apply_tick(ctx, 3, NOW)
    assert watched.published == [f"lapsed {restored}"]


async def test_the_timer_ticks_a_partition_only_while_its_index_is_unbuilt_or_a_value_is_due(
        monkeypatch):
    ctx = make_ctx()
    by_partition = roles_by_partition(1)
    lapsing, live = by_partition[1][0], by_partition[2][0]
    ctx.tables.role_state[lapsing.encode()] = role_value.encode(
        folded(leased(lapsing, NOW + 5_000), 1))
    ctx.tables.role_state[live.encode()] = role_value.encode(folded(leased(live, NOW + 30_000), 2))
    watched = Watched(monkeypatch)
    owned = [0, 1, 2]
    assert ticked(ctx, owned, NOW) == owned  # nothing known yet: each tick builds its index
    for partition in owned:
        await apply_tick(ctx, partition, NOW)
    assert ticked(ctx, owned, NOW + 1_000) == []  # no value of any partition is due
    assert ticked(ctx, owned, NOW + 5_000) == [1]
    await apply_tick(ctx, 1, NOW + 5_000)
    assert watched.published == [f"lapsed {lapsing}"]
    assert ticked(ctx, owned, NOW + 6_000) == []  # reported: nothing more due there
    await ctx.app.on_rebalance_complete.send()  # Faust may have restored any value
    assert ticked(ctx, owned, NOW + 7_000) == owned


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 20), min_size=1, max_size=4), min_size=1, max_size=4),
       st.lists(st.tuples(st.booleans(), st.integers(0, 3), st.integers(0, 8)), max_size=30))
async def test_ticks_report_what_a_check_of_every_value_at_every_tick_reports(deadlines, steps):
    """Whatever the leases, renewals and tick times, the ticks the timer sends
    report the same lapses, at the same times, as checking every value of the
    partition at every tick interval does."""
    ctx = make_ctx()
    roles = roles_by_partition(len(deadlines))[0]
    histories = {role: leased(role, *(NOW + 1000 * d for d in ds))
                 for role, ds in zip(roles, deadlines, strict=True)}
    applied = {role: 2 for role in roles}  # the registration and the first lease
    reference: dict[str, object] = {}
    for role in roles:
        ctx.tables.role_state[role.encode()] = role_value.encode(
            folded(histories[role][:2], 0))
        reference[role] = folded(histories[role][:2], 0)
    reported: list[tuple[int, str]] = []

    async def publish(_ctx, events):
        reported.extend((now, event.role) for event in events if event.kind == "lapsed")

    expected: list[tuple[int, str]] = []
    now = NOW
    agents.fold.agent._publish, saved = publish, agents.fold.agent._publish
    try:
        for is_tick, which, seconds in steps:
            role = roles[which % len(roles)]
            if is_tick:
                now += 1000 * seconds
                if ticked(ctx, [0], now):  # the timer sends a tick only where one is due
                    await apply_tick(ctx, 0, now)
                for name in roles:
                    reference[name], events = expire(reference[name], now)
                    expected.extend((now, name) for event in events if event.kind == "lapsed")
            elif applied[role] < len(histories[role]):
                record = histories[role][applied[role]]
                applied[role] += 1
                await agents.fold.agent.apply_batch(ctx, [state_event(record, 0)])
                reference[role], _ = fold(reference[role], record, 0, PARTITIONS)
    finally:
        agents.fold.agent._publish = saved
    assert sorted(reported) == sorted(expected)
