"""The CLI commands' JSON, on the in-process model (the real commands run in the
integration suite)."""

from __future__ import annotations

from app.commands import describe_all, describe_one
from coordination import (
    STATE_TOPIC,
    ManualClock,
    MemoryBroker,
    MemoryTransport,
    Registration,
    acquire_leadership,
    encode_key,
    encode_registration,
    registration_key,
    role_partition,
)

PARTITIONS = 4


async def test_roles_and_role_describe_the_log():
    clock = ManualClock()
    broker = MemoryBroker(clock=clock)
    broker.create_topic(STATE_TOPIC, PARTITIONS)
    transport = MemoryTransport(broker)
    leadership = await acquire_leadership(transport, "billing", "a", partitions=PARTITIONS,
                                          lease_duration=3, renew_interval=1,
                                          challenge_stagger=0.5, clock=clock)
    # A role with a registration only: a member that never led.
    await transport.append(role_partition("reports", PARTITIONS),
                           encode_key(registration_key("reports", "b")),
                           encode_registration(Registration("b", 0)))
    now = clock.now_ms()
    listing = await describe_all(transport, PARTITIONS, now)
    rows = {row["role"]: row for row in listing["roles"]}
    assert set(rows) == {"billing", "reports"}
    assert rows["billing"]["holder"] == "a"
    assert rows["billing"]["status"] == "held"
    assert rows["reports"]["status"] == "vacant"
    detail = await describe_one(transport, "billing", PARTITIONS, now)
    assert detail is not None
    assert detail["authoritative"] is True
    assert detail["current"] == {"producer_id": leadership.token.producer_id,
                                 "producer_epoch": leadership.token.producer_epoch}
    assert detail["lease"]["tenure"] == leadership.tenure
    assert await describe_one(transport, "nobody", PARTITIONS, now) is None
    await leadership.resign()
