"""TermFilter (docs/term-mode.md#the-filter): what passes, what is dropped and
counted, per topic, partition and role; its saved marks; and, over random
interleavings of leaders and zombies, that no record of a superseded term
passes after the barrier of a newer term on that partition."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from krabka import FormatError, TermFilter
from krabka.format.terms import TERM_HEADER
from tests.support.stamped import UNSTAMPED, barrier, data

T, P = "orders", 0


# -- verdicts ---------------------------------------------------------------


def test_a_record_of_the_current_term_passes():
    f = TermFilter()
    assert f.admit(T, P, data("r", 1)) == "pass"


def test_a_barrier_raises_the_mark_and_is_not_user_data():
    f = TermFilter()
    assert f.admit(T, P, barrier("r", 2)) == "barrier"
    assert f.mark(T, P, "r") == 2


def test_after_a_newer_barrier_a_record_of_the_old_term_is_dropped_and_counted():
    f = TermFilter()
    f.admit(T, P, data("r", 1))
    f.admit(T, P, barrier("r", 2))
    assert f.admit(T, P, data("r", 1)) == "drop"
    assert f.dropped == {"stale": 1}
    assert f.dropped_on(T, P) == 1


def test_a_data_record_of_a_newer_term_raises_the_mark_too():
    f = TermFilter()
    f.admit(T, P, data("r", 3))
    assert f.admit(T, P, data("r", 2)) == "drop"


def test_a_stale_barrier_is_dropped_like_any_stale_record():
    f = TermFilter()
    f.admit(T, P, barrier("r", 3))
    assert f.admit(T, P, barrier("r", 2)) == "drop"
    assert f.mark(T, P, "r") == 3


def test_a_record_written_before_the_newer_barrier_stays_valid():
    # Offset order decides: the zombie's term-1 record landed before term 2's barrier.
    f = TermFilter()
    verdicts = [f.admit(T, P, h) for h in (data("r", 1), data("r", 1), barrier("r", 2))]
    assert verdicts == ["pass", "pass", "barrier"]


def test_marks_are_per_partition():
    f = TermFilter()
    f.admit(T, 0, barrier("r", 2))
    assert f.admit(T, 1, data("r", 1)) == "pass"


def test_marks_are_per_topic():
    f = TermFilter()
    f.admit("a", P, barrier("r", 2))
    assert f.admit("b", P, data("r", 1)) == "pass"


def test_marks_are_per_role():
    f = TermFilter()
    f.admit(T, P, barrier("r", 9))
    assert f.admit(T, P, data("other", 1)) == "pass"


def test_a_record_without_a_term_header_passes_on_a_topic_not_declared_fenced():
    assert TermFilter().admit(T, P, UNSTAMPED) == "pass"


def test_a_record_without_a_term_header_is_dropped_on_a_fenced_topic():
    f = TermFilter(fenced_topics=[T])
    assert f.admit(T, P, UNSTAMPED) == "drop"
    assert f.dropped == {"unstamped": 1}


@pytest.mark.parametrize("headers", [
    [(TERM_HEADER, b"\x00")],
    [(TERM_HEADER, None)],
    data("r", 1) + data("r", 1),
], ids=["undecodable", "null", "twice"])
def test_a_malformed_term_header_drops_the_record_even_on_an_unfenced_topic(headers):
    f = TermFilter()
    assert f.admit(T, P, headers) == "drop"
    assert f.dropped == {"malformed": 1}
    assert f.mark(T, P, "r") == 0


def test_headers_may_come_from_a_mapping():
    f = TermFilter()
    assert f.admit(T, P, dict(barrier("r", 1)).items()) == "barrier"


# -- seeding ----------------------------------------------------------------


def test_a_reader_starting_at_the_end_seeds_the_current_term():
    f = TermFilter()
    f.seed(T, P, "r", 5)
    assert f.admit(T, P, data("r", 4)) == "drop"
    assert f.admit(T, P, data("r", 5)) == "pass"


def test_seeding_never_lowers_a_mark():
    f = TermFilter()
    f.admit(T, P, barrier("r", 5))
    f.seed(T, P, "r", 2)
    assert f.mark(T, P, "r") == 5


@pytest.mark.parametrize(("topic", "partition", "role", "term", "match"), [
    ("", 0, "r", 1, "topic"),
    (T, -1, "r", 1, "partition"),
    (T, 2**31, "r", 1, "partition"),
    (T, 0, "", 1, "role"),
    (T, 0, "r", 0, "term"),
])
def test_seeding_refuses_what_no_record_could_carry(topic, partition, role, term, match):
    with pytest.raises(ValueError, match=match):
        TermFilter().seed(topic, partition, role, term)


# -- saved marks ------------------------------------------------------------


def test_saved_marks_restore_into_a_new_filter():
    f = TermFilter()
    f.admit(T, P, barrier("r", 3))
    f.admit(T, P, barrier("é", 7))
    restarted = TermFilter()
    restarted.restore(T, P, f.save(T, P))
    assert (restarted.mark(T, P, "r"), restarted.mark(T, P, "é")) == (3, 7)
    assert restarted.admit(T, P, data("r", 2)) == "drop"


def test_saved_marks_are_the_documented_bytes():
    f = TermFilter()
    f.seed("t", 1, "b", 2)
    f.seed("t", 1, "a", 1)
    assert f.save("t", 1).hex() == (
        "0000" "000174" "0000000000000001" "0002"
        "000161" "0000000000000001" "000162" "0000000000000002")


def test_a_partition_with_no_marks_saves_and_restores_as_empty():
    restarted = TermFilter()
    restarted.restore(T, P, TermFilter().save(T, P))
    assert restarted.mark(T, P, "r") == 0


def test_restoring_never_lowers_a_mark():
    old = TermFilter()
    old.seed(T, P, "r", 2)
    f = TermFilter()
    f.seed(T, P, "r", 5)
    f.restore(T, P, old.save(T, P))
    assert f.mark(T, P, "r") == 5


def test_the_text_form_round_trips_as_base64():
    f = TermFilter()
    f.seed(T, P, "r", 4)
    text = f.save_text(T, P)
    assert text.isascii()
    restarted = TermFilter()
    restarted.restore_text(T, P, text)
    assert restarted.mark(T, P, "r") == 4


SAVED_T1 = "0000" "000174" "0000000000000001"


@pytest.mark.parametrize("hexed", [
    "",
    "0001" "000174" "0000000000000001" "0000",
    SAVED_T1 + "0000" + "00",
    SAVED_T1 + "0001" + "000161",
    SAVED_T1 + "ffff",
    SAVED_T1 + "0001" + "0000" + "0000000000000001",
    SAVED_T1 + "0001" + "000161" + "0000000000000000",
    SAVED_T1 + "0002" + "000162" + "0000000000000001" + "000161" + "0000000000000001",
    SAVED_T1 + "0002" + "000161" + "0000000000000001" + "000161" + "0000000000000002",
    "0000" "000175" "0000000000000001" "0000",
    "0000" "000174" "0000000000000002" "0000",
], ids=["empty", "version-1", "trailing", "truncated-term", "negative-count", "empty-role",
        "term-0", "out-of-order", "repeated-role", "other-topic", "other-partition"])
def test_restore_refuses_anything_but_one_save_of_this_partition(hexed):
    f = TermFilter()
    with pytest.raises(FormatError) as raised:
        f.restore("t", 1, bytes.fromhex(hexed))
    assert raised.value.part == "term marks"
    assert f.mark("t", 1, "a") == 0


@pytest.mark.parametrize("text", ["not base64!", "AAA", "é"])
def test_restore_text_refuses_what_is_not_base64(text):
    with pytest.raises(FormatError):
        TermFilter().restore_text(T, P, text)


@given(st.binary(max_size=64))
def test_restore_raises_nothing_but_format_error(data_bytes):
    with contextlib.suppress(FormatError):
        TermFilter().restore(T, P, data_bytes)


# -- properties over leaders and zombies ------------------------------------
# A stream of one partition: leaders of rising terms write a barrier, then
# data; any earlier leader (a zombie) may keep writing data and barriers of
# its own term at any point; two roles share the topic.

ROLES = ["r", "s"]


@st.composite
def streams(draw):
    """(partition, role, term, is_barrier) in offset order, over two partitions."""
    current = {(p, role): 0 for p in (0, 1) for role in ROLES}
    out = []
    for _ in range(draw(st.integers(0, 60))):
        p, role = draw(st.sampled_from(sorted(current)))
        move = draw(st.sampled_from(["new-term", "data", "zombie"]))
        if move == "new-term" or current[(p, role)] == 0:
            current[(p, role)] += draw(st.integers(1, 2))
            out.append((p, role, current[(p, role)], True))
        elif move == "data":
            out.append((p, role, current[(p, role)], False))
        else:
            out.append((p, role, draw(st.integers(1, current[(p, role)])), draw(st.booleans())))
    return out


def headers_of(role, term, is_barrier):
    return barrier(role, term) if is_barrier else data(role, term)


@given(streams())
def test_no_record_of_a_superseded_term_passes_after_a_newer_barrier_on_its_partition(stream):
    f = TermFilter()
    newest_barrier: dict[tuple[int, str], int] = {}
    for p, role, term, is_barrier in stream:
        verdict = f.admit(T, p, headers_of(role, term, is_barrier))
        if term < newest_barrier.get((p, role), 0):
            assert verdict == "drop"
        if is_barrier and verdict == "barrier":
            newest_barrier[(p, role)] = term


@given(streams())
def test_every_record_of_the_highest_term_so_far_is_admitted(stream):
    f = TermFilter()
    highest: dict[tuple[int, str], int] = {}
    for p, role, term, is_barrier in stream:
        verdict = f.admit(T, p, headers_of(role, term, is_barrier))
        if term >= highest.get((p, role), 0):
            assert verdict == ("barrier" if is_barrier else "pass")
            highest[(p, role)] = term


@given(streams(), st.integers(0, 60))
def test_a_reader_restarted_from_its_saved_marks_gives_the_same_verdicts(stream, cut):
    straight = TermFilter()
    expected = [straight.admit(T, p, headers_of(*rest)) for p, *rest in stream]
    before = TermFilter()
    verdicts = [before.admit(T, p, headers_of(*rest)) for p, *rest in stream[:cut]]
    after = TermFilter()
    for p in (0, 1):
        after.restore_text(T, p, before.save_text(T, p))
    verdicts += [after.admit(T, p, headers_of(*rest)) for p, *rest in stream[cut:]]
    assert verdicts == expected


@given(streams())
def test_every_drop_is_counted_on_its_partition(stream):
    f = TermFilter()
    verdicts = [(p, f.admit(T, p, headers_of(*rest))) for p, *rest in stream]
    for p in (0, 1):
        assert f.dropped_on(T, p) == sum(1 for q, v in verdicts if (q, v) == (p, "drop"))
    assert sum(f.dropped.values()) == sum(1 for _, v in verdicts if v == "drop")
