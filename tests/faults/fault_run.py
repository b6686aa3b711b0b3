"""Real-process fault runs on real Kafka, ending with the history checker.

A `FaultRun` owns one role on a fresh state topic and output topic
(`tests.support.kafka_io.create_state_and_output_topics`), starts
`tests.faults.fault_member` processes for it (each with a journal of its guarded
writes and a clock file the test can move: its wall clock alone, as an NTP
step does, or both clocks, as a frozen VM's), and stops every one of them by
PID. `FaultRun.report` reads the output partition as a read_committed
consumer sees it, runs `check_history` over every member's journal, and adds
what the fault cost:

- ``refused_by_broker``: guarded writes the brokers refused (the attempt
  reached Kafka and the commit or send came back fenced): the zombie's
  writes;
- ``refused_by_library``: guarded writes the library refused before they
  reached Kafka, because the tenure had already ended (its fence deadline
  passed, or a renewal had been fenced);
- ``tenures_refused``: tenures that ended because the broker refused one of
  their writes (a lease renewal or a guarded write);
- ``longest_gap_ms``: the longest time between two consecutive committed
  writes (any writer), i.e. how long the role was without a working leader;
- ``failover_ms``: from the fault to the first commit of a later tenure.

A run with ``fencing="term"`` starts its members in term mode, with the terms
topic `create_state_and_output_topics` made beside the state topic. Its
output is judged by the history checker's term mode
(`FaultRun.term_history`: the output with its headers through a
`TermFilter`, the role's claims, and each tenure the members printed), and
can be read record by record with a fresh filter's verdicts
(`FaultRun.term_verdicts`).

Each report is printed as one ``FAULT-REPORT {json}`` line and, when
``FAULT_REPORT_FILE`` is set, appended to that file, so
``FAULT_TRIALS=N FAULT_REPORT_FILE=f python -m pytest tests/faults/test_faults_real.py``
gathers the figures in docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from aiokafka.structs import ConsumerRecord

from krabka import LeadershipStatus, describe_leadership, describe_role_state
from krabka.format.partition import role_partition
from krabka.kafka import KafkaTransport
from krabka.rules.state import RoleState
from tests.faults.history import (
    Attempt,
    HistoryReport,
    OutputRecord,
    TermTenure,
    attempts_from_journal,
    check_history,
    check_term_history,
)
from tests.support.kafka_io import read_committed, term_filtered, terms_topic_of
from tests.support.processes import Service

MEMBER = ["-m", "tests.faults.fault_member"]
TRIALS = int(os.environ.get("FAULT_TRIALS", "1"))

# What a guarded write refused by Kafka says (krabka/kafka/producer/fenced.py):
# "<role>: <what> was fenced: <token> is superseded (<broker error>)".
BROKER_REFUSAL = " is superseded ("
LIBRARY_REFUSAL = ": the tenure of "


@dataclass(frozen=True)
class Timing:
    """A member's lease, renewal, stagger and write interval, in seconds."""

    lease: float = 3.0
    renew: float = 1.0
    stagger: float = 0.5
    interval: float = 0.1


@dataclass
class FaultReport:
    """What one fault run attempted, what survived, and what it cost."""

    scenario: str
    attempted: int
    committed: int
    fenced: int
    unknown: int
    unknown_visible: int
    lost: int
    duplicates: int
    violations: list[str]
    tenures: int
    refused_by_broker: int
    refused_by_library: int
    tenures_refused: int
    longest_gap_ms: int
    failover_ms: int | None

    @property
    def ok(self) -> bool:
        """No violation and nothing lost."""
        return not self.violations and self.lost == 0

    def line(self) -> str:
        """The report as one ``FAULT-REPORT`` JSON line."""
        return "FAULT-REPORT " + json.dumps(asdict(self), sort_keys=True)


