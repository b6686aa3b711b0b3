"""The history checker catches every kind of violation, and passes a clean history.

Histories here are made by hand: two tenures of the role, a writer each, and
the output a read_committed consumer would see; in term mode, the output
with its headers, the claims of the terms partition and the tenures members
believed they held.
"""

import io

import pytest

from krabka import TermFilter
from krabka.defaults import TERMS_TOPIC
from krabka.format.partition import role_partition
from krabka.format.terms import (
    TERM_HEADER,
    Barrier,
    Claim,
    TermStamp,
    claim_key,
    encode_barrier,
    encode_claim,
    encode_term_header,
    encode_term_key,
)
from krabka.rules.state import Record
from tests.faults.history import (
    Attempt,
    FunctionRun,
    HistoryRecord,
    HistoryWriter,
    LeaseStory,
    OutputRecord,
    TenureLife,
    TermTenure,
    attempts_from_journal,
    check_function_copies,
    check_history,
    check_lease_stories,
    check_tenure_owners,
    check_term_history,
    encode_record,
)
from tests.support.sim import LEASE, STATE, Cluster, crash, lead


def write(writer: str, seq: int, tenure: int, token: tuple[int, int]) -> HistoryRecord:
    member = writer.split(".")[0]
    return HistoryRecord(writer, seq, member, "billing", token[0], token[1], tenure)


A1 = write("a.1", 1, tenure=3, token=(1000, 0))
A2 = write("a.1", 2, tenure=3, token=(1000, 0))
B1 = write("b.1", 1, tenure=9, token=(999, 0))  # a smaller producer id, a later tenure
B2 = write("b.1", 2, tenure=9, token=(999, 0))


def committed(*records: HistoryRecord) -> list[Attempt]:
    return [Attempt(record, "committed") for record in records]


def visible(*records: HistoryRecord, start: int = 10) -> list[tuple[int, bytes]]:
    return [(start + 2 * i, encode_record(record)) for i, record in enumerate(records)]


def test_a_clean_history_passes_with_its_counts():
    attempts = [*committed(A1, A2), Attempt(write("a.1", 3, 3, (1000, 0)), "fenced"),
                *committed(B1), Attempt(B2, "unknown")]
    report = check_history(visible(A1, A2, B1, B2), attempts)
    assert report.ok, report
    assert (report.attempted, report.committed, report.fenced, report.unknown) == (5, 3, 1, 1)
    assert (report.visible, report.tenures, report.lost, report.duplicates) == (4, 2, 0, 0)
    assert report.unknown_visible == 1


def test_an_unknown_outcome_may_be_absent():
    report = check_history(visible(A1), [*committed(A1), Attempt(A2, "unknown")])
    assert report.ok, report
    assert report.unknown_visible == 0


def test_the_output_is_checked_in_offset_order_whatever_order_it_is_given_in():
    output = list(reversed(visible(A1, A2, B1)))
    assert check_history(output, committed(A1, A2, B1)).ok


def test_a_record_of_an_earlier_tenure_after_a_later_one_is_a_tenure_regression():
    report = check_history(visible(A1, B1, A2), committed(A1, A2, B1))
    assert report.kinds() == {"tenure-regression"}
    assert report.violations[0].offset == 14


def test_a_committed_write_that_is_not_visible_is_lost():
    report = check_history(visible(A1, B1), committed(A1, A2, B1))
    assert report.kinds() == {"lost"}
    assert report.lost == 1


def test_a_committed_write_visible_twice_is_a_duplicate():
    report = check_history(visible(A1, A2, A2, B1), committed(A1, A2, B1))
    assert report.kinds() == {"duplicate"}
    assert report.duplicates == 1


def test_an_unknown_outcome_visible_twice_is_a_duplicate():
    report = check_history(visible(A1, A2, A2), [*committed(A1), Attempt(A2, "unknown")])
    assert report.kinds() == {"duplicate"}


def test_a_visible_write_that_raised_fenced_error_is_a_violation():
    report = check_history(visible(A1, A2, B1), [*committed(A1, B1), Attempt(A2, "fenced")])
    assert report.kinds() == {"fenced-visible"}


def test_a_visible_write_nobody_attempted_is_a_phantom():
    report = check_history(visible(A1, A2, B1), committed(A1, B1))
    assert report.kinds() == {"phantom"}


