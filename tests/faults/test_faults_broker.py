"""Faults of the broker and of the network, on a broker of the test's own.

Like tests/faults/test_faults_real.py, each test runs `tests.faults.fault_member` processes
for one role, injects one fault, lets the role settle, stops every process by
PID and ends with the history checker (a ``FAULT-REPORT`` line): no
violation, nothing lost. These faults take a broker away, so the module starts
its own single broker with deploy/kafka/kafka.py on free ports (the network
test one more, on the veth's address) and stops it with ``kafka.py down`` at
the end, also when a test fails; each test uses fresh topics and a fresh role.

- The broker restarted while a role is held: the leader cannot renew, so it
  stops at its fence deadline; once the broker is back, the role is led again.
- One member cut off by the network: the leader runs in its own network
  namespace, joined to the root namespace by a veth pair; the broker listens
  on the veth's host-side address (``kafka.py up --host``). Setting that veth
  down drops every packet (no RST): a true partition. Needs root (``ip netns``);
  a refused ``ip`` command fails the test with the refusal.
- Term mode, in-process members: a term leader's terms tail reads again
  after the broker restarts (its heartbeats are read back, and a higher claim
  made afterwards ends its tenure), and so does one whose terms tail fails
  (a fetch error no retry outlasts), term candidates waiting across the
  restart elect the next in rank when the leader resigns afterwards, and
  three term-mode runners through three broker crashes (5 s down each) are
  back to exactly one running function within 30 s of each return, no two
  functions overlapping by more than the election timeout.
- The leader's wall clock stepped back while its renewals hang (the broker
  SIGSTOPped): it still stops at its fence deadline, which runs on the
  monotonic clock.

``test_bug_*`` tests show a library bug these runs found; they fail until it is
fixed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiokafka.errors
import pytest

from krabka import (
    EpochLostError,
    FencedError,
    LeaderRunner,
    Leadership,
    LeadershipOptions,
    RunnerObserver,
    RunnerState,
    acquire_leadership,
    describe_role_state,
)
from krabka.format.partition import role_partition
from krabka.format.records import Lease, decode_lease, encode_key, encode_lease, lease_key
from krabka.format.terms import Claim, claim_key, encode_claim, encode_term_key
from krabka.kafka import KafkaTransport, KafkaUnavailableError, ProducerFatalError
from krabka.term.tenure import TermLeadership
from tests.faults.fault_run import FaultReport, FaultRun, Timing
from tests.support.kafka_io import (
    create_state_and_output_topics,
    failing_fetches,
    terms_topic_of,
)
from tests.support.lease_io import write_lease
from tests.support.polling import eventually
from tests.support.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.own_brokers]

ROOT = Path(__file__).resolve().parents[2]
KAFKA = [sys.executable, str(ROOT / "deploy" / "kafka" / "kafka.py")]
LOOPBACK = "127.0.0.1"
TIMEOUT = 120  # a broker restart and the clients' reconnection take seconds on 2 busy cores
TIMING = Timing(lease=3.0, renew=1.0, stagger=0.5, interval=0.1)
MARGIN_MS = 1000  # min(5 s, lease / 3): the leader stops trusting its lease this early
RENEW_MS = 1000
SCHEDULING_MS = 1500  # how late a process on a loaded machine may notice its deadline
NETWORK = ipaddress.ip_network("10.213.0.0/16")
OUTAGE = 60.0  # seconds the broker stays away in the runner's outage test
BROKER_STOP_SIGNALS = os.environ.get("FAULT_BROKER_STOP", "KILL").split(",")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# --------------------------------------------------------------------------- the broker


def _kafka(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KAFKA, *args], capture_output=True, text=True, timeout=timeout,
                          check=False)


@dataclass(frozen=True)
class Broker:
    """A single broker started by kafka.py in `folder`."""

    folder: Path
    bootstrap: str

    def kill(self, signal_name: str) -> None:
        """Signal node 1; for KILL and TERM, return once it is gone."""
        done = _kafka("kill", "--dir", str(self.folder), "--node", "1", "--signal", signal_name)
        assert done.returncode == 0, done.stdout + done.stderr

    def start(self) -> None:
        """Start node 1 unless it runs; return once it answers Metadata."""
        done = _kafka("start-node", "--dir", str(self.folder), "--node", "1")
        assert done.returncode == 0, done.stdout + done.stderr


@contextlib.contextmanager
def own_broker(folder: Path, host: str = LOOPBACK) -> Iterator[Broker]:
    """A broker listening on `host`, stopped by ``kafka.py down`` (by PID) at the end."""
    try:
        port, controller = free_port(host), free_port()
        started = _kafka("up", "--dir", str(folder), "--host", host,
                         "--port", str(port), "--controller-port", str(controller))
        assert started.returncode == 0, started.stdout + started.stderr
        yield Broker(folder, started.stdout.strip().splitlines()[-1])
    finally:
        stopped = _kafka("down", "--dir", str(folder), timeout=120)
        if stopped.returncode != 0:
            print(f"stopping the test's broker failed:\n{stopped.stderr}", file=sys.stderr)


# --------------------------------------------------------------------------- the namespace


def ip(*args: str) -> str:
    """Run ``ip ARGS``; a refusal fails the test with the command and its exact error."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30,
                          check=False)
    if done.returncode != 0:
        pytest.fail(f"`ip {' '.join(args)}` was refused (exit {done.returncode}): "
                    f"{done.stderr.strip() or done.stdout.strip()}", pytrace=False)
    return done.stdout


