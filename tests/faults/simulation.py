"""Deterministic simulation of many members and roles under faults.

One seed fixes everything: the cluster's shape (members, roles, partitions,
lease, stagger, clock skews, message delays, producer-id blocks) and the
fault schedule (crash, restart, pause beyond the lease with the clock running
or frozen, resignation, compaction of the state topic). Time is a
`ManualClock` moved from one wake-up to the next; between moves every task
runs until it blocks (`quiesce`), so a run is a pure function of its seed.

Every member process runs, for each role it is a candidate for, the
library's `LeaderRunner` with a function that makes guarded writes of
history records while it leads (`tests.faults.history.HistoryWriter`, which logs
each attempt's outcome); a "resign" fault makes the runner step down.
After every step the simulation asserts,
for each role:

- at most one live (not done) `Leadership` holds the coordinator's current
  token;
- the `Leadership` holding the current token has the greatest tenure of all
  the role's tenures (a newer tenure under an older token would mean the
  broker let a superseded producer write its first lease).

At the end it checks each role's output partition with the history checker,
and checks the role's lease records in the state topic the same way (the
lease history must not go back to an earlier tenure either). Unexpected
errors fail a run too: a campaign or a resignation failing, a task that
does not stop when its process crashes, and any error the event loop reports
(a task whose exception nobody retrieved: work a cancelled caller left
running).

Liveness is measured, not asserted, with one exception: a livelock, a role
with no leader for `LIVELOCK_LEASES` lease durations while one of its
candidates ran, neither crashed nor paused, the whole time, fails the run.
Backoff after lost challenges is at most 8 leases, and a member's clock
stepped back by a frozen pause is at most 3 leases behind, so a healthy
protocol always elects within that window.

**Term mode** (``fencing="term"``, `run_seed(seed, fencing="term")`,
``--fencing term``) runs the same seeds, members and faults with term
fencing (docs/term-mode.md): every member declares the output topic
(``outputs=``) and its writes go through `Leadership.transaction()`,
stamped with its term after a barrier on every output partition. Nothing
at the broker refuses a deposed leader, so the checks are the readers':

- per step, for each role: at most one live `Leadership` holds the highest
  term of the role's terms partition, and it is that term's winning claim
  (member and tenure); the highest term and its winner never change
  backwards, compaction of the terms topic included; a live leadership of a
  superseded term (a zombie) whose process runs must notice within
  `ZOMBIE_LEASES` leases of running time (its tenure ends): at worst the
  tail read in flight and the next one, each delayed up to a lease;
- after the run, faults stop, every paused process resumes and the cluster
  runs `SETTLE_LEASES` more leases, so each zombie gets the chance to wake;
  then `check_term_history` replays each role's output partition through a
  `TermFilter`: no record of a superseded term passes after a newer term's
  barrier or record, one holder per term, terms never go back, and every
  zombie's tenure ended.

``run_seed(seed)`` runs one seed in a fresh event loop and returns a
`SimReport`; its ``describe()`` starts with the command that replays it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import heapq
import itertools
import logging
import random
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from coordination import (
    TERMS_TOPIC,
    EpochLostError,
    FencedError,
    FencingToken,
    Kind,
    LeaderRunner,
    Leadership,
    LeadershipOptions,
    ManualClock,
    MemoryBroker,
    MemoryTransport,
    Record,
    RunnerObserver,
    TenureStop,
    TermKind,
    TermLeadership,
    decode_key,
    decode_lease,
    decode_term_key,
    role_partition,
)
from coordination.memory import MAX_EPOCH
from coordination.options import Fencing
from coordination.term_fold import TermFold, TermView, build_term_view
from tests.faults.history import (
    HistoryReport,
    HistoryWriter,
    OutputRecord,
    TenureEnd,
    TermTenure,
    check_history,
    check_term_history,
)
from tests.support.sim import STATE, FaultyTransport, MemberClock, ProcessCrashed, quiesce

OUTPUT = "history"
ROLE_NAMES = ("billing", "reports", "ledger")
LIVELOCK_LEASES = 20
ZOMBIE_LEASES = 3
SETTLE_LEASES = 3
REPLAY = "python -m tests.faults.simulation --seed {seed} --leases {leases}"


@dataclass(frozen=True)
class SimConfig:
    """Everything a seed decides before the first step."""

    seed: int
    members: tuple[str, ...]
    roles: tuple[str, ...]
    candidates: dict[str, tuple[str, ...]]
    partitions: int
    lease: float
    renew: float
    stagger: dict[str, float]
    skew_ms: dict[str, int]
    delay_probability: float
    delay_max_ms: int
    fault_gap: float | None
    producer_ids: str
    near_exhaustion: dict[str, int]
    write_interval_ms: int
    cleaner_gap: float | None
    duration: float
    fencing: Fencing = "epoch"

    @classmethod
    def from_seed(cls, seed: int, *, duration_leases: int = 24,
                  fencing: Fencing = "epoch") -> SimConfig:
        """Draw a cluster from `seed`; term mode draws the same, without epoch exhaustion."""
        rng = random.Random(seed)
        members = tuple(f"m{i}" for i in range(1, rng.randint(3, 6) + 1))
        roles = ROLE_NAMES[: rng.randint(1, 3)]
        candidates = {}
        for role in roles:
            chosen = rng.sample(members, rng.randint(2, len(members)))
            candidates[role] = tuple(m for m in members if m in chosen)
        lease = rng.choice((3.0, 6.0))
        skew_max = rng.choice((0, 0, 2000, 5000))
        config = cls(
            seed=seed,
            members=members,
            roles=roles,
            candidates=candidates,
            partitions=rng.choice((1, 2, 4)),
            lease=lease,
            renew=lease / 3,
            stagger={role: rng.choice((0.0, 0.0, 0.5, 1.0)) for role in roles},
            skew_ms={m: rng.randint(-skew_max, skew_max) for m in members},
            delay_probability=rng.choice((0.0, 0.05, 0.2)),
            delay_max_ms=rng.choice((50, 500, round(lease * 1000))),
            fault_gap=round(lease * rng.uniform(1.0, 4.0), 1),
            producer_ids=rng.choice(("ascending", "descending", "shuffled")),
            near_exhaustion=(
                {role: rng.randint(0, 12) for role in roles} if rng.random() < 0.5 else {}
            ),
            write_interval_ms=rng.choice((200, 500, 1000)),
            cleaner_gap=lease * rng.choice((0.5, 1.0, 3.0)),
            duration=lease * duration_leases,
        )
        if fencing == "term":  # no producer epochs to exhaust
            config = dataclasses.replace(config, near_exhaustion={}, fencing="term")
        return config

    @classmethod
    def quiet(cls, members: tuple[str, ...] = ("m1", "m2"), roles: tuple[str, ...] = ("billing",),
              **changes: object) -> SimConfig:
        """A cluster without random faults, delays or skew, for scripted scenarios.

        Every member is a candidate for every role; `changes` override fields.
        """
        config = cls(
            seed=-1, members=members, roles=roles,
            candidates={role: members for role in roles}, partitions=4, lease=3.0, renew=1.0,
            stagger={role: 0.5 for role in roles}, skew_ms={m: 0 for m in members},
            delay_probability=0.0, delay_max_ms=0, fault_gap=None, producer_ids="ascending",
            near_exhaustion={}, write_interval_ms=200, cleaner_gap=None, duration=30.0,
        )
        return dataclasses.replace(config, **changes)  # type: ignore[arg-type]

    @property
    def lease_ms(self) -> int:
        return round(self.lease * 1000)

    def describe(self) -> str:
        """The configuration in one paragraph."""
        shared = len({role_partition(r, self.partitions) for r in self.roles}) < len(self.roles)
        return (
            f"members={list(self.members)} roles={self.candidates} "
            f"partitions={self.partitions}{' (roles share one)' if shared else ''} "
            f"lease={self.lease}s renew={self.renew}s stagger={self.stagger} "
            f"skew_ms={self.skew_ms} delay p={self.delay_probability} "
            f"max={self.delay_max_ms}ms fault_gap={_seconds(self.fault_gap)} "
            f"producer_ids={self.producer_ids} near_exhaustion={self.near_exhaustion} "
            f"write_interval={self.write_interval_ms}ms cleaner_gap={_seconds(self.cleaner_gap)} "
            f"duration={self.duration}s fencing={self.fencing}"
        )


def _seconds(value: float | None) -> str:
    return "none" if value is None else f"{value}s"


@dataclass
class SimReport:
    """What one run found: violations (must be none) and figures."""

    seed: int
    config: SimConfig
    steps: int = 0
    histories: dict[str, HistoryReport] = field(default_factory=dict)
    invariant_violations: list[str] = field(default_factory=list)
    lease_violations: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    livelocks: list[str] = field(default_factory=list)
    leaderless_ms: dict[str, int] = field(default_factory=dict)
    longest_leaderless_ms: dict[str, int] = field(default_factory=dict)
    tenures: int = 0
    epochs_minted: int = 0
    smaller_id_moves: int = 0
    simultaneous_challenges: int = 0
    fenced_by_broker: Counter[str] = field(default_factory=Counter)
    delayed_calls: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    write_errors: Counter[str] = field(default_factory=Counter)
    zombies: int = 0
    longest_zombie_ms: int = 0
    trace: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No safety violation, no unexpected error, no livelock."""
        return not (self.violations() or self.errors or self.livelocks)

    def violations(self) -> list[str]:
        """Every safety violation: per-step invariants, histories, lease records."""
        found = list(self.invariant_violations) + list(self.lease_violations)
        for role, history in self.histories.items():
            found += [f"{role}: {violation}" for violation in history.violations]
        return found

    def total(self, name: str) -> int:
        """A history count summed over the roles."""
        return sum(getattr(history, name) for history in self.histories.values())

    @property
    def replay_command(self) -> str:
        """The shell command that runs this seed again, printing its whole trace."""
        if self.seed < 0:
            return "a scripted scenario: run its test again"
        leases = round(self.config.duration / self.config.lease)
        command = REPLAY.format(seed=self.seed, leases=leases)
        return command + " --fencing term" if self.config.fencing == "term" else command

    def describe(self, trace_lines: int = 40) -> str:
        """The replay command, the configuration, the figures and what went wrong.

        A failed run ends with the last `trace_lines` lines of its trace.
        """
        duration_ms = round(self.config.duration * 1000)
        lines = [
            f"seed {self.seed}: {self.replay_command}" if self.seed < 0
            else f"seed {self.seed}: replay with `{self.replay_command}`",
            f"  config: {self.config.describe()}",
            f"  steps={self.steps} tenures={self.tenures} epochs_minted={self.epochs_minted} "
            f"smaller_id_moves={self.smaller_id_moves} "
            f"simultaneous_challenges={self.simultaneous_challenges} "
            f"delayed_calls={self.delayed_calls} faults={dict(self.faults)} "
            f"fenced_by_broker={dict(self.fenced_by_broker)} "
            f"write_errors={dict(self.write_errors)}"
            + (f" zombies={self.zombies} longest_zombie={self.longest_zombie_ms}ms"
               if self.config.fencing == "term" else ""),
        ]
        for role, history in self.histories.items():
            lines.append(
                f"  {role}: {history.summary()} leaderless="
                f"{self.leaderless_ms.get(role, 0) / duration_ms:.0%} longest="
                f"{self.longest_leaderless_ms.get(role, 0) / 1000:.1f}s")
        problems = self.violations() + self.errors + self.livelocks
        lines += [f"  ! {problem}" for problem in problems[:30]]
        if len(problems) > 30:
            lines.append(f"  ! ... and {len(problems) - 30} more")
        if problems and trace_lines:
            lines.append(f"  trace (last {trace_lines} lines):")
            lines += [f"    {line}" for line in self.trace[-trace_lines:]]
        return "\n".join(lines)