def test_a_visible_write_that_differs_from_its_attempt_is_a_phantom():
    forged = write("a.1", 2, tenure=3, token=(1000, 1))
    report = check_history(visible(A1, forged), committed(A1, A2))
    assert "phantom" in report.kinds()


def test_a_record_that_does_not_decode_is_malformed():
    output = [*visible(A1), (12, b"\xff not json"), (14, None)]
    report = check_history(output, committed(A1))
    assert report.kinds() == {"malformed"}
    assert [violation.offset for violation in report.violations] == [12, 14]


def test_one_tenure_under_two_tokens_is_a_token_conflict():
    other = write("c.1", 1, tenure=3, token=(1000, 7))
    report = check_history(visible(A1, other), committed(A1, other))
    assert report.kinds() == {"token-conflict"}


def test_one_token_in_two_tenures_is_a_token_conflict():
    other = write("c.1", 1, tenure=5, token=(1000, 0))
    report = check_history(visible(A1, other), committed(A1, other))
    assert report.kinds() == {"token-conflict"}


def test_two_attempts_logged_for_one_write_are_refused_as_a_broken_harness():
    with pytest.raises(ValueError, match="two attempts"):
        check_history([], [*committed(A1), Attempt(A1, "fenced")])


def test_an_attempt_with_an_unknown_outcome_name_is_refused():
    with pytest.raises(ValueError, match="outcome"):
        Attempt(A1, "maybe")  # type: ignore[arg-type]


def test_a_journal_attempt_without_an_end_line_is_unknown():
    journal = io.StringIO()
    journal.write(Attempt(A1, "committed", 1, 2).to_json() + "\n")
    journal.write('{"event": "start", "record": {"writer": "a.1", "seq": 2, "member": "a", '
                  '"role": "billing", "producer_id": 1000, "producer_epoch": 0, "tenure": 3}, '
                  '"started_ms": 5}\n')
    attempts = attempts_from_journal(journal.getvalue().splitlines())
    assert [(a.record, a.outcome) for a in attempts] == [(A1, "committed"), (A2, "unknown")]


async def test_a_history_writer_logs_committed_and_fenced_attempts_that_the_checker_accepts():
    cluster = Cluster()
    journal = io.StringIO()
    first = cluster.candidate("a")
    await cluster.until(first.done, within=1)
    zombie = first.result()
    writer = HistoryWriter("a.1", "out", 0, clock=cluster.clock, journal=journal)
    assert (await writer.write(zombie)).outcome == "committed"
    crash(zombie)
    successor = cluster.candidate("b")
    await cluster.until(successor.done, within=LEASE + 1)
    fenced = await writer.write(zombie)
    assert fenced.outcome == "fenced"
    output = [(r.offset, r.value) for r in cluster.broker.partition("out", 0)
              .read_committed(0).records]
    report = check_history(output, attempts_from_journal(journal.getvalue().splitlines()))
    assert report.ok, report
    assert (report.committed, report.fenced, report.visible) == (1, 1, 1)


# Term mode: the output is replayed through a TermFilter; claims say who won each term.
#
# a wins term 1 (its claim at offset 0 of the terms partition), b term 2
# (offset 3). On the output partition: a's barrier and two writes, b's
# barrier and a write, then one more write of a, the zombie, under term 1.

A_TENURE, B_TENURE = 0, 3


def claim(offset: int, member: str, term: int) -> Record:
    return Record(offset, encode_term_key(claim_key("billing", member, term)),
                  encode_claim(Claim(member, term, 0)), 0)


TERMS = [claim(0, "a", 1), claim(1, "c", 1), claim(3, "b", 2)]  # c lost term 1 to a


def term_write(writer: str, seq: int, term: int, tenure: int) -> HistoryRecord:
    return HistoryRecord(writer, seq, writer.split(".")[0], "billing", -1, -1, tenure, term)


TA1 = term_write("a.1", 1, 1, A_TENURE)
TA2 = term_write("a.1", 2, 1, A_TENURE)
TA3 = term_write("a.1", 3, 1, A_TENURE)  # the zombie's, after b's barrier
TB1 = term_write("b.1", 1, 2, B_TENURE)