@dataclass(frozen=True)
class Namespace:
    """A network namespace joined to the root namespace by a veth pair (a /30)."""

    name: str
    host_veth: str  # in the root namespace, holding `host_ip`
    peer_veth: str  # in the namespace, holding `peer_ip`
    host_ip: str
    peer_ip: str

    @property
    def prefix(self) -> list[str]:
        """Run a command inside the namespace (``ip netns exec`` execs it: same PID)."""
        return ["ip", "netns", "exec", self.name]

    def cut(self) -> None:
        """Drop every packet between the namespace and the root namespace.

        The namespace's side loses its carrier and drops what it sends; the
        root namespace keeps its address (local) but loses the route to the
        peer, so what the broker sends there leaves by the default route and
        is lost. Nothing answers either side: no RST, a true partition.
        """
        ip("link", "set", self.host_veth, "down")

    def restore(self) -> None:
        ip("link", "set", self.host_veth, "up")


def unused_subnet() -> ipaddress.IPv4Network:
    """A /30 of 10.213.0.0/16 that no address of the root namespace is in."""
    taken = [ipaddress.ip_interface(entry["local"] + "/" + str(entry["prefixlen"])).network
             for link in json.loads(ip("-j", "-4", "addr", "show"))
             for entry in link.get("addr_info", [])]
    seed = uuid.uuid4().int
    subnets = list(NETWORK.subnets(new_prefix=30))
    for step in range(len(subnets)):
        subnet = subnets[(seed + step) % len(subnets)]
        if not any(subnet.overlaps(other) for other in taken):
            return subnet
    raise AssertionError(f"every /30 of {NETWORK} is in use")


@pytest.fixture
def namespace() -> Iterator[Namespace]:
    """A fresh namespace and veth pair, deleted at the end (also on failure)."""
    suffix = uuid.uuid4().hex[:8]
    subnet = unused_subnet()
    host_ip, peer_ip = (str(address) for address in subnet.hosts())
    made = Namespace(f"krabka-{suffix}", f"kh-{suffix}", f"kn-{suffix}", host_ip, peer_ip)
    created = False
    try:
        ip("netns", "add", made.name)
        created = True
        ip("link", "add", made.host_veth, "type", "veth", "peer", "name", made.peer_veth)
        ip("link", "set", made.peer_veth, "netns", made.name)
        ip("addr", "add", f"{host_ip}/30", "dev", made.host_veth)
        ip("link", "set", made.host_veth, "up")
        inside = ["netns", "exec", made.name, "ip"]
        ip(*inside, "addr", "add", f"{peer_ip}/30", "dev", made.peer_veth)
        ip(*inside, "link", "set", made.peer_veth, "up")
        ip(*inside, "link", "set", "lo", "up")
        yield made
    finally:
        # Deleting the namespace destroys the peer, and with it the host side;
        # a set-up that failed before the move leaves the pair in the root namespace.
        if created:
            deleted = subprocess.run(["ip", "netns", "del", made.name], capture_output=True,
                                     text=True, check=False, timeout=30)
            if deleted.returncode != 0:
                print(f"ip netns del {made.name} failed: {deleted.stderr}", file=sys.stderr)
        subprocess.run(["ip", "link", "del", made.host_veth], check=False, timeout=30,
                       capture_output=True)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory) -> Iterator[Broker]:
    with own_broker(tmp_path_factory.mktemp("kafka")) as started:
        yield started


