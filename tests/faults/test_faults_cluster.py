"""Broker faults on a 3-node cluster of its own: losing the role's transaction
coordinator or its state partition's leader loses no committed write.

The single session broker cannot lose a broker, so this module starts its own
3-node KRaft cluster (``deploy/kafka/kafka.py up --nodes 3``: combined
broker+controller nodes, replication 3, ``transaction.state.log.min.isr`` 2)
and stops it with ``kafka.py down`` at the end, also when a test fails. The
state topic and the output topic have replication 3 and
``min.insync.replicas`` 2, so one dead node loses nothing that was acked.

Each test runs `tests.faults.fault_member` processes a, b and c for one role (each
given the full bootstrap list), SIGKILLs the node that matters for the role
while a leads, waits for 10 commits after it, restarts the node, waits for 5
more, checks that `describe_leadership` names the token of the member that
leads then, and ends with the history checker: no violation, nothing lost.

- the node of the role's transaction coordinator (FindCoordinator, key type 1);
- the leader of the role's state-topic partition, on a role whose coordinator
  is another node;
- the coordinator's node while a is SIGSTOPped; a thaws as a zombie (its
  clock set back) after another member has taken over through the new
  coordinator, and commits nothing: the broker refuses it, or the library
  stops it first (the write it was frozen in outlived the transaction timeout).

A killed node keeps its partitions and its place in the ISRs until the
controller fences it (``broker.session.timeout.ms``, 9 s by default), so the
role has no coordinator, or no writable state partition, for longer than the
lease. The members keep the default timing (3 s lease): a longer lease under
9 s would change nothing, and the point is the leader giving up at its fence
deadline and the role coming back. Whether the role kept its leader, the
leader re-acquired it or another member took over is recorded (the
``CLUSTER-FAULT`` line, with the role's transaction states as the coordinator
described them every quarter second), not assumed.

Measured on 2 cores: writes stop for 8-13 s when a node dies. When the dead
node leads the state partition, the role's last transaction can stay in
PrepareCommit for about 30 s instead: the coordinator's COMPLETE_COMMIT append
failed while the ISR still held the dead node, and the coordinator retries it
only when its marker sender thread next wakes (``request.timeout.ms``, 30 s,
when idle); until then every InitProducerId for the role is answered
CONCURRENT_TRANSACTIONS.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
)

from krabka import FencingToken, LeadershipStatus, describe_leadership
from krabka.format.partition import role_partition
from krabka.kafka import KafkaTransport
from tests.faults.fault_run import FaultReport, FaultRun, Timing, refused_by_broker
from tests.support.kafka_io import create_state_and_output_topics
from tests.support.polling import eventually
from tests.support.ports import kafka_port
from tests.support.processes import Service

pytestmark = [pytest.mark.integration, pytest.mark.own_brokers]

ROOT = Path(__file__).resolve().parents[2]
KAFKA = [sys.executable, str(ROOT / "deploy" / "kafka" / "kafka.py")]
NODES = 3
START_TIMEOUT = 240
TIMEOUT = 120
MIN_ISR = {"min.insync.replicas": "2"}
# A short segment.ms, as the library advises for a compacted state topic.
STATE_CONFIGS = {**MIN_ISR, "segment.ms": "600000"}
TIMING = Timing(lease=3.0, renew=1.0, stagger=0.5, interval=0.1)
MEMBERS = ["a", "b", "c"]
def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Cluster:
    """A 3-node cluster of this module, driven by kafka.py."""

    folder: Path
    bootstrap: str

    def kafka(self, *args: str, timeout: float = TIMEOUT) -> str:
        done = subprocess.run([*KAFKA, *args, "--dir", str(self.folder)], capture_output=True,
                              text=True, timeout=timeout, check=False)
        assert done.returncode == 0, f"kafka.py {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout

    async def kill(self, node: int, signal_name: str = "KILL") -> None:
        await asyncio.to_thread(self.kafka, "kill", "--node", str(node), "--signal", signal_name)

    async def start_node(self, node: int) -> None:
        await asyncio.to_thread(self.kafka, "start-node", "--node", str(node),
                                "--timeout", str(START_TIMEOUT - 30), timeout=START_TIMEOUT)


@pytest.fixture(scope="module")
def module_cluster(tmp_path_factory):
    """This module's 3-node cluster, stopped by ``kafka.py down`` at the end.

    A port taken between the check and the bind (another test's broker) is
    retried on other ports, in a fresh folder."""
    folders: list[Path] = []
    started_at = time.monotonic()
    base = tmp_path_factory.mktemp("cluster")
    try:
        for attempt in range(3):
            folders.append(base / f"kafka-{attempt}")
            up = subprocess.run(
                [*KAFKA, "up", "--dir", str(folders[-1]), "--port", str(kafka_port(NODES)),
                 "--nodes", str(NODES), "--timeout", str(START_TIMEOUT - 30)],
                capture_output=True, text=True, timeout=START_TIMEOUT, check=False)
            if up.returncode == 0 or "in use" not in up.stdout + up.stderr:
                break
        assert up.returncode == 0, up.stdout + up.stderr
        own = Cluster(folders[-1], up.stdout.strip().splitlines()[-1])
        print(f"\n3-node cluster {own.bootstrap} up in {time.monotonic() - started_at:.1f} s")
        yield own
    finally:
        for folder in folders:
            subprocess.run([*KAFKA, "down", "--dir", str(folder), "--timeout", "60"],
                           capture_output=True, text=True, timeout=TIMEOUT, check=False)


@pytest.fixture
def cluster(module_cluster):
    """The module's cluster with every node running and answering. Each test
    restarts the node it kills before it ends; one that failed before that
    leaves the node down, or frozen, and the next test starts it again."""
    for node in range(1, NODES + 1):
        module_cluster.kafka("kill", "--node", str(node), "--signal", "CONT")
        module_cluster.kafka("start-node", "--node", str(node), "--timeout",
                             str(START_TIMEOUT - 30), timeout=START_TIMEOUT)
    return module_cluster


@pytest.fixture
async def run(cluster, tmp_path):
    """A role on fresh replicated topics of the cluster; its members stopped by PID."""
    state, output = await create_state_and_output_topics(
        cluster.bootstrap, 4, replication=NODES, state_configs=STATE_CONFIGS)
    await _set_topic_configs(cluster.bootstrap, output, MIN_ISR)
    folder = tmp_path / "members"
    folder.mkdir()
    fault_run = FaultRun(cluster.bootstrap, state, output, folder, timing=TIMING)
    try:
        yield fault_run
    finally:
        fault_run.stop_all()
        for service in fault_run.members:  # kept beside the journals, for a diagnosis
            index = service.index  # type: ignore[attr-defined]
            (folder / f"member-{index}.stderr").write_text("".join(service.stderr))
            (folder / f"member-{index}.events").write_text(
                "".join(json.dumps(e) + "\n" for e in service.events))


async def _set_topic_configs(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    """`create_state_and_output_topics` configures only the state topic; the
    output topic gets its own here."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs)])
    finally:
        await admin.close()


# --------------------------------------------------------------------------- where things live


async def transaction_coordinator(bootstrap: str, role: str) -> int:
    """The node FindCoordinator (key type 1, key = role) names for the role.

    Retried while the answer is "not available" (15, e.g. before the cluster's
    first FindCoordinator has created ``__transaction_state``) or "loading" (14).
    """
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()

    async def lookup() -> int | None:
        try:
            return int(await client.coordinator_lookup(CoordinationType.TRANSACTION, role))
        except (CoordinatorNotAvailableError, CoordinatorLoadInProgressError,
                NotCoordinatorError):
            return None

    try:
        node: int = await eventually(lookup, lambda found: found is not None, within=TIMEOUT)
        return node
    finally:
        await client.close()


async def partition_leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> leader node of `topic`, from metadata."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        metadata = await client.fetch_all_metadata()
        return {p: metadata.leader_for_partition(TopicPartition(topic, p))
                for p in metadata.partitions_for_topic(topic)}
    finally:
        await client.close()


# --------------------------------------------------------------------------- the role's course


def committed_since(run: FaultRun, since_ms: int) -> list[Any]:
    """Committed writes that started after `since_ms` (true wall clock), in commit order."""
    return sorted((a for a in run.attempts()
                   if a.outcome == "committed" and a.started_ms > since_ms),
                  key=lambda a: a.ended_ms)


async def count_committed_since(run: FaultRun, since_ms: int) -> int:
    return len(committed_since(run, since_ms))


def current_leader(members: dict[str, Service]) -> tuple[str, dict[str, Any]] | None:
    """The one member whose last leadership event is ``leading``, with that event."""
    leading = []
    for name, service in members.items():
        events = [e for e in service.events if e["event"] in ("leading", "fenced", "resigned")]
        if events and events[-1]["event"] == "leading":
            leading.append((name, events[-1]))
    return leading[0] if len(leading) == 1 else None


def course_after(run: FaultRun, members: dict[str, Service], fault_ms: int) -> dict[str, Any]:
    """What the role did after the fault.

    ``kept-leading``: every commit after it is of the leader's tenure before it;
    ``re-acquired``: the leader's tenure ended and the same member took a new one;
    ``failover``: another member committed after it.
    """
    before = [a for a in run.attempts() if a.outcome == "committed" and a.ended_ms <= fault_ms]
    last = max(before, key=lambda a: a.ended_ms)
    after = committed_since(run, fault_ms)
    if all(a.record.tenure == last.record.tenure for a in after):
        outcome = "kept-leading"
    elif all(a.record.member == last.record.member for a in after):
        outcome = "re-acquired"
    else:
        outcome = "failover"
    timeline = sorted(
        (e["t_ms"] - fault_ms, name, e["event"], e.get("tenure"), e.get("error", ""))
        for name, service in members.items() for e in service.events
        if e["event"] in ("leading", "fenced") and e["t_ms"] > fault_ms)
    return {
        "outcome": outcome,
        "leader_before": f"{last.record.member}:{last.record.tenure}",
        "committed_after": sorted({f"{a.record.member}:{a.record.tenure}" for a in after}),
        "events_after_ms": [list(event) for event in timeline],
    }


class CoordinatorWatch:
    """Samples the role's transaction (DescribeTransactions) every quarter second
    from the fault on and keeps each change: ``[ms after the fault, state, token]``
    (or the error), so a report shows how long the coordinator was away or busy."""

    EVERY_S = 0.25

    def __init__(self, bootstrap: str, run: FaultRun, since_ms: int) -> None:
        self.bootstrap, self.run, self.since_ms = bootstrap, run, since_ms
        self.changes: list[list[Any]] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> CoordinatorWatch:
        self._task = asyncio.ensure_future(self._watch())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _watch(self) -> None:
        async with KafkaTransport(self.bootstrap, topic=self.run.state) as transport:
            while True:
                try:
                    status = await describe_leadership(transport, self.run.role)
                    seen = f"{status.state} {status.token}"
                except Exception as exc:
                    seen = type(exc).__name__
                if not self.changes or self.changes[-1][1] != seen:
                    self.changes.append([now_ms() - self.since_ms, seen])
                # A sampling period, not a wait for a condition: the watch
                # measures how long the coordinator was away.
                await asyncio.sleep(self.EVERY_S)


async def leadership_status(bootstrap: str, run: FaultRun) -> LeadershipStatus:
    async with KafkaTransport(bootstrap, topic=run.state) as transport:
        return await describe_leadership(transport, run.role)


def assert_clean(report: FaultReport) -> None:
    assert report.violations == []
    assert report.lost == 0


async def start_members(run: FaultRun) -> dict[str, Service]:
    """a, then b and c; a leads with every member registered and commits a few writes."""
    members = {"a": run.start("a")}
    members["a"].wait_for("leading", TIMEOUT)
    members["b"] = run.start("b")
    members["c"] = run.start("c")
    await eventually(run.role_state, lambda state: sorted(state.roster) == MEMBERS,
                     within=TIMEOUT)
    await eventually(lambda: count_committed_since(run, 0), lambda n: n >= 5, within=TIMEOUT)
    return members


async def wait_commits(run: FaultRun, since_ms: int, count: int) -> None:
    """Until `count` writes that started after `since_ms` have committed; on a timeout
    the failure says what the role's state and the coordinator say and what every
    member last logged."""
    try:
        await eventually(lambda: count_committed_since(run, since_ms), lambda n: n >= count,
                         within=TIMEOUT)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{await diagnosis(run)}") from None


async def diagnosis(run: FaultRun) -> str:
    """The role's state, its coordinator's answer and each member's last words."""
    lines = []
    for what, probe in (("role state", run.role_state),
                        ("leadership", lambda: leadership_status(run.bootstrap, run))):
        try:
            lines.append(f"{what}: {await asyncio.wait_for(probe(), 30)!r}")
        except Exception as exc:
            lines.append(f"{what}: {exc!r}")
    for service in run.members:
        lines.append(f"member pid {service.pid} events: "
                     f"{[(e['event'], e.get('error', '')) for e in service.events][-6:]}")
        lines.append("  stderr tail:\n    " + "    ".join(service.stderr[-12:]))
    return "\n".join(lines)


async def restart_and_finish(
    cluster: Cluster, run: FaultRun, members: dict[str, Service], node: int, scenario: str,
    fault_ms: int, facts: dict[str, Any],
) -> tuple[FaultReport, dict[str, Any]]:
    """After the role settled: restart `node`, wait for 5 more commits, check that the
    coordinator names the last leader's token, stop every member and check the history."""
    settled_ms = now_ms()
    course = course_after(run, members, fault_ms)
    await cluster.start_node(node)
    restarted_ms = now_ms()
    await wait_commits(run, restarted_ms, 5)

    holder = current_leader(members)
    assert holder is not None, {n: [e["event"] for e in s.events] for n, s in members.items()}
    name, leading = holder
    token = FencingToken(leading["producer_id"], leading["producer_epoch"])
    status = await leadership_status(cluster.bootstrap, run)
    assert current_leader(members) == holder, "leadership moved while it was described"
    assert status.authoritative(token), f"the coordinator names {status.token}, not {token}"
    run.stop_all()

    report = await run.report(scenario, fault_at_ms=fault_ms, bootstrap=cluster.bootstrap)
    first = committed_since(run, fault_ms)[0]
    course.update(facts, scenario=scenario, leader_at_end=name, token_at_end=str(token),
                  first_commit_after_fault_ms=first.ended_ms - fault_ms,
                  settled_after_ms=settled_ms - fault_ms,
                  coordinator_after=await transaction_coordinator(cluster.bootstrap, run.role))
    print("CLUSTER-FAULT " + json.dumps(course, sort_keys=True))
    return report, course


async def where_the_role_lives(cluster: Cluster, run: FaultRun) -> dict[str, int]:
    """The nodes of the role's transaction coordinator and of its partition leaders."""
    state = await partition_leaders(cluster.bootstrap, run.state)
    output = await partition_leaders(cluster.bootstrap, run.output)
    return {"coordinator": await transaction_coordinator(cluster.bootstrap, run.role),
            "state_leader": state[role_partition(run.role, run.partitions)],
            "output_leader": output[0]}


async def choose_role(cluster: Cluster, run: FaultRun) -> None:
    """Name the run's role so that its coordinator and its state partition's leader are
    different nodes (before any member starts; FindCoordinator creates nothing)."""
    state = await partition_leaders(cluster.bootstrap, run.state)
    for _ in range(100):
        role = f"fault.role-{uuid.uuid4().hex[:8]}"
        coordinator = await transaction_coordinator(cluster.bootstrap, role)
        if coordinator != state[role_partition(role, run.partitions)]:
            run.role = role
            return
    raise AssertionError(f"every role's coordinator leads its state partition: {state}")


# --------------------------------------------------------------------------- tests


async def test_killing_the_broker_that_hosts_the_roles_transaction_coordinator_loses_no_write(
    cluster, run
):
    """SIGKILL the node FindCoordinator names for the role while a leads; the role
    settles (a keeps its tenure, re-acquires or another member takes over), the node
    comes back, and nothing committed is lost or out of order."""
    members = await start_members(run)
    where = await where_the_role_lives(cluster, run)
    async with CoordinatorWatch(cluster.bootstrap, run, now_ms()) as watch:
        await cluster.kill(where["coordinator"])
        killed_ms = now_ms()  # the node is gone (kafka.py waited for it)
        await wait_commits(run, killed_ms, 10)
    report, course = await restart_and_finish(
        cluster, run, members, where["coordinator"], "coordinator-kill", killed_ms,
        {**where, "killed": where["coordinator"], "transaction_states": watch.changes})

    assert_clean(report)
    assert course["outcome"] in ("kept-leading", "re-acquired", "failover")


async def test_killing_the_broker_that_leads_the_roles_state_partition_loses_no_write(
    cluster, run
):
    """The same with the leader of the role's state-topic partition killed, on a role
    whose transaction coordinator is another node: lease records cannot be written
    until the partition has a new leader."""
    await choose_role(cluster, run)
    members = await start_members(run)
    where = await where_the_role_lives(cluster, run)
    assert where["state_leader"] != where["coordinator"], where
    async with CoordinatorWatch(cluster.bootstrap, run, now_ms()) as watch:
        await cluster.kill(where["state_leader"])
        killed_ms = now_ms()
        await wait_commits(run, killed_ms, 10)
    report, _ = await restart_and_finish(
        cluster, run, members, where["state_leader"], "state-leader-kill", killed_ms,
        {**where, "killed": where["state_leader"], "transaction_states": watch.changes})

    assert_clean(report)


async def test_a_frozen_leader_cannot_write_through_the_coordinator_that_took_over_from_a_dead_node(
    cluster, run
):
    """SIGSTOP the leader, SIGKILL the role's coordinator node; once another member
    leads (through the new coordinator) and commits, set the frozen leader's clock
    back by the time it was frozen and SIGCONT it: a zombie that believes its lease.
    It commits nothing: either the broker refuses it (the new coordinator learned the
    successor's epoch from the replicated transaction log), or the library stops it
    first (the write it was frozen in outlived the transaction timeout, which runs on
    the monotonic clock, so its producer is closed and its tenure ends at the fence
    deadline). Which one is recorded as ``zombie_stopped_by``."""
    members = await start_members(run)
    a = members["a"]
    where = await where_the_role_lives(cluster, run)
    others = {name: service for name, service in members.items() if name != "a"}

    async def other_leader() -> tuple[str, dict[str, Any]] | None:
        return current_leader(others)

    frozen_ms = now_ms()
    async with CoordinatorWatch(cluster.bootstrap, run, frozen_ms) as watch:
        a.signal(signal.SIGSTOP)
        await cluster.kill(where["coordinator"])
        successor = await eventually(other_leader, lambda holder: holder is not None,
                                     within=TIMEOUT)
        await wait_commits(run, frozen_ms, 10)
    run.set_clocks_back_after_freeze(a, frozen_ms)
    thawed_ms = now_ms()
    a.signal(signal.SIGCONT)
    ended = a.wait_for("fenced", TIMEOUT)
    await wait_commits(run, thawed_ms, 5)
    zombie = [x for x in run.attempts() if x.record.member == "a" and x.started_ms > frozen_ms]
    stopped_by = ("broker" if any(refused_by_broker(x.detail) for x in zombie)
                  or refused_by_broker(ended["error"]) else "library")
    report, _ = await restart_and_finish(
        cluster, run, members, where["coordinator"], "frozen-leader-coordinator-kill",
        frozen_ms, {**where, "killed": where["coordinator"], "successor": successor[0],
                    "zombie_stopped_by": stopped_by, "zombie_ended": ended["error"],
                    "zombie_attempts": len(zombie), "transaction_states": watch.changes})

    assert_clean(report)
    assert ended["tenure"] == a.wait_for("leading", 0)["tenure"]
    assert not [x for x in zombie if x.outcome == "committed"]
