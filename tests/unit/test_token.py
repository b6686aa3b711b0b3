"""Fencing tokens: ordering for display, equality for authority."""

from krabka import FencingToken, LeadershipStatus
from krabka.format.token import NO_EPOCH


def test_tokens_order_by_producer_id_first():
    assert FencingToken(5, 0) > FencingToken(4, 32766)


def test_tokens_of_one_producer_id_order_by_epoch():
    assert FencingToken(7, 3) < FencingToken(7, 4)


def test_no_epoch_is_below_every_minted_token():
    for token in [FencingToken(0, 0), FencingToken(0, -1 + 1), FencingToken(2**63 - 1, 32767)]:
        assert token > NO_EPOCH


def test_tokens_with_equal_fields_are_equal_and_hash_alike():
    assert FencingToken(9, 2) == FencingToken(9, 2)
    assert len({FencingToken(9, 2), FencingToken(9, 2)}) == 1


def test_only_the_current_token_is_authoritative():
    status = LeadershipStatus("billing", FencingToken(9, 2), "Empty")
    assert status.authoritative(FencingToken(9, 2))
    assert not status.authoritative(FencingToken(9, 1))
    assert not status.authoritative(FencingToken(9, 3))


def test_a_newer_but_smaller_producer_id_is_authoritative_and_the_larger_old_one_is_not():
    status = LeadershipStatus("billing", FencingToken(3, 0), "Empty")
    assert status.authoritative(FencingToken(3, 0))
    assert not status.authoritative(FencingToken(1000, 32766))


def test_no_epoch_is_never_authoritative_even_for_an_unknown_role():
    status = LeadershipStatus("never-taken", NO_EPOCH, "Unknown")
    assert not status.authoritative(NO_EPOCH)
