"""Reading a term-mode role's authority from the terms topic: `describe_leadership`
with ``fencing="term"``, `partition_highest_terms` and `describe_term_roles`, on the
in-process model with time driven by hand (docs/term-mode.md#observability).

A holder is live while the latest sign of life of its term (its claim or a
heartbeat) is younger than the election timeout, judged by that record's
timestamp against the reader's clock; authority is equality with the highest
term whose holder has not resigned.
"""

from __future__ import annotations

import pytest

from krabka import (
    NO_EPOCH,
    TERM_HEADER,
    Claim,
    FencingToken,
    LeadershipStatus,
    StateTopicError,
    TermFilter,
    TermStatus,
    TermToken,
    claim_key,
    describe_leadership,
    describe_term_roles,
    encode_claim,
    encode_term_header,
    encode_term_key,
    partition_highest_terms,
    role_partition,
)
from krabka.format.terms import TermStamp
from krabka.testing import ManualClock
from tests.support.sim import LEASE, RENEW, Cluster, crash
from tests.unit.test_term_leadership import TERM, lead

TIMEOUT_MS = round(LEASE * 1000)


async def describe_term(cluster: Cluster, role: str = "billing", *,
                        clock: ManualClock | None = None) -> TermStatus:
    return await describe_leadership(cluster.transport(), role, fencing="term",
                                     partitions=cluster.partitions, election_timeout=LEASE,
                                     clock=clock or cluster.clock)


def roles_beside(role: str, partitions: int, count: int) -> list[str]:
    """`count` other roles whose records share `role`'s partition."""
    partition = role_partition(role, partitions)
    found = [f"r{n}" for n in range(1000) if role_partition(f"r{n}", partitions) == partition]
    return found[:count]


async def claim(cluster: Cluster, role: str, member: str, term: int) -> int:
    return await cluster.transport().append_term(
        role_partition(role, cluster.partitions), encode_term_key(claim_key(role, member, term)),
        encode_claim(Claim(member, term, 0)))


# --- describe_leadership(fencing="term") ------------------------------------------------


async def test_a_role_never_claimed_has_no_token_no_holder_and_is_vacant():
    status = await describe_term(Cluster())
    assert (status.token, status.holder, status.tenure, status.last_sign_at) == (
        None, None, None, None)
    assert (status.live, status.resigned, status.status) == (False, False, "vacant")
    assert not status.authoritative(TermToken(1))


async def test_the_leaders_term_is_the_token_and_it_is_authoritative_and_live():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    status = await describe_term(cluster)
    assert status.token == leader.token == TermToken(1)
    assert (status.holder, status.tenure) == ("a", leader.tenure)
    assert status.partition == role_partition("billing", cluster.partitions)
    assert (status.live, status.resigned, status.status) == (True, False, "held")
    assert status.authoritative(leader.token)
    assert not status.authoritative(TermToken(2))
    assert not status.authoritative(FencingToken(4000, 1))


async def test_heartbeats_keep_the_holder_live_long_after_its_claim():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    await cluster.advance(LEASE * 4)
    status = await describe_term(cluster)
    assert status.live
    assert status.last_sign_at > status.claimed_at
    assert status.read_at - status.last_sign_at <= RENEW * 1000
    assert status.authoritative(leader.token)


async def test_a_silent_holder_is_live_until_the_election_timeout_from_its_latest_sign():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    await cluster.advance(RENEW * 2)
    crash(leader)
    last = (await describe_term(cluster)).last_sign_at
    just_before = await describe_term(cluster, clock=ManualClock(last + TIMEOUT_MS - 1))
    at_timeout = await describe_term(cluster, clock=ManualClock(last + TIMEOUT_MS))
    assert just_before.live
    assert just_before.status == "held"
    assert not at_timeout.live
    assert at_timeout.status == "lapsed"
    # Silence ends no term: until a higher claim, readers still pass its records.
    assert at_timeout.authoritative(leader.token)


async def test_a_resigned_holder_is_named_but_neither_live_nor_authoritative():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    await leader.resign()
    status = await describe_term(cluster)
    assert (status.token, status.holder) == (TermToken(1), "a")
    assert (status.resigned, status.live, status.status) == (True, False, "resigned")
    assert not status.authoritative(leader.token)


async def test_a_higher_claim_makes_the_old_term_unauthoritative():
    cluster = Cluster()
    old = await lead(cluster, "a")
    successor = cluster.candidate("b", **TERM)
    await cluster.settle()
    crash(old)
    await cluster.until(successor.done, within=LEASE * 2)
    status = await describe_term(cluster)
    assert (status.token, status.holder, status.live) == (TermToken(2), "b", True)
    assert status.authoritative(successor.result().token)
    assert not status.authoritative(old.token)