@pytest.fixture
def broker(module_broker) -> Broker:
    """The module's broker, running and answering. Each test that stops it
    starts it again (or SIGCONTs it) before it ends; one that failed before
    that leaves it down, or frozen, and the next test brings it back."""
    module_broker.kill("CONT")
    module_broker.start()
    return module_broker


@pytest.fixture
def namespace_broker(namespace, tmp_path) -> Iterator[Broker]:
    """A broker on the host side of the veth: reachable from both namespaces."""
    with own_broker(tmp_path / "kafka", host=namespace.host_ip) as started:
        yield started


async def _fault_run(broker: Broker, folder: Path) -> AsyncIterator[FaultRun]:
    state, output = await create_state_and_output_topics(broker.bootstrap, 4)
    fault_run = FaultRun(broker.bootstrap, state, output, folder, timing=TIMING)
    try:
        yield fault_run
    finally:
        fault_run.stop_all()


@pytest.fixture
async def run(broker, tmp_path) -> AsyncIterator[FaultRun]:
    async for fault_run in _fault_run(broker, tmp_path):
        yield fault_run


@pytest.fixture
async def namespace_run(namespace_broker, tmp_path) -> AsyncIterator[FaultRun]:
    async for fault_run in _fault_run(namespace_broker, tmp_path):
        yield fault_run


# --------------------------------------------------------------------------- helpers


async def wait_roster(run: FaultRun, members: list[str]) -> None:
    await eventually(run.role_state, lambda state: state.roster == members, within=TIMEOUT)


async def committed(run: FaultRun, member: str, tenure: int | None = None) -> int:
    """How many writes `member` committed (in `tenure`, if given)."""
    return sum(1 for a in run.attempts()
               if a.outcome == "committed" and a.record.member == member
               and (tenure is None or a.record.tenure == tenure))


async def leases_of(run: FaultRun, leading: dict) -> list[Lease]:
    """The committed lease records of one tenure (the ``leading`` event's token)."""
    async with KafkaTransport(run.bootstrap, topic=run.state) as transport:
        read = await transport.read_partition(role_partition(run.role, run.partitions))
    key = encode_key(lease_key(run.role))
    leases = [decode_lease(r.value) for r in read.records if r.key == key and r.value]
    return [lease for lease in leases
            if lease.member == leading["member"]
            and (lease.producer_id, lease.producer_epoch)
            == (leading["producer_id"], leading["producer_epoch"])]


def assert_fenced_at_the_fence_deadline(fenced: dict, leases: list[Lease]) -> int:
    """The leader stopped by its fence deadline, before its last committed lease ran out.

    At the deadline when its renewals just failed; earlier if its producer
    failed fatally as the broker went away (EpochLostError ends the tenure at
    once). The leader knows a renewal once its commit returns, so the last
    lease the broker committed may be one the leader never heard of (the
    answer was lost): its own fence deadline is then a renewal earlier.
    Returns the committed lease deadline.
    """
    deadline = max(lease.deadline for lease in leases)
    fence_deadline = deadline - MARGIN_MS
    assert fenced["t_ms"] < fence_deadline + SCHEDULING_MS, (fenced, deadline)
    if "could not be renewed before the fence deadline" in fenced["error"]:
        assert fence_deadline - RENEW_MS <= fenced["t_ms"], (fenced, deadline)
    else:
        assert "producer" in fenced["error"], fenced
    return deadline


def assert_clean(report: FaultReport) -> None:
    assert report.violations == []
    assert report.lost == 0