class _Process:
    """One incarnation of a member: its clock, its transport, its tasks."""

    def __init__(self, member: str, incarnation: int, clock: MemberClock,
                 transport: FaultyTransport) -> None:
        self.member = member
        self.incarnation = incarnation
        self.clock = clock
        self.transport = transport
        self.tasks: list[asyncio.Task[None]] = []
        self.leaderships: list[Leadership] = []
        self.writers: dict[str, HistoryWriter] = {}
        self.runners: dict[str, LeaderRunner] = {}
        self.dead = False
        self.running_since: int | None = None

    @property
    def running(self) -> bool:
        return not self.dead and not self.clock.paused

    def __str__(self) -> str:
        return f"{self.member}.{self.incarnation}"


class _SimObserver(RunnerObserver):
    """Records a process's tenures for the invariants, and its failures as errors."""

    def __init__(self, sim: Simulation, process: _Process) -> None:
        self.sim = sim
        self.process = process

    def elected(self, role: str, leadership: Leadership) -> None:
        self.process.leaderships.append(leadership)
        self.sim.leaderships[role].append((self.process, leadership))
        self.sim._trace(f"{self.process} leads {role} with {leadership.token}, "
                        f"tenure {leadership.tenure}")

    def lost(self, role: str, leadership: Leadership, stop: TenureStop) -> None:
        self.sim._trace(f"{self.process} stops leading {role} ({leadership.token}): "
                        f"{stop.reason}: {leadership.err}")
        # A fence or the deadline can end a tenure while it steps down; any
        # other error of a resignation is a bug.
        if stop.reason == "stepped-down" and not isinstance(
                leadership.err, (type(None), FencedError, EpochLostError, ProcessCrashed)):
            self.sim.report.errors.append(f"{self.process}: resign({role}) failed: "
                                          f"{leadership.err!r}")

    def campaign_failed(self, role: str, error: BaseException) -> None:
        if not isinstance(error, ProcessCrashed):
            self.sim.report.errors.append(
                f"{self.process}: campaigning for {role} raised {error!r}")


