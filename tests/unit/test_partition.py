"""Kafka's key partitioning applied to role names (see also test_partition_conformance.py)."""

import pytest

from krabka.format.partition import murmur2, role_partition, to_positive


@pytest.mark.parametrize(
    ("data", "expected"),
    [(b"21", -973932308), (b"foobar", -790332482), (b"abc", 479470107)],
)
def test_murmur2_matches_kafkas_utils_test_vectors(data, expected):
    assert murmur2(data) == expected


def test_to_positive_clears_the_sign_bit_and_is_not_abs():
    assert to_positive(-973932308) == (-973932308) & 0x7FFFFFFF
    assert to_positive(-973932308) != abs(-973932308)


def test_to_positive_keeps_a_positive_value():
    assert to_positive(479470107) == 479470107


def test_role_partition_hashes_the_utf8_role_name():
    assert role_partition("foobar", 16) == to_positive(-790332482) % 16


def test_role_partition_with_one_partition_is_zero():
    assert role_partition("anything", 1) == 0


@pytest.mark.parametrize("partitions", [0, -1])
def test_role_partition_refuses_fewer_than_one_partition(partitions):
    with pytest.raises(ValueError, match="at least 1"):
        role_partition("billing", partitions)