def leading_events(*members) -> list[dict]:
    return [e for m in members for e in m.events if e["event"] == "leading"]


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("stop_signal", BROKER_STOP_SIGNALS)
async def test_restart_of_the_single_broker_while_a_role_is_held_fences_then_elects_again(
    broker, run, stop_signal
):
    """The broker stops (SIGKILL: a crash) while a leads and b stands by, stays
    down past a's lease and comes back: a stops at its fence deadline, and once
    the broker answers again some member leads under a later tenure.

    ``FAULT_BROKER_STOP=TERM`` stops it with a controlled shutdown instead,
    which on a single broker can lose a committed write: Kafka's coordinator
    skips the commit marker of a partition that has no leader at that moment
    (as if it were deleted). See docs/reliability.md, "Kafka findings"."""
    a = run.start("a")
    first = a.wait_for("leading", TIMEOUT)
    b = run.start("b")
    await wait_roster(run, ["a", "b"])
    await eventually(lambda: committed(run, "a"), lambda n: n >= 10, within=TIMEOUT)

    stopped_at = now_ms()
    broker.kill(stop_signal)
    gone_at = now_ms()
    fenced = a.wait_for("fenced", TIMEOUT)
    # Kept down past the lease: start-up itself takes longer than the margin.
    restart_at = now_ms()
    broker.start()
    ready_at = now_ms()
    assert ready_at > fenced["t_ms"] + MARGIN_MS, "the broker came back before a's lease ran out"

    async def commits_per_later_tenure() -> Counter[int]:
        return Counter(a_.record.tenure for a_ in run.attempts()
                       if a_.outcome == "committed" and a_.record.tenure > first["tenure"])

    # Some member leads again and commits: the role is led under a later tenure.
    later = await eventually(commits_per_later_tenure,
                             lambda counts: max(counts.values(), default=0) >= 10,
                             within=TIMEOUT)
    run.stop_all()

    report = await run.report(f"broker-restart-{stop_signal.lower()}", fault_at_ms=stopped_at,
                              bootstrap=broker.bootstrap)
    assert_clean(report)
    deadline = assert_fenced_at_the_fence_deadline(fenced, await leases_of(run, first))
    [(tenure, _)] = later.most_common(1)
    successor = next(e for e in leading_events(a, b) if e["tenure"] == tenure)
    after = sorted((e for e in leading_events(a, b) if e["t_ms"] > stopped_at),
                   key=lambda e: e["t_ms"])
    # Nobody led while the broker was away: every tenure after the stop began after
    # the restart began. Not after `ready_at`: the broker takes leases as soon as it
    # listens, and `broker.start()` returns only once its own Metadata probe has an
    # answer, so a member can lead a moment before it returns. Who leads after it is
    # not determined (docs/design.md#the-slot): both slots passed while the broker
    # was down (b's at a's deadline, a's a stagger later), whoever reads the
    # restarted broker first challenges first, and a challenger that read the log
    # before the other's first lease became visible fences it (then more than one
    # tenure follows).
    assert all(e["t_ms"] > restart_at for e in after), (restart_at, ready_at, after)
    assert successor in after
    assert report.tenures >= 2
    print(f"\nbroker-restart: stopped in {gone_at - stopped_at} ms; a fenced "
          f"{fenced['t_ms'] - (deadline - MARGIN_MS)} ms after its fence deadline; restart "
          f"from a's fence took {ready_at - restart_at} ms; {after[0]['member']} led "
          f"{after[0]['t_ms'] - restart_at} ms after the restart began; no leader for "
          f"{after[0]['t_ms'] - fenced['t_ms']} ms; longest gap between commits "
          f"{report.longest_gap_ms} ms; tenures after the restart: "
          f"{[(e['member'], e['tenure']) for e in after]}")


async def test_a_leader_cut_off_by_the_network_is_fenced_and_rejoins_as_a_candidate(
    namespace, namespace_run
):
    """a leads from inside the namespace (every member and the test reach the
    broker at the veth's host-side address); the link goes down: b takes over
    after a's lease, a stops at its fence deadline, and once the link is back a
    only registers again and waits while b leads."""
    run = namespace_run
    a = run.start("a", prefix=namespace.prefix, bootstrap=run.bootstrap)
    first = a.wait_for("leading", TIMEOUT)
    b = run.start("b")
    await wait_roster(run, ["a", "b"])
    c = run.start("c")
    await wait_roster(run, ["a", "b", "c"])
    await eventually(lambda: committed(run, "a"), lambda n: n >= 10, within=TIMEOUT)

    cut_at = now_ms()
    namespace.cut()
    successor = b.wait_for("leading", TIMEOUT)
    fenced = a.wait_for("fenced", TIMEOUT)
    await eventually(lambda: committed(run, "b"), lambda n: n >= 5, within=TIMEOUT)
    restored_at = now_ms()
    namespace.restore()
    # a joins again at the tail (b deregistered it when it took over).
    await wait_roster(run, ["b", "c", "a"])
    rejoined = await committed(run, "b")
    await eventually(lambda: committed(run, "b"), lambda n: n >= rejoined + 10, within=TIMEOUT)
    run.stop_all()

    report = await run.report("netns-cut-off", fault_at_ms=cut_at, bootstrap=run.bootstrap)
    assert_clean(report)
    assert report.tenures == 2
    deadline = assert_fenced_at_the_fence_deadline(fenced, await leases_of(run, first))
    # a stopped before b started; b waited for a's lease to run out.
    assert fenced["t_ms"] < successor["t_ms"]
    assert successor["t_ms"] >= deadline
    assert successor["tenure"] > first["tenure"]
    # a never led again while b led and renewed; c never led.
    assert leading_events(a) == [first]
    assert not c.has("leading")
    print(f"\nnetns-cut-off: a fenced {fenced['t_ms'] - (deadline - MARGIN_MS)} ms after its "
          f"fence deadline; b led {successor['t_ms'] - deadline} ms after a's lease ran out "
          f"({successor['t_ms'] - cut_at} ms after the cut); cut for "
          f"{restored_at - cut_at} ms")


