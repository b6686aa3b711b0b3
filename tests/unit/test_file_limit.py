"""The worker raises its open-file limit at start-up and says what it allows."""

import logging
import resource

import pytest

from app.file_limit import FDS_PER_HELD_ROLE, RESERVED_FDS, FileLimit, raise_file_limit


@pytest.fixture
def lowered_soft_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(soft, 512)
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
    yield low, hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_soft_limit_below_the_hard_one_is_raised_to_it(lowered_soft_limit, caplog):
    low, hard = lowered_soft_limit
    caplog.set_level(logging.INFO, "app.file_limit")
    limit = raise_file_limit()
    expected = hard if hard != resource.RLIM_INFINITY else 1_048_576
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == expected
    assert (limit.soft, limit.raised_from) == (expected, low)
    assert f"raised from {low}" in caplog.text
    assert f"about {limit.held_roles} roles" in caplog.text


def test_the_roles_allowed_are_what_the_descriptors_left_pay_for():
    assert FileLimit(1024, 1024, None).held_roles == (1024 - RESERVED_FDS) // FDS_PER_HELD_ROLE
    assert FileLimit(100, 100, None).held_roles == 0