def _producer_ids(kind: str, rng: random.Random) -> Iterator[int]:
    if kind == "descending":
        return iter(range(90_000, 0, -1))
    if kind == "shuffled":
        return iter(rng.sample(range(1, 100_000), 2_000))
    return itertools.count(1000)


class Simulation:
    """One seeded run. `broker_factory` and `transport_factory` let a test plant a
    broken broker or client."""

    def __init__(
        self,
        config: SimConfig,
        *,
        broker_factory: Callable[..., MemoryBroker] = MemoryBroker,
        transport_factory: Callable[..., MemoryTransport] = MemoryTransport,
    ) -> None:
        self.config = config
        self.transport_factory = transport_factory
        self.rng = random.Random(f"{config.seed}:faults")
        self.clock = ManualClock()
        self.broker = broker_factory(
            clock=self.clock, producer_ids=_producer_ids(config.producer_ids, self.rng))
        self.broker.create_topic(STATE, config.partitions)
        self.broker.create_topic(OUTPUT, len(config.roles), compacted=False)
        self.term_mode = config.fencing == "term"
        if self.term_mode:
            self.broker.create_topic(TERMS_TOPIC, config.partitions)
        self.settling = False
        self.term_seen: dict[str, tuple[int, str | None, int | None]] = {
            role: (0, None, None) for role in config.roles}
        self.term_folds: dict[str, TermFold] = {}
        self.term_folded: dict[str, int] = {}
        # Every record of each role's terms partition, as written: the winners
        # settle their claims, so compaction removes them from the broker.
        self.term_records: dict[str, list[Record]] = {}
        self.zombie_ms: dict[Leadership, int] = {}
        """Running time of each live tenure of a superseded term, so far."""
        self.term_tenures: dict[str, list[TermTenure]] = {role: [] for role in config.roles}
        self.report = SimReport(config.seed, config)
        self.processes: dict[str, _Process] = {}
        self.incarnations: Counter[str] = Counter()
        self.every_process: list[_Process] = []
        self.leaderships: dict[str, list[tuple[_Process, Leadership]]] = {
            role: [] for role in config.roles}
        self.timeline: dict[str, list[tuple[int, FencingToken]]] = {
            role: [] for role in config.roles}
        self.leaderless_since: dict[str, int | None] = {}
        self.events: list[tuple[int, int, str, str, object]] = []
        self._order = itertools.count()
        self.start_ms = self.clock.now_ms()
        self.end_ms = self.start_ms + round(config.duration * 1000)
        self.last_observed = self.start_ms

    # Running.

    async def run(self) -> SimReport:
        """Run the schedule to its end, then check the histories.

        Errors the event loop reports (a task whose exception nobody
        retrieved: work a cancelled caller left running) are collected at the
        end, after a garbage collection, and fail the run.
        """
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(self._loop_error)
        with _quiet_library_logs():
            report = await self._run()
        for process in self.every_process:  # drop the finished tasks and what they hold
            process.tasks.clear()
            process.leaderships.clear()
        self.leaderships.clear()
        gc.collect()
        await quiesce()
        return report

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
        where = context.get("future")
        self.report.errors.append(
            f"event loop: {context.get('message')}: {context.get('exception')!r}"
            + (f" in {where.get_coro().__qualname__}" if isinstance(where, asyncio.Task) else ""))

    async def _run(self) -> SimReport:
        config = self.config
        for role, below in config.near_exhaustion.items():
            self.broker.init_producer_id(role, config.lease)
            entry = self.broker._ids[role]
            entry.token = FencingToken(entry.token.producer_id, MAX_EPOCH - below)
        for role in config.roles:
            self.leaderless_since[role] = self.start_ms
        for member in config.members:
            self._start(member)
        if config.fault_gap is not None:
            self._schedule(self._next_fault_at(), "fault")
        if config.cleaner_gap is not None:
            self._schedule(self._next_cleaning_at(), "clean")
        await self._run_until(self.end_ms)
        if self.term_mode:
            self._settle()
            await self._run_until(self.end_ms + SETTLE_LEASES * config.lease_ms)
            for _ in range(SETTLE_LEASES):  # a zombie made late gets its time to notice
                if not self._young_zombies():
                    break
                await self._run_until(self.clock.now_ms() + config.lease_ms)
            self._record_term_tenures()
        await self._shut_down()
        self._check_histories()
        return self.report

    async def _run_until(self, end_ms: int) -> None:
        """Fire the events due and move the clock, step by step, up to `end_ms`."""
        while True:
            await quiesce()
            self._observe()
            while self.events and self.events[0][0] <= self.clock.now_ms():
                _, _, kind, member, arg = heapq.heappop(self.events)
                self._fire(kind, member, arg)
                await quiesce()
                self._observe()
            now = self.clock.now_ms()
            if now >= end_ms:
                return
            target = min(end_ms, now + self.config.lease_ms,
                         self.events[0][0] if self.events else end_ms)
            wake = self.clock.next_wake_ms
            if wake is not None:
                target = min(target, wake)
            self.clock.advance_ms(max(1, target - now))
            self.broker.expire_transactions()  # the coordinator's abort timer
            self.report.steps += 1

    def _settle(self) -> None:
        """End the faults and wake every paused process now, as it was to wake.

        A zombie still paused at the end could not show whether it notices
        the higher term; after this, every tenure of a superseded term in a
        live process must end within the settling leases.
        """
        self.settling = True
        now = self.clock.now_ms()
        kept = [(now if kind in ("resume", "thaw") else at, order, kind, member, arg)
                for at, order, kind, member, arg in self.events
                if kind in ("resume", "thaw", "ntp")]
        heapq.heapify(kept)
        self.events = kept
        self._trace("faults end; paused processes resume")

    def _start(self, member: str) -> None:
        self.incarnations[member] += 1
        clock = MemberClock(self.clock, self.config.skew_ms[member])
        transport = FaultyTransport(self.transport_factory(self.broker, clock=clock), clock,
                                    self._delays(random.Random(self.rng.getrandbits(64))))
        process = _Process(member, self.incarnations[member], clock, transport)
        process.running_since = self.clock.now_ms()
        self.processes[member] = process
        self.every_process.append(process)
        for role in self.config.roles:
            if member in self.config.candidates[role]:
                process.writers[role] = HistoryWriter(
                    f"{process}/{role}", OUTPUT, self.config.roles.index(role), clock=self.clock)
                process.tasks.append(self._candidate(process, role))

    def _delays(self, rng: random.Random) -> Callable[[str], tuple[int, int]]:
        probability, most = self.config.delay_probability, self.config.delay_max_ms

        def delay(call: str) -> tuple[int, int]:
            if rng.random() >= probability:
                return (0, 0)
            total = rng.randint(1, most)
            before = rng.randint(0, total)
            return (before, total - before)

        return delay

    def _candidate(self, process: _Process, role: str) -> asyncio.Task[None]:
        """The library's runner for `role` in `process`, writing history while it leads."""
        config = self.config
        writer = process.writers[role]

        async def work(leadership: Leadership) -> None:
            while True:
                try:
                    await writer.write(leadership)
                except ProcessCrashed:
                    return
                except Exception as exc:  # an unknown outcome: the checker judges the write
                    self.report.write_errors[type(exc).__name__] += 1
                    self._trace(f"{process} write for {role}: {exc!r}")
                interval = config.write_interval_ms
                await process.clock.sleep_until(process.clock.now_ms() + interval)

        options = LeadershipOptions(
            config.partitions, config.lease, config.renew, config.stagger[role],
            fencing=config.fencing, outputs=(OUTPUT,) if self.term_mode else ())
        runner = LeaderRunner(process.transport, role, process.member, work, options=options,
                              clock=process.clock, observer=_SimObserver(self, process),
                              stop_timeout=config.lease, retry_interval=config.renew,
                              max_backoff=config.lease)
        process.runners[role] = runner
        return asyncio.create_task(runner.run(), name=f"{process} {role}")

    # Faults.

    def at(self, seconds: float, kind: str, member: str = "", arg: object = None) -> None:
        """Script a fault `seconds` after the start (for scenario tests).

        `member` ``"@role"`` names whoever leads the role then. Kinds:
        ``crash`` (`arg`: restart after that many ms, or never),
        ``pause`` / ``freeze`` (`arg`: for that many ms; a frozen clock stops
        too), ``resign`` (`arg`: ``(role, deregister)``), ``slow`` (`arg`:
        ``(call, ms)``: from now on, every answer to the process's `call`
        arrives that many ms late, e.g. ``"tail_terms"``, a lagging consumer).
        """
        self._schedule(self.start_ms + round(seconds * 1000), kind, member, arg)

    def _schedule(self, at_ms: int, kind: str, member: str = "", arg: object = None) -> None:
        heapq.heappush(self.events, (at_ms, next(self._order), kind, member, arg))

    def _next_fault_at(self) -> int:
        assert self.config.fault_gap is not None
        gap = self.rng.expovariate(1 / self.config.fault_gap)
        return self.clock.now_ms() + max(1, round(gap * 1000))

    def _next_cleaning_at(self) -> int:
        assert self.config.cleaner_gap is not None
        gap = self.config.cleaner_gap * self.rng.uniform(0.5, 1.5)
        return self.clock.now_ms() + round(gap * 1000)

    def _fire(self, kind: str, member: str, arg: object) -> None:
        now = self.clock.now_ms()
        if member.startswith("@"):
            member = self._leader_of(member[1:])
        process = self.processes.get(member)
        if kind == "fault":
            self._random_fault()
            self._schedule(self._next_fault_at(), "fault")
        elif kind == "clean":
            self.report.faults["compaction"] += 1
            self.broker.compact(STATE)
            if self.term_mode:  # the highest claim must survive it: terms never restart
                for role in self.config.roles:
                    self._term_view(role)  # every record folded before the cleaner runs
                self.broker.compact(TERMS_TOPIC)
                self._check_compacted_terms()
            self._schedule(self._next_cleaning_at(), "clean")
        elif process is None:
            raise ValueError(f"no member {member!r} for {kind}")
        elif kind == "crash" and not process.dead:
            self.report.faults["crash"] += 1
            open_roles = self._open_transactions(process)
            if open_roles:
                self.report.faults["crash inside a transaction"] += 1
            self._trace(f"{process} crashes"
                        + (f" inside a transaction of {open_roles}" if open_roles else ""))
            self._crash(process)
            if isinstance(arg, int):
                self._schedule(now + arg, "restart", member)
        elif kind == "restart":
            self.report.faults["restart"] += 1
            self._start(member)
            self._trace(f"{self.processes[member]} starts")
        elif kind in ("pause", "freeze") and process.running:
            assert isinstance(arg, int)
            self.report.faults[kind] += 1
            self._trace(f"{process} {kind}s for {arg}ms")
            process.clock.pause()
            process.running_since = None
            self._schedule(now + arg, "resume" if kind == "pause" else "thaw", member)
        elif kind in ("resume", "thaw") and not process.dead:
            self._trace(f"{process} {'resumes' if kind == 'resume' else 'thaws, clock behind'}")
            process.clock.resume(frozen=kind == "thaw")
            process.running_since = now
            if kind == "thaw":
                lag = round(self.config.lease_ms * self.rng.uniform(0.5, 3))
                self._schedule(now + lag, "ntp", member)
        elif kind == "ntp" and not process.dead:
            self._trace(f"{process} clock stepped back to its skew")
            process.clock.set_offset(self.config.skew_ms[member])
        elif kind == "slow" and not process.dead:
            assert isinstance(arg, tuple)
            call, late_ms = arg
            self._trace(f"{process}: every {call} answer now arrives {late_ms}ms late")
            delay = process.transport.delay
            process.transport.delay = lambda name: (
                (0, late_ms) if name == call else delay(name) if delay else (0, 0))
        elif kind == "resign" and process.running:
            assert isinstance(arg, tuple)
            role, deregister = arg
            self.report.faults["resign"] += 1
            self._trace(f"{process} asked to resign {role}")
            process.runners[role].step_down(deregister=deregister)

    def _random_fault(self) -> None:
        rng = self.rng
        running = [p for p in self.processes.values() if p.running]
        leaders = [(p, role) for p in running for role, _ in self._leading(p)]
        kind = rng.choices(("crash", "pause", "resign"), (4, 4, 2))[0]
        if kind == "resign":
            if leaders:
                process, role = rng.choice(leaders)
                self._fire("resign", process.member, (role, rng.random() < 0.5))
            return
        if not running:
            return
        process = rng.choice([p for p, _ in leaders] if leaders and rng.random() < 0.6
                             else running)
        lease = self.config.lease_ms
        if kind == "crash":
            restart = round(lease * rng.uniform(0, 3)) if rng.random() < 0.85 else None
            self._fire("crash", process.member, restart)
        else:
            kind = "freeze" if rng.random() < 0.5 else "pause"
            self._fire(kind, process.member, round(lease * rng.uniform(0.3, 3)))

    def _crash(self, process: _Process) -> None:
        """The process dies: nothing more reaches the broker, its tasks stop."""
        process.dead = True
        process.transport.crash()
        process.running_since = None
        for task in process.tasks:
            task.cancel()
        for leadership in process.leaderships:
            for task in leadership._tasks:
                task.cancel()

    def _open_transactions(self, process: _Process) -> list[str]:
        """The roles whose transaction under `process`'s token is open at the broker."""
        roles = []
        for role, leadership in self._leading(process):
            entry = self.broker._ids.get(role)
            if entry is not None and entry.open is not None and entry.token == leadership.token:
                roles.append(role)
        return roles

    def _leader_of(self, role: str) -> str:
        live = [p for p, lead in self.leaderships[role] if not lead.done.done() and not p.dead]
        if not live:
            raise ValueError(f"nobody leads {role} at t={self.clock.now_ms() - self.start_ms}ms")
        return live[-1].member

    def _trace(self, line: str) -> None:
        self.report.trace.append(f"t={self.clock.now_ms() - self.start_ms}ms {line}")

    def _leading(self, process: _Process) -> list[tuple[str, Leadership]]:
        return [(role, leadership) for role, held in self.leaderships.items()
                for owner, leadership in held
                if owner is process and not leadership.done.done()]

    # Checking.

    def _observe(self) -> None:
        """The per-step invariants, and liveness bookkeeping."""
        now = self.clock.now_ms()
        elapsed, self.last_observed = now - self.last_observed, now
        for role in self.config.roles:
            if self.term_mode:
                led = self._observe_term(role, now, elapsed)
                if not self.settling:
                    self._account_leader(role, now, elapsed, led)
                continue
            current = self.broker.describe(role).token
            self._track_token(role, now, current)
            held = self.leaderships[role]
            holders = [(p, lead) for p, lead in held
                       if not lead.done.done() and lead.token == current]
            if len(holders) > 1:
                self.report.invariant_violations.append(
                    f"{role} at t={now - self.start_ms}ms: {len(holders)} live leaderships hold "
                    f"the current token {current}: {[str(p) for p, _ in holders]}")
            if holders:
                newest = max(lead.tenure for _, lead in held)
                if holders[0][1].tenure != newest:
                    self.report.invariant_violations.append(
                        f"{role} at t={now - self.start_ms}ms: the current token {current} "
                        f"has tenure {holders[0][1].tenure}, but tenure {newest} exists")
            self._account_leader(role, now, elapsed,
                                 any(p.running for p, _ in holders))

    def _observe_term(self, role: str, now: int, elapsed: int) -> bool:
        """Term mode's per-step invariants for `role`; whether a running process leads it."""
        at = f"{role} at t={now - self.start_ms}ms"
        view = self._term_view(role)
        self._track_term(role, at, view)
        live = [(p, lead) for p, lead in self.leaderships[role] if not lead.done.done()]
        holders = [(p, lead) for p, lead in live if _term(lead) == view.term]
        if len(holders) > 1:
            self.report.invariant_violations.append(
                f"{at}: {len(holders)} live leaderships hold the highest term {view.term}: "
                f"{[str(p) for p, _ in holders]}")
        winner = view.winner(view.term)
        for process, lead in holders:
            if winner is None or (process.member, lead.tenure) != (winner.member, winner.offset):
                self.report.invariant_violations.append(
                    f"{at}: {process} holds term {view.term} with tenure {lead.tenure}, but "
                    f"the claim that won it is {winner}")
        bound = ZOMBIE_LEASES * self.config.lease_ms
        for process, lead in live:
            if _term(lead) > view.term:
                self.report.invariant_violations.append(
                    f"{at}: {process} holds term {_term(lead)}, above the log's {view.term}")
            elif _term(lead) < view.term:
                ran = self.zombie_ms.get(lead)
                if ran is None:
                    self._trace(f"{process} is a zombie of {role}: term {_term(lead)} < "
                                f"{view.term}")
                    ran = 0
                elif process.running:
                    ran += elapsed
                    if ran > bound >= self.zombie_ms[lead]:
                        self.report.invariant_violations.append(
                            f"{at}: {process} still leads term {_term(lead)} after running "
                            f"{ran}ms since term {view.term} was claimed")
                self.zombie_ms[lead] = ran
        return any(p.running for p, _ in holders)

    def _term_view(self, role: str) -> TermView:
        """The role's view of every term record written so far, folded once each.

        Every record is folded (and kept in `term_records`) before the cleaner
        runs, so this is the view of the uncompacted log; `_check_compacted_terms`
        compares the compacted partition's with it.
        """
        fold = self.term_folds.setdefault(role, TermFold(role))
        partition = role_partition(role, self.config.partitions)
        start = self.term_folded.get(role, 0)
        written = self.term_records.setdefault(role, [])
        for record in self.broker.partition(TERMS_TOPIC, partition).read_committed(start).records:
            fold.apply(record)
            written.append(record)
            self.term_folded[role] = record.offset + 1
        return fold.view

    def _check_compacted_terms(self) -> None:
        """A member folding the compacted terms partition sees the highest term and its
        winning claim (the earlier terms' claims are settled and may be gone)."""
        for role in self.config.roles:
            before = self._term_view(role)
            partition = role_partition(role, self.config.partitions)
            after = build_term_view(
                role, self.broker.partition(TERMS_TOPIC, partition).read_committed(0).records)
            if (after.term, after.winner(after.term)) != (before.term,
                                                          before.winner(before.term)):
                self.report.invariant_violations.append(
                    f"{role} at t={self.clock.now_ms() - self.start_ms}ms: compaction of the "
                    f"terms topic changed the highest term from {before.term} to {after.term} "
                    f"or who won a term")

    def _track_term(self, role: str, at: str, view: TermView) -> None:
        """The highest term and its winner only move forward, through compaction too."""
        winner = view.winner(view.term)
        current = (view.term, winner.member if winner else None,
                   winner.offset if winner else None)
        seen = self.term_seen[role]
        if current == seen:
            return
        if view.term < seen[0]:
            self.report.invariant_violations.append(
                f"{at}: the highest term went back from {seen[0]} to {view.term}")
        elif view.term == seen[0]:
            self.report.invariant_violations.append(
                f"{at}: the winner of term {view.term} changed from {seen[1:]} to {current[1:]}")
        else:
            self._trace(f"{role}: term {view.term} won by {current[1]} at offset {current[2]}")
        self.term_seen[role] = current

    def _young_zombies(self) -> list[Leadership]:
        """Live tenures of a superseded term, in running processes, still within their bound."""
        bound = ZOMBIE_LEASES * self.config.lease_ms
        return [lead for process, lead in itertools.chain(*self.leaderships.values())
                if lead in self.zombie_ms and not lead.done.done() and process.running
                and self.zombie_ms[lead] <= bound]

    def _record_term_tenures(self) -> None:
        """How each term-mode tenure stands once the cluster has settled."""
        for role, held in self.leaderships.items():
            self.term_tenures[role] = [
                TermTenure(process.member, _term(lead), lead.tenure, *_tenure_end(process, lead))
                for process, lead in held]

    def _track_token(self, role: str, now: int, current: FencingToken) -> None:
        timeline = self.timeline[role]
        if timeline and timeline[-1][1] == current:
            return
        if timeline and current.producer_id < timeline[-1][1].producer_id:
            self.report.smaller_id_moves += 1
        timeline.append((now, current))
        self._trace(f"{role}: the coordinator's token is {current}")

    def _account_leader(self, role: str, now: int, elapsed: int, led: bool) -> None:
        since = self.leaderless_since[role]
        if since is not None:
            self.report.leaderless_ms[role] = self.report.leaderless_ms.get(role, 0) + elapsed
        if led:
            if since is not None:
                longest = self.report.longest_leaderless_ms
                longest[role] = max(longest.get(role, 0), now - since)
            self.leaderless_since[role] = None
            return
        if since is None:
            self.leaderless_since[role] = since = now
        window = LIVELOCK_LEASES * self.config.lease_ms
        steady = [p for p in self.processes.values()
                  if p.member in self.config.candidates[role] and p.running
                  and p.running_since is not None and p.running_since <= now - window]
        if now - since >= window and steady and not any(
                role in entry for entry in self.report.livelocks):
            self.report.livelocks.append(
                f"{role}: no leader for {(now - since) / 1000:.1f}s "
                f"({LIVELOCK_LEASES} leases) while {[str(p) for p in steady]} ran throughout")

    async def _shut_down(self) -> None:
        """Crash everything, let the coordinator abort what was left open."""
        now = self.clock.now_ms()
        for role in self.config.roles:
            since = self.leaderless_since[role]
            if since is not None:
                longest = self.report.longest_leaderless_ms
                longest[role] = max(longest.get(role, 0), now - since)
        for process in self.every_process:
            if not process.dead:
                self._crash(process)
        await quiesce()
        tasks = [t for p in self.every_process for t in p.tasks]
        stuck = [t.get_name() for t in tasks if not t.done()]
        if stuck:
            self.report.errors.append(f"tasks that ignored cancellation: {stuck}")
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                self.report.errors.append(f"{task.get_name()} died: {task.exception()!r}")
        self.clock.advance_ms(self.config.lease_ms + 1000)
        self.broker.expire_transactions()
        await quiesce()

    def _check_histories(self) -> None:
        if self.term_mode:
            self._check_term_histories()
            return
        report = self.report
        for index, role in enumerate(self.config.roles):
            output = self.broker.partition(OUTPUT, index).read_committed(0)
            attempts = [a for p in self.every_process if role in p.writers
                        for a in p.writers[role].attempts]
            report.histories[role] = check_history(
                [(r.offset, r.value) for r in output.records], attempts)
            report.lease_violations += self._lease_regressions(role)
        report.tenures = sum(len(held) for held in self.leaderships.values())
        report.epochs_minted = self.broker.epochs_minted
        for process in self.every_process:
            report.fenced_by_broker.update(process.transport.fenced_by_broker)
            report.delayed_calls += process.transport.delayed_calls
        requests = Counter((at, role) for p in self.every_process
                           for at, role in p.transport.epoch_requests)
        report.simultaneous_challenges = sum(1 for n in requests.values() if n > 1)

    def _check_term_histories(self) -> None:
        report = self.report
        for index, role in enumerate(self.config.roles):
            output = [OutputRecord(r.offset, r.value, r.headers)
                      for r in self.broker.records(OUTPUT, index)]
            attempts = [a for p in self.every_process if role in p.writers
                        for a in p.writers[role].attempts]
            self._term_view(role)
            terms = self.term_records[role]
            report.histories[role] = check_term_history(
                output, attempts, role=role, topic=OUTPUT, partition=index,
                terms=terms, tenures=self.term_tenures[role])
            claims = [r for r in terms if r.value and _is_claim_of(r.key, role)]
            report.simultaneous_challenges += len(claims) - len(self._term_view(role).winners)
        report.tenures = sum(len(held) for held in self.leaderships.values())
        report.epochs_minted = self.broker.epochs_minted
        for process in self.every_process:
            report.fenced_by_broker.update(process.transport.fenced_by_broker)
            report.delayed_calls += process.transport.delayed_calls
        report.zombies = len(self.zombie_ms)
        report.longest_zombie_ms = max(self.zombie_ms.values(), default=0)

    def _lease_regressions(self, role: str) -> list[str]:
        """Lease records of `role` in the state topic that go back to an earlier tenure."""
        partition = role_partition(role, self.config.partitions)
        records = self.broker.partition(STATE, partition).read_committed(0).records
        first: dict[FencingToken, int] = {}
        newest = -1
        found = []
        for record in records:
            key = decode_key(record.key)
            if key.role != role or key.kind != Kind.LEASE or not record.value:
                continue
            lease = decode_lease(record.value)
            token = FencingToken(lease.producer_id, lease.producer_epoch)
            tenure = first.setdefault(token, record.offset)
            if tenure < newest:
                found.append(f"{role}: lease record at offset {record.offset} of {lease.member} "
                             f"under {token} (tenure {tenure}) follows tenure {newest}")
            newest = max(newest, tenure)
        return found