class FaultRun:
    """One role, its member processes, their journals and clocks."""

    def __init__(
        self, bootstrap: str, state: str, output: str, folder: Path, *,
        partitions: int = 4, timing: Timing = Timing(), fencing: str = "epoch",
    ) -> None:
        self.bootstrap = bootstrap
        self.state = state
        self.output = output
        self.folder = folder
        self.partitions = partitions
        self.timing = timing
        self.fencing = fencing
        self.role = f"fault.role-{uuid.uuid4().hex[:8]}"
        self.members: list[Service] = []

    def start(
        self, member: str, *extra: str, prefix: list[str] | None = None,
        bootstrap: str | None = None,
    ) -> Service:
        """Start a member process; it is stopped by `stop_all`."""
        index = len(self.members)
        timing = self.timing
        service = Service(
            "--bootstrap-servers", bootstrap or self.bootstrap, "--role", self.role,
            "--member", member, "--topic", self.state, "--output", self.output,
            "--journal", str(self.journal(index)), "--clock-file", str(self.clock_file(index)),
            "--partitions", str(self.partitions), "--lease", str(timing.lease),
            "--renew", str(timing.renew), "--stagger", str(timing.stagger),
            "--interval", str(timing.interval), "--fencing", self.fencing,
            "--terms-topic", terms_topic_of(self.state), *extra,
            program=MEMBER, prefix=prefix,
        )
        service.index = index  # type: ignore[attr-defined]
        self.members.append(service)
        return service

    def journal(self, index: int) -> Path:
        return self.folder / f"member-{index}.journal"

    def clock_file(self, index: int) -> Path:
        return self.folder / f"member-{index}.clock"

    def set_clock(self, service: Service, offset_ms: int, monotonic_ms: int = 0) -> None:
        """Move a member's wall clock by `offset_ms` from the true wall clock, and its
        monotonic clock by `monotonic_ms` (an NTP step moves only the wall clock)."""
        path = self.clock_file(service.index)  # type: ignore[attr-defined]
        temporary = path.with_suffix(".tmp")
        temporary.write_text(f"{offset_ms} {monotonic_ms}\n")
        temporary.replace(path)

    def set_clocks_back_after_freeze(self, service: Service, frozen_at_ms: int) -> None:
        """A frozen VM's clocks (wall and monotonic) stood still while it was
        frozen: set both of a stopped member's back by the time since `frozen_at_ms`."""
        behind = -(time.time_ns() // 1_000_000 - frozen_at_ms)
        self.set_clock(service, behind, monotonic_ms=behind)

    def stop_all(self) -> None:
        """Stop every member by PID: all at once, so no standby takes over from
        a leader that resigns on the way out (SIGCONT, SIGTERM, then SIGKILL)."""
        for service in self.members:
            if service.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    service.signal(signal.SIGCONT)
                    service.signal(signal.SIGTERM)
        for service in self.members:
            service.stop()

    def kill(self, service: Service) -> None:
        """SIGKILL a member and reap it."""
        service.signal(signal.SIGKILL)
        service.process.wait(30)

    async def role_state(self, bootstrap: str | None = None) -> RoleState:
        """The role's state as `describe_role_state` reads it now."""
        async with KafkaTransport(bootstrap or self.bootstrap, topic=self.state) as transport:
            return await describe_role_state(transport, self.role, self.partitions)

    async def leadership_status(self, bootstrap: str | None = None) -> LeadershipStatus:
        """The role's leadership as `describe_leadership` reports it now."""
        async with KafkaTransport(bootstrap or self.bootstrap, topic=self.state) as transport:
            return await describe_leadership(transport, self.role)

    async def term_verdicts(self) -> list[tuple[ConsumerRecord, str]]:
        """Every record of the output partition with a fresh `TermFilter`'s verdict."""
        return await term_filtered(self.bootstrap, self.output)

    async def term_history(self) -> HistoryReport:
        """A term-mode run's output checked by `check_term_history`, once every member stopped.

        Each ``leading`` event is a tenure; it ended ``fenced`` or
        ``resigned`` if its member printed so, else with its process
        (``crashed``: every member has stopped by now).
        """
        records = await read_committed(self.bootstrap, self.output)
        output = [OutputRecord(r.offset, r.value, tuple(r.headers)) for r in records]
        async with KafkaTransport(self.bootstrap, topic=self.state,
                                  terms_topic=terms_topic_of(self.state)) as transport:
            terms = await transport.read_terms(role_partition(self.role, self.partitions))
        return check_term_history(output, self.attempts(), role=self.role, topic=self.output,
                                  partition=0, terms=terms.records, tenures=self.term_tenures())

    def term_tenures(self) -> list[TermTenure]:
        """Every tenure the members printed, with how it ended."""
        tenures = []
        for member in self.members:
            ends = {e["tenure"]: e["event"] for e in member.events
                    if e["event"] in ("fenced", "resigned")}
            tenures += [TermTenure(e["member"], e["term"], e["tenure"],
                                   ends.get(e["tenure"], "crashed"))  # type: ignore[arg-type]
                        for e in member.events if e["event"] == "leading"]
        return tenures

    def attempts(self) -> list[Attempt]:
        """Every member's attempts, from the journals."""
        attempts: list[Attempt] = []
        for index in range(len(self.members)):
            path = self.journal(index)
            if path.exists():
                attempts += attempts_from_journal(path.read_text().splitlines())
        return attempts

    async def report(
        self, scenario: str, *, fault_at_ms: int | None = None, bootstrap: str | None = None
    ) -> FaultReport:
        """Check the history of the run; print and keep the report."""
        output = [(r.offset, r.value)
                  for r in await read_committed(bootstrap or self.bootstrap, self.output)]
        attempts = self.attempts()
        history = check_history(output, attempts)
        report = fault_report(scenario, history, attempts, self.fenced_events(), fault_at_ms)
        print(report.line())
        if path := os.environ.get("FAULT_REPORT_FILE"):
            with Path(path).open("a") as file:  # noqa: ASYNC230 (one short line)
                file.write(report.line() + "\n")
        return report

    def fenced_events(self) -> list[dict[str, Any]]:
        """Every ``fenced`` event any member printed."""
        return [e for m in self.members for e in m.events if e["event"] == "fenced"]


def fault_report(
    scenario: str,
    history: HistoryReport,
    attempts: list[Attempt],
    fenced_events: list[dict[str, Any]],
    fault_at_ms: int | None,
) -> FaultReport:
    """The checker's counts plus what the fault cost (see the module docstring)."""
    fenced = [a for a in attempts if a.outcome == "fenced"]
    commits = sorted((a for a in attempts if a.outcome == "committed"),
                     key=lambda a: a.ended_ms)
    gaps = [b.ended_ms - a.ended_ms for a, b in itertools.pairwise(commits)]
    return FaultReport(
        scenario=scenario,
        attempted=history.attempted,
        committed=history.committed,
        fenced=history.fenced,
        unknown=history.unknown,
        unknown_visible=history.unknown_visible,
        lost=history.lost,
        duplicates=history.duplicates,
        violations=[str(v) for v in history.violations],
        tenures=history.tenures,
        refused_by_broker=sum(1 for a in fenced if refused_by_broker(a.detail)),
        refused_by_library=sum(1 for a in fenced if not refused_by_broker(a.detail)),
        tenures_refused=sum(1 for e in fenced_events if refused_by_broker(e["error"])),
        longest_gap_ms=max(gaps, default=0),
        failover_ms=_failover_ms(commits, fault_at_ms),
    )


def refused_by_broker(detail: str) -> bool:
    """Whether a fence came from Kafka refusing the write itself."""
    return BROKER_REFUSAL in detail and LIBRARY_REFUSAL not in detail


def _failover_ms(commits: list[Attempt], fault_at_ms: int | None) -> int | None:
    if fault_at_ms is None:
        return None
    before = [a.record.tenure for a in commits if a.ended_ms <= fault_at_ms]
    if not before:
        return None
    after = [a for a in commits if a.record.tenure > max(before)]
    return after[0].ended_ms - fault_at_ms if after else None