def stamped(offset: int, record: HistoryRecord, term: int | None = None,
            role: str = "billing") -> OutputRecord:
    header = encode_term_header(TermStamp(role, record.term if term is None else term))
    return OutputRecord(offset, encode_record(record), ((TERM_HEADER, header),))


def barrier(offset: int, member: str, term: int, role: str = "billing") -> OutputRecord:
    header = encode_term_header(TermStamp(role, term, barrier=True))
    return OutputRecord(offset, encode_barrier(Barrier(member, term, 0)), ((TERM_HEADER, header),))


OUTPUT = [barrier(0, "a", 1), stamped(1, TA1), stamped(2, TA2), barrier(3, "b", 2),
          barrier(4, "z", 5, role="reports"), stamped(5, TB1), stamped(6, TA3)]
TENURES = [TermTenure("a", 1, A_TENURE, "fenced"), TermTenure("b", 2, B_TENURE, "running")]


def check_terms(output=OUTPUT, attempts=None, tenures=TENURES, reader=None):
    attempts = committed(TA1, TA2, TA3, TB1) if attempts is None else attempts
    return check_term_history(output, attempts, role="billing", topic="out", partition=0,
                              terms=TERMS, tenures=tenures, reader=reader)


class PassesEverything(TermFilter):
    """A reader that forgot to compare terms."""

    def admit(self, topic, partition, headers):
        super().admit(topic, partition, headers)
        return "pass"


class DropsEverything(TermFilter):
    def admit(self, topic, partition, headers):
        return "drop"


def test_a_clean_term_history_passes_and_counts_the_zombie_write_readers_drop():
    report = check_terms()
    assert report.ok, report
    assert (report.visible, report.dropped, report.dropped_committed) == (3, 1, 1)
    assert (report.barriers, report.tenures, report.lost) == (2, 2, 0)
    assert "dropped=1 (committed 1)" in report.summary()


def test_a_record_of_the_old_term_written_before_the_new_barrier_stays_valid():
    output = [barrier(0, "a", 1), stamped(1, TA1), barrier(3, "b", 2), stamped(5, TB1)]
    report = check_terms(output, committed(TA1, TB1))
    assert report.ok, report
    assert (report.visible, report.dropped) == (2, 0)


def test_a_stale_record_that_passes_the_reader_is_caught():
    report = check_terms(reader=PassesEverything(fenced_topics=["out"]))
    assert report.kinds() == {"stale-passed"}
    assert report.violations[0].offset == 6


def test_a_record_of_the_current_term_that_the_reader_drops_is_caught():
    report = check_terms(reader=DropsEverything())
    assert report.kinds() == {"valid-dropped"}
    assert [v.offset for v in report.violations] == [0, 1, 2, 3, 5]


def test_two_tenures_of_one_term_are_two_holders():
    tenures = [*TENURES, TermTenure("c", 1, 1, "fenced")]
    report = check_terms(tenures=tenures)
    assert report.kinds() == {"two-holders"}
    assert len(report.violations) == 2  # c is not term 1's winner, and term 1 had two


def test_a_write_of_a_member_whose_claim_lost_its_term_is_not_the_holders():
    loser = term_write("c.1", 1, 1, tenure=1)
    output = [*OUTPUT, stamped(7, loser)]
    report = check_terms(output, committed(TA1, TA2, TA3, TB1, loser))
    assert report.kinds() == {"not-the-holder"}
    assert report.violations[0].offset == 7


def test_a_barrier_of_a_member_that_did_not_win_its_term_is_not_the_holders():
    output = [*OUTPUT[:3], barrier(3, "c", 2), *OUTPUT[4:]]
    assert check_terms(output).kinds() == {"not-the-holder"}


def test_tenures_whose_terms_go_back_in_claim_order_are_a_term_regression():
    tenures = [TermTenure("b", 2, B_TENURE, "fenced"), TermTenure("c", 1, 7, "fenced")]
    assert "term-regression" in check_terms(tenures=tenures).kinds()


def test_a_zombie_still_running_at_the_end_is_a_violation_a_paused_one_is_not():
    running = [TermTenure("a", 1, A_TENURE, "running"), TENURES[1]]
    assert check_terms(tenures=running).kinds() == {"zombie-not-stopped"}
    paused = [TermTenure("a", 1, A_TENURE, "paused"), TENURES[1]]
    assert check_terms(tenures=paused).ok


