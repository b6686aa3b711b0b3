"""The checks the rebalancing group tests apply to the state topic's records:
how long each role stood vacant after a join, and whether a holder was
replaced without resigning. They must catch what they look for."""

from __future__ import annotations

from dataclasses import dataclass

from krabka.format.records import Lease, encode_key, encode_lease, lease_key, registration_key
from tests.support.rebalancing import long_vacancies, replaced_without_resignation, role_history


@dataclass(frozen=True)
class R:
    key: bytes | None
    value: bytes | None
    timestamp: int


def lease(role: str, member: str | None, at: int) -> R:
    value = None if member is None else encode_lease(Lease(member, 1, 0, at, at + 30_000))
    return R(encode_key(lease_key(role)), value, at)


def test_a_vacancy_after_the_join_longer_than_the_limit_is_named_and_a_shorter_one_is_not():
    records = [lease("a", "w1", 0), lease("a", None, 1_000), lease("a", "w4", 1_400),
               lease("b", "w2", 0), lease("b", None, 2_000), lease("b", "w4", 4_600)]
    assert long_vacancies(records, since_ms=500, read_ms=10_000, limit_ms=2_500) == [
        "b for 2600 ms from 1500 ms after the join, to w4"]


def test_a_vacancy_before_the_join_is_not_counted():
    records = [lease("a", "w1", 0), lease("a", None, 100), lease("a", "w2", 9_000)]
    assert long_vacancies(records, since_ms=500, read_ms=10_000, limit_ms=2_500) == []


def test_a_role_still_vacant_at_the_read_counts_up_to_the_read():
    records = [lease("a", "w1", 0), lease("a", None, 1_000)]
    assert long_vacancies(records, since_ms=500, read_ms=4_000, limit_ms=2_500) == [
        "a, vacant since 3000 ms before the read"]
    assert long_vacancies(records, since_ms=500, read_ms=3_000, limit_ms=2_500) == []


def test_a_holder_replaced_with_no_tombstone_between_is_named():
    records = [lease("a", "w1", 0), lease("a", "w1", 10_000), lease("a", "w2", 12_000),
               lease("b", "w1", 0), lease("b", None, 11_000), lease("b", "w4", 11_100)]
    assert replaced_without_resignation(records, since_ms=5_000) == ["a: w2 replaced w1"]


def test_a_replacement_before_the_join_is_not_counted():
    records = [lease("a", "w1", 0), lease("a", "w2", 1_000), lease("a", "w2", 6_000)]
    assert replaced_without_resignation(records, since_ms=5_000) == []


def test_a_role_s_history_lists_its_records_in_order_relative_to_the_join():
    records = [R(encode_key(registration_key("a", "w1")), b"r", 0), lease("a", "w1", 100),
               lease("b", "w2", 200), lease("a", None, 6_000),
               R(encode_key(registration_key("a", "w1")), None, 6_000), lease("a", "w4", 6_100)]
    assert role_history(records, "a", since_ms=5_000) == [
        "-5000 ms registered w1",
        "-4900 ms lease of w1, token 1:0, granted -4900 ms",
        "+1000 ms lease tombstone",
        "+1000 ms deregistered w1",
        "+1100 ms lease of w4, token 1:0, granted +1100 ms",
    ]
