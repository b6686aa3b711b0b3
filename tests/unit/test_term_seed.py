"""Seeding a TermFilter from the terms topic
(docs/term-mode.md#seeding-a-reader-that-starts-at-the-end): each role's highest
term, by the election rule's fold, becomes its mark on every partition of the
output a reader starts at the end of."""

from __future__ import annotations

import pytest

from krabka import (
    TERMS_TOPIC,
    Claim,
    TermFilter,
    claim_key,
    encode_claim,
    encode_term_key,
    highest_terms,
    role_partition,
    seed_filter,
)
from krabka.testing import MemoryBroker, MemoryTransport
from tests.support.stamped import data

PARTITIONS = 4


def terms() -> MemoryTransport:
    broker = MemoryBroker()
    broker.create_topic(TERMS_TOPIC, PARTITIONS)
    return MemoryTransport(broker)


async def claim(transport: MemoryTransport, role: str, member: str, term: int,
                partition: int | None = None) -> None:
    where = role_partition(role, PARTITIONS) if partition is None else partition
    await transport.append_term(where, encode_term_key(claim_key(role, member, term)),
                                encode_claim(Claim(member, term, 0)))


def roles_on_distinct_partitions(count: int) -> list[str]:
    """`count` role names that hash to `count` different terms partitions."""
    found: dict[int, str] = {}
    n = 0
    while len(found) < count:
        found.setdefault(role_partition(f"role-{n}", PARTITIONS), f"role-{n}")
        n += 1
    return list(found.values())


async def test_the_highest_term_is_the_highest_won_not_the_last_claimed():
    transport = terms()
    await claim(transport, "billing", "a", 1)
    await claim(transport, "billing", "b", 3)
    await claim(transport, "billing", "c", 2)  # late: term 3 was claimed first, it loses
    assert await highest_terms(transport, PARTITIONS) == {"billing": 3}


async def test_every_role_of_every_partition_is_found_when_no_roles_are_named():
    transport = terms()
    first, second = roles_on_distinct_partitions(2)
    await claim(transport, first, "a", 2)
    await claim(transport, second, "a", 5)
    assert await highest_terms(transport, PARTITIONS) == {first: 2, second: 5}


async def test_named_roles_are_the_only_ones_reported_and_unclaimed_ones_are_left_out():
    transport = terms()
    first, second, never = roles_on_distinct_partitions(3)
    await claim(transport, first, "a", 2)
    await claim(transport, second, "a", 5)
    assert await highest_terms(transport, PARTITIONS, [second, never]) == {second: 5}


async def test_a_claim_in_another_roles_partition_decides_nothing():
    transport = terms()
    role = "billing"
    elsewhere = (role_partition(role, PARTITIONS) + 1) % PARTITIONS
    await claim(transport, role, "a", 9, partition=elsewhere)
    assert await highest_terms(transport, PARTITIONS) == {}
    assert await highest_terms(transport, PARTITIONS, [role]) == {}


async def test_seeding_sets_each_roles_mark_on_every_partition_of_the_topic():
    transport = terms()
    await claim(transport, "billing", "a", 4)
    reader = TermFilter(fenced_topics=["out"])
    assert await seed_filter(reader, transport, PARTITIONS, "out", range(3)) == {"billing": 4}
    assert [reader.mark("out", p, "billing") for p in range(3)] == [4, 4, 4]
    assert reader.mark("out", 3, "billing") == 0
    assert reader.admit("out", 2, data("billing", 3)) == "drop"
    assert reader.admit("out", 2, data("billing", 4)) == "pass"


async def test_a_seed_never_lowers_a_mark_the_filter_already_has():
    transport = terms()
    await claim(transport, "billing", "a", 2)
    reader = TermFilter()
    reader.seed("out", 0, "billing", 7)
    await seed_filter(reader, transport, PARTITIONS, "out", [0])
    assert reader.mark("out", 0, "billing") == 7


async def test_bad_arguments_are_refused():
    transport = terms()
    with pytest.raises(ValueError, match="partitions"):
        await highest_terms(transport, 0)
    with pytest.raises(ValueError, match="empty"):
        await highest_terms(transport, PARTITIONS, [""])
    with pytest.raises(TypeError, match="collection of role names"):
        await highest_terms(transport, PARTITIONS, "billing")