def test_a_record_without_one_valid_term_header_is_unstamped():
    bare = OutputRecord(7, encode_record(TB1))
    twice = OutputRecord(8, encode_record(TB1), stamped(8, TB1).headers * 2)
    report = check_terms([*OUTPUT, bare, twice])
    assert report.kinds() == {"unstamped"}
    assert [v.offset for v in report.violations] == [7, 8]


def test_a_write_stamped_with_another_term_than_its_own_is_a_stamp_mismatch():
    output = [*OUTPUT[:5], stamped(5, TB1, term=3)]
    report = check_terms(output, committed(TA1, TA2, TB1))
    assert "stamp-mismatch" in report.kinds()


def test_a_committed_term_write_missing_from_the_log_is_lost():
    report = check_terms(OUTPUT[:6])
    assert report.kinds() == {"lost"}
    assert report.lost == 1


def test_a_term_write_that_raised_fenced_error_but_passes_is_counted_not_a_violation():
    attempts = [*committed(TA1), Attempt(TA2, "fenced"), *committed(TA3, TB1)]
    report = check_terms(attempts=attempts)
    assert report.ok, report
    assert report.fenced_visible == 1


def test_the_term_checker_also_catches_duplicates_and_phantoms():
    assert check_terms([*OUTPUT, stamped(7, TB1)]).kinds() == {"duplicate"}
    assert check_terms(attempts=committed(TA1, TA2, TB1)).kinds() == {"phantom"}


async def test_a_history_writer_in_term_mode_writes_records_the_term_checker_accepts():
    cluster = Cluster()
    term = {"fencing": "term", "outputs": ("out",)}
    first = cluster.candidate("a", **term)
    await cluster.until(first.done, within=1)
    old = first.result()
    writer_a = HistoryWriter("a.1", "out", 0, clock=cluster.clock)
    assert (await writer_a.write(old)).record.term == 1
    crash(old)
    second = cluster.candidate("b", **term)
    await cluster.until(second.done, within=LEASE * 2)
    writer_b = HistoryWriter("b.1", "out", 0, clock=cluster.clock)
    assert (await writer_b.write(second.result())).outcome == "committed"
    terms = cluster.broker.partition(TERMS_TOPIC, role_partition("billing", 4)).read_committed(0)
    output = [OutputRecord(r.offset, r.value, r.headers) for r in cluster.broker.records("out", 0)]
    tenures = [TermTenure("a", 1, old.tenure, "crashed"),
               TermTenure("b", 2, second.result().tenure, "running")]
    report = check_term_history(output, writer_a.attempts + writer_b.attempts, role="billing",
                                topic="out", partition=0, terms=terms.records, tenures=tenures)
    assert report.ok, report
    assert (report.committed, report.visible, report.barriers) == (2, 2, 2)
    for task in second.result()._tasks:
        task.cancel()


# The runner around the writes: tenure owners, function copies, the events' story.

RENEW_MS = 1000


def life(owner: str = "a.1/billing", owner_ended: int | None = 5000,
         ended: int | None = 5500, renewals: tuple[int, ...] = (1000, 2000)) -> TenureLife:
    return TenureLife("billing", "a", 3, "1000:0", owner, 0, owner_ended, ended, 9000, renewals)


def test_a_tenure_that_ends_within_a_renew_interval_of_its_runner_has_an_owner():
    assert check_tenure_owners([life()], RENEW_MS) == []
    assert check_tenure_owners([life(owner_ended=None, ended=None)], RENEW_MS) == []


def test_a_tenure_renewing_after_its_runner_ended_is_ownerless():
    found = check_tenure_owners([life(renewals=(1000, 6000, 7000))], RENEW_MS)
    assert [v.kind for v in found] == ["ownerless-tenure"]
    assert "1 lease record(s), the first 2000 ms after its runner a.1/billing ended" in (
        found[0].detail)


def test_a_tenure_outliving_its_runner_without_renewing_is_ownerless():
    assert [v.kind for v in check_tenure_owners([life(ended=None)], RENEW_MS)] == [
        "ownerless-tenure"]
    assert [v.kind for v in check_tenure_owners([life(ended=6001)], RENEW_MS)] == [
        "ownerless-tenure"]