STEP_BACK_MS = 10_000
# How late after its fence deadline the leader may print `fenced` here. Under
# 1 s on purpose: a call hung since the broker stopped outlives the transaction
# timeout (the lease) and ends the tenure through the lost producer at least
# 1 s after the fence deadline, so only the deadline itself meets this bound.
STEPPED_SLACK_MS = 500
# How the fence deadline ends a tenure (krabka/tenure.py).
OWN_DEADLINE = "could not be renewed before the fence deadline"


async def test_a_leader_whose_wall_clock_steps_back_10_s_stops_by_its_monotonic_fence_deadline(
    broker, run
):
    """a leads alone; the broker stops answering (SIGSTOP), so a's renewals
    hang, and then a's wall clock is stepped back 10 s (as NTP may), its
    monotonic clock left alone. a stops its function at its fence deadline,
    measured on the monotonic clock from its last renewal's send: 2 s (lease
    3 s less the margin) after that send, not 10 s later as a deadline on the
    wall clock would be. Once the broker answers again, a leads again."""
    a = run.start("a")
    first = a.wait_for("leading", TIMEOUT)
    await eventually(lambda: committed(run, "a"), lambda n: n >= 10, within=TIMEOUT)
    a.wait_for("renewed", TIMEOUT, tenure=first["tenure"])

    cut_at = now_ms()
    broker.kill("STOP")
    try:
        stepped_at = now_ms()
        run.set_clock(a, -STEP_BACK_MS)
        fenced = a.wait_for("fenced", TIMEOUT)
    finally:
        broker.kill("CONT")
    continued_at = now_ms()
    again = a.wait_for("leading", TIMEOUT, since=a.events.index(fenced) + 1)
    await eventually(lambda: committed(run, "a", again["tenure"]), lambda n: n >= 5,
                     within=TIMEOUT)
    run.stop_all()

    report = await run.report("wall-step-back-renewals-cut", fault_at_ms=cut_at,
                              bootstrap=broker.bootstrap)
    assert_clean(report)
    assert report.tenures >= 2
    assert OWN_DEADLINE in fenced["error"], fenced
    renewals = [e for e in a.events[:a.events.index(fenced)]
                if e["event"] == "renewed" and e["tenure"] == first["tenure"]]
    last = renewals[-1]
    # The step came after the last renewal a heard of was sent: a deadline on
    # the wall clock would have moved 10 s later.
    assert last["sent_ms"] < stepped_at, (last, stepped_at)
    fence_deadline = last["sent_ms"] + int(TIMING.lease * 1000) - MARGIN_MS
    late = fenced["t_ms"] - fence_deadline
    assert -100 <= late <= STEPPED_SLACK_MS, (late, last, fenced)
    # The function stopped then: no write of that tenure started after it.
    assert not [x for x in run.attempts()
                if x.record.tenure == first["tenure"] and x.started_ms > fenced["t_ms"]]
    assert again["tenure"] > first["tenure"]
    print(f"\nwall-step-back: last renewal sent {cut_at - last['sent_ms']} ms before the cut; "
          f"wall clock stepped back {STEP_BACK_MS} ms {stepped_at - cut_at} ms after the cut; "
          f"a fenced {late} ms after its fence deadline ({fenced['t_ms'] - cut_at} ms after "
          f"the cut); broker stopped for {continued_at - cut_at} ms; a led again "
          f"{again['t_ms'] - continued_at} ms after it answered")


async def test_bug_a_leader_that_takes_back_its_own_lapsed_lease_deregisters_itself(broker, run):
    """Found by the broker-restart scenario, whenever a takes the role back.

    A new leader deregisters the members it passed over and "the holder whose
    lease lapsed unrenewed" (`_Candidate._deregister_passed_over`). When that
    holder is the new leader's own member id (its previous tenure here; equally
    a restarted process), it deregisters its own fresh registration: it leads
    for its whole tenure without being in the roster. a is the only member, so
    it takes its role back after the broker restart every time.
    """
    a = run.start("a")
    first = a.wait_for("leading", TIMEOUT)
    await wait_roster(run, ["a"])
    broker.kill("KILL")
    fenced = a.wait_for("fenced", TIMEOUT)
    broker.start()
    again = a.wait_for("leading", TIMEOUT, since=a.events.index(fenced) + 1)
    await eventually(lambda: committed(run, "a", again["tenure"]), lambda n: n >= 3,
                     within=TIMEOUT)
    # The new leader deregistered what it passed over before it printed `leading`.
    state = await run.role_state()
    run.stop_all()

    report = await run.report("broker-restart-alone", bootstrap=broker.bootstrap)
    assert_clean(report)
    assert again["tenure"] > first["tenure"]
    assert state.holder == "a"
    assert state.roster == ["a"], "the leader deregistered itself"


