"""The term fold: one test per rule of docs/term-mode.md#the-election-rule
(who wins a term, who holds the role, which heartbeats count, which
tombstones settle a claim), and properties over random claim races: members
agree, a claimant's verdict never changes, and compaction after the winners
settled their claims (also half done, as a reader mid-read may see it)
keeps the highest term and its holder, and leaves a role its latest winning
claim and the claims after it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from krabka.format.terms import TermKind, barrier_key, claim_key, decode_term_key, encode_term_key
from krabka.rules.state import Record
from krabka.term.compaction import settled_claims
from krabka.term.fold import TermClaim, TermFold, build_term_view
from tests.support.term_logs import TermLog, compacted


def claim_key_bytes(role, member, term):
    return encode_term_key(claim_key(role, member, term))


def view_of(log: TermLog, role: str = "r"):
    return build_term_view(role, log.records)


# -- who wins a term --------------------------------------------------------


def test_a_role_never_claimed_has_term_0_and_no_holder():
    view = view_of(TermLog())
    assert (view.term, view.holder, view.sign_offset) == (0, None, None)


def test_the_first_claim_of_a_term_wins_it():
    log = TermLog()
    log.claim("r", "a", 1)
    view = view_of(log)
    assert (view.term, view.holder) == (1, "a")
    assert view.winner(1) == TermClaim("a", 1, 0, 0)


def test_a_later_claim_of_the_same_term_loses():
    log = TermLog()
    log.claim("r", "a", 1)
    log.claim("r", "b", 1)
    view = view_of(log)
    assert view.holder == "a"
    assert view.winner(1).offset == 0


def test_a_claim_of_a_higher_term_takes_the_role():
    log = TermLog()
    log.claim("r", "a", 1)
    log.claim("r", "b", 2)
    view = view_of(log)
    assert (view.term, view.holder) == (2, "b")
    assert sorted(view.winners) == [1, 2]


def test_a_late_claim_of_a_term_already_passed_loses():
    log = TermLog()
    log.claim("r", "a", 1)
    log.claim("r", "b", 3)
    log.claim("r", "c", 2)
    view = view_of(log)
    assert (view.term, view.holder) == (3, "b")
    assert view.winner(2) is None


def test_a_claim_may_skip_terms():
    log = TermLog()
    log.claim("r", "a", 57)
    assert (view_of(log).term, view_of(log).holder) == (57, "a")


def test_other_roles_records_change_nothing():
    log = TermLog()
    log.claim("other", "a", 9)
    log.heartbeat("other", "a", 9)
    assert view_of(log).term == 0
    assert view_of(log).errors == []


# -- heartbeats and resigns -------------------------------------------------


def test_the_holders_heartbeat_is_its_latest_sign_of_life():
    log = TermLog()
    log.claim("r", "a", 1)
    beat = log.heartbeat("r", "a", 1)
    view = view_of(log)
    assert (view.heartbeat_offset, view.sign_offset) == (beat.offset, beat.offset)
    assert not view.resigned


def test_a_winning_claim_is_a_sign_of_life_and_forgets_the_old_terms_heartbeat():
    log = TermLog()
    log.claim("r", "a", 1)
    log.heartbeat("r", "a", 1)
    claim = log.claim("r", "b", 2)
    view = view_of(log)
    assert (view.heartbeat, view.sign_offset) == (None, claim.offset)


def test_a_deposed_leaders_heartbeat_is_ignored():
    log = TermLog()
    log.claim("r", "a", 1)
    claim = log.claim("r", "b", 2)
    log.heartbeat("r", "a", 1)
    view = view_of(log)
    assert (view.sign_offset, view.errors) == (claim.offset, [])


def test_a_heartbeat_from_a_member_that_did_not_win_the_term_is_an_error():
    log = TermLog()
    log.claim("r", "a", 1)
    log.claim("r", "b", 1)
    log.heartbeat("r", "b", 1)
    view = view_of(log)
    assert view.sign_offset == 0
    assert [offset for offset, _ in view.errors] == [2]


def test_a_heartbeat_of_a_term_above_every_claim_read_raises_no_term_and_is_no_error():
    """Its claim may have been settled and compacted away, the heartbeat kept."""
    log = TermLog()
    log.heartbeat("r", "a", 5)
    log.claim("r", "b", 6)
    view = view_of(log)
    assert (view.term, view.holder, view.heartbeat, view.errors) == (6, "b", None, [])


def test_a_resign_is_a_heartbeat_that_says_so_and_is_final_for_its_term():
    log = TermLog()
    log.claim("r", "a", 1)
    resign = log.resign("r", "a", 1)
    log.heartbeat("r", "a", 1)
    view = view_of(log)
    assert view.resigned
    assert view.holder == "a"
    assert view.sign_offset == resign.offset


def test_a_new_term_after_a_resign_is_not_resigned():
    log = TermLog()
    log.claim("r", "a", 1)
    log.resign("r", "a", 1)
    log.claim("r", "b", 2)
    assert not view_of(log).resigned


# -- records the fold skips -------------------------------------------------


def test_a_claim_whose_value_disagrees_with_its_key_is_skipped():
    log = TermLog()
    good = log.claim("r", "a", 1)
    log.add(claim_key_bytes("r", "b", 2), good.value)
    view = view_of(log)
    assert view.term == 1
    assert [offset for offset, _ in view.errors] == [1]


def test_undecodable_keys_barrier_keys_and_their_tombstones_are_skipped_and_listed():
    log = TermLog()
    log.add(b"\x00", b"x")
    log.add(encode_term_key(barrier_key("r", "a", 1)), None)
    log.add(encode_term_key(barrier_key("r", "a", 1)), b"x")
    log.add(claim_key_bytes("r", "a", 1), b"\x00")
    view = view_of(log)
    assert view.term == 0
    assert [offset for offset, _ in view.errors] == [0, 1, 2, 3]


# -- settled claims -----------------------------------------------------------


def test_a_tombstone_of_a_claim_below_the_highest_term_settles_it_and_changes_nothing():
    log = TermLog()
    log.claim("r", "a", 1)
    log.claim("r", "b", 1)
    log.claim("r", "b", 2)
    before = view_of(log)
    assert settled_claims(before, 2) == [("a", 1), ("b", 1)]
    log.add(claim_key_bytes("r", "a", 1), None)
    log.add(claim_key_bytes("r", "b", 1), None)
    view = view_of(log)
    assert (view.term, view.holder, view.winners, view.errors) == (
        2, "b", before.winners, [])
    assert view.claims == {("b", 2): 2}
    assert settled_claims(view, 3) == [("b", 2)]


def test_a_tombstone_of_a_claim_already_compacted_away_is_no_error():
    log = TermLog()
    log.add(claim_key_bytes("r", "a", 1), None)
    log.claim("r", "b", 2)
    view = view_of(log)
    assert (view.term, view.holder, view.errors) == (2, "b", [])


def test_a_tombstone_of_a_heartbeat_is_an_error():
    log = TermLog()
    log.claim("r", "a", 1)
    log.heartbeat("r", "a", 1)
    log.add(log.records[-1].key, None)
    view = view_of(log)
    assert [offset for offset, _ in view.errors] == [2]


# -- properties over claim races --------------------------------------------
# Members claim terms from their own, possibly stale, view of the partition:
# each claim is for (highest term in the prefix that member had read) + 1.
# A member claims a term at most once, the writers' rule the fold relies on.

MEMBERS = ["a", "b", "c", "d"]


@st.composite
def races(draw):
    """A partition written by members that each read a random prefix before claiming."""
    log = TermLog()
    claimed: set[tuple[str, int]] = set()
    for _ in range(draw(st.integers(0, 25))):
        member = draw(st.sampled_from(MEMBERS))
        kind = draw(st.sampled_from(["claim", "claim", "heartbeat", "resign"]))
        prefix = log.records[: draw(st.integers(0, len(log.records)))]
        seen = build_term_view("r", prefix)
        if kind == "claim":
            term = seen.term + 1 + draw(st.integers(0, 1))
            if (member, term) not in claimed:
                claimed.add((member, term))
                log.claim("r", member, term)
        elif seen.holder is not None:
            log.heartbeat("r", seen.holder, seen.term, resigned=kind == "resign")
    return log.records


def fold_in_pieces(records: list[Record], cuts: list[int]):
    """Fold `records` by one `TermFold`, handing them over in chunks ending at `cuts`."""
    fold = TermFold("r")
    start = 0
    for end in [*sorted(cuts), len(records)]:
        for record in records[start:end]:
            fold.apply(record)
        start = max(start, end)
    return fold.view


@given(races(), st.lists(st.integers(0, 30), max_size=4))
def test_two_members_folding_the_same_records_agree_on_the_term_and_holder(records, cuts):
    one = build_term_view("r", records)
    other = fold_in_pieces(records, cuts)
    assert (one.term, one.holder, one.winners, one.resigned) == (
        other.term, other.holder, other.winners, other.resigned)


@given(races())
def test_a_member_folding_the_compacted_partition_agrees_on_the_term_and_holder(records):
    full = build_term_view("r", records)
    kept = build_term_view("r", compacted(records))
    assert (kept.term, kept.holder, kept.winners) == (full.term, full.holder, full.winners)


def claims_in(records: list[Record]) -> list[tuple[int, str, int]]:
    """(offset, claimant, term) of every claim record, in offset order."""
    keys = [(record.offset, decode_term_key(record.key)) for record in records]
    return [(offset, key.member, key.term) for offset, key in keys if key.kind is TermKind.CLAIM]


@given(races())
def test_a_claim_never_wins_over_an_earlier_claim_of_the_same_term(records):
    view = build_term_view("r", records)
    for offset, _member, term in claims_in(records):
        winner = view.winner(term)
        if winner is not None:
            assert winner.offset <= offset


@given(races())
def test_a_winning_claim_is_higher_than_every_claim_before_it(records):
    view = build_term_view("r", records)
    for winner in view.winners.values():
        earlier = [term for offset, _, term in claims_in(records) if offset < winner.offset]
        assert all(term < winner.term for term in earlier)


@given(races())
def test_the_verdict_a_claimant_reads_at_its_claims_offset_never_changes(records):
    final = build_term_view("r", records)
    for offset, member, term in claims_in(records):
        then = build_term_view("r", records[: offset + 1]).winner(term)
        won_then = then is not None and then.offset == offset
        won_finally = final.winner(term) is not None and final.winner(term).offset == offset
        assert won_then == won_finally, (member, term)


@given(races())
def test_the_highest_term_never_falls_as_records_are_read(records):
    fold = TermFold("r")
    highest = 0
    for record in records:
        fold.apply(record)
        assert fold.view.term >= highest
        highest = fold.view.term


@st.composite
def settled_races(draw):
    """`races`, where each winner, having read its win and perhaps more,
    tombstones the claims below its term that it read (`settled_claims`)."""
    log = TermLog()
    claimed: set[tuple[str, int]] = set()
    for _ in range(draw(st.integers(0, 30))):
        member = draw(st.sampled_from(MEMBERS))
        kind = draw(st.sampled_from(["claim", "claim", "heartbeat", "resign"]))
        prefix = log.records[: draw(st.integers(0, len(log.records)))]
        seen = build_term_view("r", prefix)
        if kind == "claim":
            term = seen.term + 1 + draw(st.integers(0, 1))
            if (member, term) in claimed:
                continue
            claimed.add((member, term))
            offset = log.claim("r", member, term).offset
            read = log.records[: draw(st.integers(offset + 1, len(log.records)))]
            view = build_term_view("r", read)
            winner = view.winner(term)
            if winner is not None and winner.offset == offset:
                for old_member, old_term in settled_claims(view, term):
                    log.add(claim_key_bytes("r", old_member, old_term), None)
        elif seen.holder is not None:
            log.heartbeat("r", seen.holder, seen.term, resigned=kind == "resign")
    return log.records


def cleaned(records: list[Record], removed: set[int] | None = None) -> list[Record]:
    """What the cleaner may leave: records with a later record of their key
    removed (all of them, or those of `removed`), tombstones included once
    their delete retention passed."""
    latest = {record.key: record.offset for record in records}
    superseded = {r.offset for r in records if latest[r.key] != r.offset or r.value is None}
    gone = superseded if removed is None else superseded & removed
    return [record for record in records if record.offset not in gone]


@given(settled_races(), st.sets(st.integers(0, 120)))
def test_compaction_of_settled_claims_keeps_the_highest_term_and_its_holder(records, removed):
    full = build_term_view("r", records)
    compacted_view = build_term_view("r", cleaned(records))
    assert (compacted_view.term, compacted_view.holder) == (full.term, full.holder)
    assert compacted_view.errors == []
    # Half done, as a reader whose read overlaps the cleaner sees it: a claim
    # below the highest term may seem to win, but the highest term and its
    # holder are the same.
    partly = build_term_view("r", cleaned(records, removed))
    assert (partly.term, partly.holder) == (full.term, full.holder)


@given(settled_races())
def test_after_compaction_a_role_keeps_its_latest_winning_claim_and_the_claims_after_it(records):
    full = build_term_view("r", records)
    top = full.winner(full.term)
    kept = claims_in(cleaned(records))
    assert all(offset >= top.offset for offset, _, _ in kept) if top else kept == []
    # Claims after the winner are at most one per member: the ones that had
    # not read it (of its term or below) and the next term's, not yet settled.
    assert len([c for c in kept if top and c[0] > top.offset]) <= len(MEMBERS) * 2