def _term(leadership: Leadership) -> int:
    assert isinstance(leadership, TermLeadership), leadership
    return leadership.term


def _tenure_end(process: _Process, leadership: Leadership) -> tuple[TenureEnd, str]:
    """How a tenure stands: ended (and why), or its process dead, stopped or running."""
    if leadership.done.done():
        err = leadership.err
        if err is None:
            return ("resigned", "")
        if isinstance(err, FencedError):
            return ("fenced", str(err))
        if isinstance(err, ProcessCrashed):
            return ("crashed", str(err))
        return ("error", repr(err))
    if process.dead:
        return ("crashed", "")
    if process.clock.paused:
        return ("paused", "")
    return ("running", "")


def _is_claim_of(key: bytes, role: str) -> bool:
    decoded = decode_term_key(key)
    return decoded.kind is TermKind.CLAIM and decoded.role == role


@contextlib.contextmanager
def _quiet_library_logs() -> Iterator[None]:
    """Keep the library's INFO and WARNING lines out of a run (the trace has them).

    A test runner that captures logs keeps every record until its test ends;
    thousands of runs in one test would keep millions.
    """
    logger = logging.getLogger("coordination")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def run_seed(
    seed: int,
    *,
    duration_leases: int = 24,
    fencing: Fencing = "epoch",
    broker_factory: Callable[..., MemoryBroker] = MemoryBroker,
) -> SimReport:
    """Run one seed in a fresh event loop."""
    config = SimConfig.from_seed(seed, duration_leases=duration_leases, fencing=fencing)
    return asyncio.run(Simulation(config, broker_factory=broker_factory).run())