async def test_after_a_call_outlives_the_transaction_timeout_the_epoch_is_lost_at_once(broker):
    """The broker stops answering (SIGSTOP): a lease write times out after the
    transaction timeout and closes the role's producer; every later call says
    the epoch can no longer write here (EpochLostError, docs/design.md#the-kafka-adapter), at
    once, so a Leadership ends its tenure instead of retrying."""
    state, _ = await create_state_and_output_topics(broker.bootstrap, 4)
    role = f"fault.role-{uuid.uuid4().hex[:8]}"
    key, value = encode_key(lease_key(role)), encode_lease(Lease("a", 0, 0, 0, 1))
    async with KafkaTransport(broker.bootstrap, topic=state) as transport:
        token = await transport.acquire_epoch(role, 3.0)
        await write_lease(transport, role, token, role_partition(role, 4), key, value)
        broker.kill("STOP")
        try:
            with pytest.raises(KafkaUnavailableError, match="transaction timeout"):
                await write_lease(transport, role, token, role_partition(role, 4), key, value)
            started = time.monotonic()
            with pytest.raises(ProducerFatalError) as lost:
                await write_lease(transport, role, token, role_partition(role, 4), key, value)
            assert isinstance(lost.value, EpochLostError)
            assert time.monotonic() - started < 1
        finally:
            broker.kill("CONT")


async def test_a_runner_campaigns_through_a_minute_without_the_broker_and_leads_when_it_returns(
        broker):
    """The broker crashes (SIGKILL) under a leading runner and stays down for a
    minute: the tenure ends at its fence deadline, the runner keeps campaigning
    and backing off the whole time (its task never ends), and leads again once
    the broker is back. The same over ten hours runs on the in-process model
    (tests/unit/test_runner_ownership.py)."""
    state, _ = await create_state_and_output_topics(broker.bootstrap, 4)
    role = f"fault.role-{uuid.uuid4().hex[:8]}"
    failures: list[BaseException] = []
    running = asyncio.Event()
    stopped = asyncio.Event()

    class Failures(RunnerObserver):
        def campaign_failed(self, role: str, error: BaseException) -> None:
            failures.append(error)

    async def work(_leadership: Leadership) -> None:
        stopped.clear()
        running.set()
        try:
            await asyncio.Event().wait()
        finally:
            running.clear()
            stopped.set()

    options = LeadershipOptions(partitions=4, lease_duration=TIMING.lease,
                                renew_interval=TIMING.renew, challenge_stagger=TIMING.stagger)
    async with KafkaTransport(broker.bootstrap, topic=state) as transport:
        runner = LeaderRunner(transport, role, "a", work, options=options, observer=Failures(),
                              retry_interval=0.5, max_backoff=5.0)
        task = runner.start()
        try:
            await asyncio.wait_for(running.wait(), TIMEOUT)
            broker.kill("KILL")
            down_at = time.monotonic()
            await asyncio.wait_for(stopped.wait(), TIMING.lease + SCHEDULING_MS / 1000)
            # The outage itself: the broker stays down for a minute.
            await asyncio.sleep(OUTAGE - (time.monotonic() - down_at))
            assert not task.done()
            assert runner.state in (RunnerState.CAMPAIGNING, RunnerState.BACKING_OFF)
            assert len(failures) >= 3, failures
            broker.start()
            await asyncio.wait_for(running.wait(), TIMEOUT)
            assert runner.leading
        finally:
            broker.start()
            await runner.stop()
    print(f"\nbroker outage of {OUTAGE:.0f} s: {len(failures)} campaigns failed; the runner "
          f"led again {time.monotonic() - down_at - OUTAGE:.1f} s after the broker's restart "
          "began")


# --------------------------------------------------------------------------- term mode

TERM_TIMING = {"lease_duration": 60.0, "renew_interval": 1.0, "challenge_stagger": 0.5}
"""An election timeout longer than a restart of the broker, so the tenure
outlives it and what ends it afterwards is what its terms tail reads."""