async def test_a_wrong_partition_count_is_refused_before_reading():
    cluster = Cluster()
    with pytest.raises(StateTopicError, match="partitions"):
        await describe_leadership(cluster.transport(), "billing", fencing="term",
                                  partitions=cluster.partitions * 2)


async def test_a_non_positive_election_timeout_is_refused():
    with pytest.raises(ValueError, match="election_timeout"):
        await describe_leadership(Cluster().transport(), "billing", fencing="term",
                                  election_timeout=0)


async def test_the_epoch_form_is_unchanged_and_refuses_term_mode_keywords():
    cluster = Cluster()
    status = await describe_leadership(cluster.transport(), "billing")
    assert status == LeadershipStatus("billing", NO_EPOCH, "Unknown")
    with pytest.raises(ValueError, match="fencing='term'"):
        await describe_leadership(cluster.transport(), "billing", partitions=4)  # type: ignore[call-overload]


async def test_an_unknown_fencing_mode_is_refused():
    with pytest.raises(ValueError, match="fencing must be one of"):
        await describe_leadership(Cluster().transport(), "billing", fencing="lease")  # type: ignore[call-overload]


# --- partition_highest_terms and describe_term_roles ----------------------------------------------


async def test_partition_highest_terms_gives_every_role_of_a_partition_its_highest_term_won():
    cluster = Cluster()
    first, second = roles_beside("billing", cluster.partitions, 2)
    await claim(cluster, first, "a", 1)
    await claim(cluster, second, "a", 3)
    await claim(cluster, first, "b", 2)
    await claim(cluster, first, "c", 2)  # loses term 2 to b: the highest stays 2
    terms = await partition_highest_terms(cluster.transport(),
                                          role_partition(first, cluster.partitions),
                                          partitions=cluster.partitions)
    assert terms == {first: 2, second: 3}


async def test_partition_highest_terms_leaves_out_a_role_written_to_another_partition():
    cluster = Cluster()
    here = role_partition("billing", cluster.partitions)
    stray = next(f"s{n}" for n in range(1000)
                 if role_partition(f"s{n}", cluster.partitions) != here)
    await cluster.transport().append_term(
        here, encode_term_key(claim_key(stray, "a", 9)), encode_claim(Claim("a", 9, 0)))
    await claim(cluster, "billing", "a", 1)
    assert await partition_highest_terms(cluster.transport(), here,
                               partitions=cluster.partitions) == {"billing": 1}


async def test_a_partition_out_of_range_is_refused():
    with pytest.raises(ValueError, match="partition"):
        await partition_highest_terms(Cluster().transport(), 4, partitions=4)


async def test_a_filter_seeded_from_a_partitions_highest_terms_drops_the_first_zombie_it_meets():
    cluster = Cluster()
    zombie = await lead(cluster, "a")
    successor = cluster.candidate("b", **TERM)
    await cluster.settle()
    crash(zombie)
    await cluster.until(successor.done, within=LEASE * 2)
    await cluster.settle()
    # A reader that starts at the end of the output topic, past every barrier.
    reader = TermFilter(fenced_topics=["out"])
    terms = await partition_highest_terms(cluster.transport(),
                                role_partition("billing", cluster.partitions),
                                partitions=cluster.partitions)
    for role, term in terms.items():
        reader.seed("out", 0, role, term)
    stale = [(TERM_HEADER, encode_term_header(TermStamp("billing", zombie.token.term)))]
    current = [(TERM_HEADER, encode_term_header(TermStamp("billing", 2)))]
    assert reader.admit("out", 0, stale) == "drop"
    assert reader.admit("out", 0, current) == "pass"


async def test_describe_term_roles_lists_every_claimed_role_by_name():
    cluster = Cluster()
    billing = await lead(cluster, "a")
    reports = await lead(cluster, "b", role="reports")
    await reports.resign()
    statuses = await describe_term_roles(cluster.transport(), cluster.partitions,
                                         election_timeout=LEASE, clock=cluster.clock)
    assert [(s.role, s.holder, s.token, s.status) for s in statuses] == [
        ("billing", "a", billing.token, "held"), ("reports", "b", TermToken(1), "resigned")]
    assert {s.partition for s in statuses} == {role_partition(r, cluster.partitions)
                                               for r in ("billing", "reports")}