def test_a_tenure_no_runner_was_told_of_may_not_renew_past_a_renew_interval():
    assert check_tenure_owners([life(owner="", renewals=(900,))], RENEW_MS) == []
    found = check_tenure_owners([life(owner="", renewals=(900, 1800))], RENEW_MS)
    assert [v.kind for v in found] == ["ownerless-tenure"]
    assert "no runner told of it" in found[0].detail


def copy(process: str, started: int, ended: int | None, tenure_ended: int | None = None,
         **more: object) -> FunctionRun:
    return FunctionRun("billing", process, started, started, ended, tenure_ended,
                       **more)  # type: ignore[arg-type]


def test_copies_one_after_another_are_one_copy_at_a_time():
    runs = [copy("a.1", 0, 100, 90), copy("a.1", 100, 300), copy("b.1", 300, None)]
    assert check_function_copies(runs, grace_ms=1000) == []


def test_two_copies_in_one_process_at_once_are_caught():
    found = check_function_copies([copy("a.1", 0, 500, 90), copy("a.1", 200, None)],
                                  grace_ms=1000)
    assert [v.kind for v in found] == ["two-copies"]
    assert "in one process" in found[0].detail


def test_across_members_a_copy_counts_once_it_outran_its_tenure_by_the_stop_bound():
    early = [copy("a.1", 0, 2000, 100), copy("b.1", 1000, None)]
    assert check_function_copies(early, grace_ms=1000) == []
    late = [copy("a.1", 0, 2000, 100), copy("b.1", 1500, None)]
    assert [v.kind for v in check_function_copies(late, grace_ms=1000)] == ["two-copies"]


def test_across_members_a_stopped_process_or_an_ignored_cancellation_does_not_count():
    paused = [copy("a.1", 0, 5000, 100, paused_ms=50), copy("b.1", 1500, None)]
    assert check_function_copies(paused, grace_ms=1000) == []
    stubborn = [copy("a.1", 0, 5000, 100, ignored_cancellation=True), copy("b.1", 1500, None)]
    assert check_function_copies(stubborn, grace_ms=1000) == []
    in_one = [copy("a.1", 0, 5000, 100, ignored_cancellation=True), copy("a.1", 1500, None)]
    assert [v.kind for v in check_function_copies(in_one, grace_ms=1000)] == ["two-copies"]


async def told_story(cluster: Cluster) -> tuple[LeaseStory, list[Record]]:
    """A tenure that renews twice, its story as it was told, and its partition."""
    leadership = await lead(cluster, "a")
    leases = [leadership.lease]
    leadership.on_renewed = lambda lease, _latency: leases.append(lease)
    await cluster.until(lambda: len(leases) == 3, within=3 * LEASE)
    crash(leadership)
    token = leadership.token
    story = LeaseStory("billing", "a", leadership.tenure,
                       (token.producer_id, token.producer_epoch), tuple(leases))
    partition = role_partition("billing", cluster.partitions)
    return story, cluster.broker.partition(STATE, partition).read_committed(0).records


async def test_a_tenure_whose_leases_are_its_elected_event_and_renewals_tells_its_story():
    cluster = Cluster()
    story, records = await told_story(cluster)
    partition = role_partition("billing", cluster.partitions)
    assert check_lease_stories("billing", partition, records, [story]) == []


async def test_a_committed_renewal_missing_from_the_events_breaks_the_story():
    cluster = Cluster()
    story, records = await told_story(cluster)
    partition = role_partition("billing", cluster.partitions)
    renewal = max(r.offset for r in records if r.value)
    found = check_lease_stories("billing", partition,
                                [r for r in records if r.offset != renewal], [story])
    assert [v.kind for v in found] == ["story-missing"]


async def test_a_first_lease_that_is_no_elected_event_breaks_the_story():
    cluster = Cluster()
    story, records = await told_story(cluster)
    partition = role_partition("billing", cluster.partitions)
    found = check_lease_stories("billing", partition,
                                [r for r in records if r.offset != story.tenure], [story])
    assert [v.kind for v in found] == ["story-missing"]
    assert "no elected event" in found[0].detail