@contextlib.asynccontextmanager
async def term_members(broker: Broker) -> AsyncIterator[Any]:
    """Fresh topics and a role; `open()` gives a member its own transport. All closed at the end."""
    state, output = await create_state_and_output_topics(broker.bootstrap, 4)
    opened: list[KafkaTransport] = []

    class Members:
        role = f"fault.role-{uuid.uuid4().hex[:8]}"
        partition = role_partition(role, 4)
        output_topic = output

        async def open(self) -> KafkaTransport:
            # A read spans the broker's restart: bounded by the test's patience,
            # not by the default 15 s, which two busy cores can exceed.
            transport = KafkaTransport(broker.bootstrap, topic=state,
                                       terms_topic=terms_topic_of(state),
                                       operation_timeout=TIMEOUT)
            await transport.__aenter__()
            opened.append(transport)
            return transport

        async def stand(self, member: str) -> TermLeadership:
            leadership = await acquire_leadership(
                await self.open(), self.role, member, partitions=4, fencing="term",
                outputs=[output], **TERM_TIMING)
            assert isinstance(leadership, TermLeadership)
            return leadership

    try:
        yield Members()
    finally:
        for transport in opened:
            await transport.close()


async def fence_moves_past(leader: TermLeadership, deadline: int) -> None:
    """Wait until a heartbeat sent after `deadline` was set was read back."""
    async def current() -> int:
        return leader.fence_deadline_monotonic

    await eventually(current, lambda now: now > deadline, within=TIMEOUT)


@pytest.mark.parametrize("stop_signal", BROKER_STOP_SIGNALS)
async def test_a_term_leaders_tail_reads_again_after_a_broker_restart_and_sees_a_higher_claim(
    broker, stop_signal
):
    """Across the restart the leader's heartbeats are read back again (its
    fence deadline moves on), and a claim of a higher term made afterwards
    ends its tenure when it reads it, long before its fence deadline."""
    async with term_members(broker) as members:
        leader = await members.stand("a")
        await fence_moves_past(leader, leader.fence_deadline_monotonic)
        broker.kill(stop_signal)
        broker.start()
        restarted = leader.fence_deadline_monotonic
        await fence_moves_past(leader, restarted)
        assert not leader.fenced()
        claimant = await members.open()
        claimed_at = time.monotonic()
        await claimant.append_term(members.partition,
                                   encode_term_key(claim_key(members.role, "z", 2)),
                                   encode_claim(Claim("z", 2, now_ms())))
        await asyncio.wait_for(leader.done, TIMEOUT)
        assert isinstance(leader.err, FencedError)
        assert "z claimed term 2" in str(leader.err)
        assert time.monotonic() - claimed_at < TERM_TIMING["lease_duration"] / 2


async def test_a_term_leaders_tail_that_fails_reads_again_and_sees_a_higher_claim(
    broker, monkeypatch
):
    """The leader's terms tail fails (a fetch error no retry outlasts: every
    tail of the transport fails once). The tenure opens its tail again: its
    heartbeats are read back once more (its fence deadline moves on), and a
    claim of a higher term made afterwards ends the tenure when it reads it,
    long before its fence deadline."""
    async with term_members(broker) as members:
        transport = await members.open()
        leadership = await acquire_leadership(
            transport, members.role, "a", partitions=4, fencing="term",
            outputs=[members.output_topic], **TERM_TIMING)
        assert isinstance(leadership, TermLeadership)
        leader = leadership
        await fence_moves_past(leader, leader.fence_deadline_monotonic)
        raised = failing_fetches(
            transport, aiokafka.errors.TopicAuthorizationFailedError(), monkeypatch)

        async def failed() -> list[BaseException]:
            return raised

        await eventually(failed, bool, within=TIMEOUT)
        await fence_moves_past(leader, leader.fence_deadline_monotonic)
        assert not leader.fenced()
        claimant = await members.open()
        claimed_at = time.monotonic()
        await claimant.append_term(members.partition,
                                   encode_term_key(claim_key(members.role, "z", 2)),
                                   encode_claim(Claim("z", 2, now_ms())))
        await asyncio.wait_for(leader.done, TIMEOUT)
        assert isinstance(leader.err, FencedError)
        assert "z claimed term 2" in str(leader.err)
        assert time.monotonic() - claimed_at < TERM_TIMING["lease_duration"] / 2