TRANSACTION_CALLS = ("begin_transaction", "send", "txn_write_lease", "commit")


def summarize(reports: list[SimReport], elapsed: float | None = None) -> str:
    """Figures over many runs, for docs/reliability.md."""
    failing = [r.seed for r in reports if not r.ok]
    simulated = sum(r.config.duration for r in reports)
    role_seconds = sum(r.config.duration * len(r.config.roles) for r in reports)
    leaderless = sum(sum(r.leaderless_ms.values()) for r in reports) / 1000
    gaps = sorted(ms / r.config.lease_ms for r in reports
                  for ms in r.longest_leaderless_ms.values())
    faults: Counter[str] = Counter()
    broker: Counter[str] = Counter()
    for report in reports:
        faults.update(report.faults)
        broker.update(report.fenced_by_broker)

    def total(name: str) -> int:
        return sum(r.total(name) for r in reports)

    lines = [
        f"seeds={len(reports)} failing={failing[:20]}{'...' if len(failing) > 20 else ''} "
        f"violations={sum(len(r.violations()) for r in reports)} "
        f"errors={sum(len(r.errors) for r in reports)} "
        f"livelocks={sum(len(r.livelocks) for r in reports)}"
        + (f" wall={elapsed:.1f}s" if elapsed is not None else ""),
        f"simulated={simulated / 3600:.1f}h roles*time={role_seconds / 3600:.1f}h "
        f"steps={sum(r.steps for r in reports)}",
        f"writes: attempted={total('attempted')} committed={total('committed')} "
        f"fenced={total('fenced')} unknown={total('unknown')} "
        f"(visible {total('unknown_visible')}) lost={total('lost')} "
        f"duplicates={total('duplicates')}",
        f"tenures={sum(r.tenures for r in reports)} "
        f"epochs_minted={sum(r.epochs_minted for r in reports)} "
        f"smaller_id_moves={sum(r.smaller_id_moves for r in reports)} "
        f"simultaneous_challenges={sum(r.simultaneous_challenges for r in reports)} "
        f"delayed_calls={sum(r.delayed_calls for r in reports)}",
        f"broker refusals: transactions (guarded writes and lease writes)="
        f"{sum(broker[c] for c in TRANSACTION_CALLS)} all={dict(broker)}",
        f"faults={dict(sorted(faults.items()))}",
        f"leaderless={leaderless / role_seconds:.1%} of role time; longest gap per role "
        f"(leases): median={gaps[len(gaps) // 2] if gaps else 0:.1f} "
        f"p99={gaps[int(len(gaps) * 0.99)] if gaps else 0:.1f} max={gaps[-1] if gaps else 0:.1f}",
    ]
    if any(r.config.fencing == "term" for r in reports):
        lines.append(
            f"term mode: barriers={total('barriers')} dropped by readers={total('dropped')} "
            f"(committed {total('dropped_committed')}) fenced_visible={total('fenced_visible')} "
            f"zombies={sum(r.zombies for r in reports)} longest zombie="
            f"{max((r.longest_zombie_ms for r in reports), default=0)}ms of running time")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Replay one seed with its trace, or run a long series of seeds."""
    import argparse
    import time

    parser = argparse.ArgumentParser(prog="python -m tests.faults.simulation",
                                     description=main.__doc__)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--seed", type=int, help="replay this seed and print its whole trace")
    what.add_argument("--seeds", type=int, help="run this many seeds from --start")
    parser.add_argument("--start", type=int, default=100_000)
    parser.add_argument("--leases", type=int, default=None,
                        help="run length in lease durations "
                             "(default 12 for --seed, 24 for --seeds)")
    parser.add_argument("--fencing", choices=("epoch", "term"), default="epoch",
                        help="the fencing mode every member runs (default epoch)")
    args = parser.parse_args(argv)
    if args.seed is not None:
        report = run_seed(args.seed, duration_leases=args.leases or 12, fencing=args.fencing)
        print(report.describe(trace_lines=0))
        print("\n".join(report.trace))
        return 0 if report.ok else 1
    began = time.perf_counter()
    reports = []
    for seed in range(args.start, args.start + args.seeds):
        report = run_seed(seed, duration_leases=args.leases or 24, fencing=args.fencing)
        if report.ok:
            report.trace.clear()  # thousands of traces would fill the memory
        reports.append(report)
    print(f"--seeds {args.seeds} --start {args.start} --leases {args.leases or 24} "
          f"--fencing {args.fencing}")
    print(summarize(reports, time.perf_counter() - began))
    failing = [r for r in reports if not r.ok]
    for report in failing[:3]:
        print(report.describe())
    return 1 if failing else 0


if __name__ == "__main__":
    raise SystemExit(main())
