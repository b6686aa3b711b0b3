"""The tick agent's pass: a tick of one state partition reports the lapses of
that partition's roles and reads only their table values, not every role's
(the table holds the roles of every partition the worker owns)."""

from __future__ import annotations

from types import SimpleNamespace

import agents.fold
from agents.fold import apply_tick
from agents.folding import fold
from app.factory import build
from app.settings import Settings
from coordination import (
    STATE_TOPIC,
    FencingToken,
    ManualClock,
    MemoryBroker,
    MemoryTransport,
    role_partition,
)
from tables import role_state
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


async def test_a_tick_reports_its_partition_s_lapses_and_decodes_only_its_values(monkeypatch):
    clock = ManualClock(NOW)
    broker = MemoryBroker(clock=clock)
    broker.create_topic(STATE_TOPIC, PARTITIONS)
    settings = Settings(partitions=PARTITIONS, member_id="a", app_id="test-tick")
    ctx = build(settings, store="memory://", roles={}, clock=clock,
                transport_factory=lambda: MemoryTransport(broker))
    # A plain dict: Faust's tables take writes only inside an agent's stream.
    ctx.tables = SimpleNamespace(role_state={}, partition_state={})
    by_partition = roles_by_partition(3)
    for partition, roles in by_partition.items():
        for role in roles:
            log = Log()
            log.register(role, "a")
            log.lease(role, "a", FencingToken(1000, 0), granted_at=NOW - 40_000,
                      deadline=NOW - 10_000)
            value = None
            for record in log.records:
                value, _ = fold(value, record, partition, PARTITIONS)
            ctx.tables.role_state[role.encode()] = role_state.encode(value)
    published: list[str] = []

    async def publish(_ctx, events):
        published.extend(f"{event.kind} {event.role}" for event in events)

    decoded: list[bytes] = []
    real_decode = role_state.decode

    def counting_decode(raw: bytes):
        decoded.append(raw)
        return real_decode(raw)

    monkeypatch.setattr(agents.fold, "_publish", publish)
    monkeypatch.setattr(role_state, "decode", counting_decode)
    await apply_tick(ctx, 2, NOW)
    assert sorted(published) == sorted(f"lapsed {role}" for role in by_partition[2])
    assert len(decoded) == len(by_partition[2])
    await apply_tick(ctx, 2, NOW + 1000)
    assert len(published) == len(by_partition[2])  # each lapse once