@pytest.mark.parametrize("stop_signal", BROKER_STOP_SIGNALS)
async def test_term_candidates_waiting_across_a_broker_restart_elect_the_next_in_rank(
    broker, stop_signal
):
    """b and c wait behind a across the restart; when a resigns afterwards, b,
    first in rank, claims term 2 at once, and c goes on waiting."""
    async with term_members(broker) as members:
        leader = await members.stand("a")
        observer = await members.open()

        async def roster() -> list[str]:
            return (await describe_role_state(observer, members.role, partitions=4)).roster

        b = asyncio.create_task(members.stand("b"))
        await eventually(roster, lambda r: r == ["a", "b"], within=TIMEOUT)
        c = asyncio.create_task(members.stand("c"))
        await eventually(roster, lambda r: r == ["a", "b", "c"], within=TIMEOUT)
        try:
            broker.kill(stop_signal)
            broker.start()
            await fence_moves_past(leader, leader.fence_deadline_monotonic)
            assert not b.done()
            assert not c.done()
            resigned_at = time.monotonic()
            await leader.resign()
            successor = await asyncio.wait_for(b, TIMEOUT)
            assert successor.token.term == 2
            assert time.monotonic() - resigned_at < TERM_TIMING["lease_duration"] / 2
            assert not c.done()
            await successor.resign()
        finally:
            for task in (b, c):
                task.cancel()
            await asyncio.gather(b, c, return_exceptions=True)


BROKER_DOWN = 5.0
"""Seconds the broker stays down in each crash of the term-mode runners' test."""
BACK_WITHIN = 30.0
"""Seconds after the broker's return within which exactly one function runs again."""


async def test_term_runners_through_three_broker_crashes_run_one_function_at_a_time(broker):
    """Three term-mode runners (lease 3 s, the election timeout), each on its
    own transport, whose functions log when they run on the monotonic clock.
    The broker is SIGKILLed three times, down 5 s each, and started again on
    the same data: the leader, unable to read its heartbeats back, stops by
    its fence deadline; within 30 s of each return exactly one function runs
    (and goes on running a whole lease); over the whole run no two functions
    overlap by more than the election timeout."""
    lease = TIMING.lease
    intervals: list[list[Any]] = []  # [member, started, ended or None]
    async with term_members(broker) as members:
        options = LeadershipOptions(partitions=4, lease_duration=lease,
                                    renew_interval=TIMING.renew,
                                    challenge_stagger=TIMING.stagger, fencing="term",
                                    outputs=(members.output_topic,))

        def work_of(member: str) -> Any:
            async def work(_leadership: Leadership) -> None:
                interval = [member, time.monotonic(), None]
                intervals.append(interval)
                try:
                    await asyncio.Event().wait()
                finally:
                    interval[2] = time.monotonic()
            return work

        runners = [LeaderRunner(await members.open(), members.role, member, work_of(member),
                                options=options, retry_interval=0.5, max_backoff=lease)
                   for member in ("a", "b", "c")]
        tasks = [runner.start() for runner in runners]

        async def one_settled(within: float) -> float:
            """Wait until exactly one function has run alone for a whole lease;
            how long that took to begin."""
            began = time.monotonic()
            alone: tuple[Any, float] | None = None
            while True:
                now = time.monotonic()
                running = [i for i in intervals if i[2] is None]
                if len(running) == 1:
                    if alone is None or alone[0] is not running[0]:
                        alone = (running[0], now)
                    elif now - alone[1] >= lease:
                        return alone[1] - began
                else:
                    alone = None
                assert now - began < within, (
                    f"no single function for a lease within {within} s: {intervals}")
                await asyncio.sleep(0.1)

        try:
            await one_settled(TIMEOUT)
            back = []
            for _ in range(3):
                broker.kill("KILL")
                await asyncio.sleep(BROKER_DOWN)  # the outage itself
                broker.start()
                back.append(await one_settled(BACK_WITHIN))
        finally:
            broker.start()
            for runner in runners:
                await runner.stop()
            await asyncio.gather(*tasks, return_exceptions=True)
    end = time.monotonic()
    overlaps = [min(x[2] or end, y[2] or end) - max(x[1], y[1])
                for i, x in enumerate(intervals) for y in intervals[i + 1:] if x[0] != y[0]]
    worst = max(overlaps, default=0.0)
    assert worst <= lease, (worst, intervals)
    print(f"\nthree broker crashes ({BROKER_DOWN:.0f} s down): one function again "
          f"{', '.join(f'{s:.1f}' for s in back)} s after each return; "
          f"{len(intervals)} function runs; the largest overlap of two: {max(worst, 0.0):.2f} s")
