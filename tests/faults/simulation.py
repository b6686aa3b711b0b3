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
- the function of a deposed term leader ends within its fence deadline
  plus the runner's bound on stopping it, of its process's running time
  after the higher claim (`_check_deposed_functions` derives the bound);
- no term is won twice: the winner of the highest term in each live
  leader's own fold is the claim that won it in the whole log;
- after the run, faults stop, every paused process resumes and the cluster
  runs `SETTLE_LEASES` more leases, so each zombie gets the chance to wake;
  then `check_term_history` replays each role's output partition through a
  `TermFilter`: no record of a superseded term passes after a newer term's
  barrier or record, one holder per term, terms never go back, and every
  zombie's tenure ended.

**Library faults** (`LibraryFaults`, drawn per seed from its own random
stream, each kind switched on by name: `LIBRARY_FAULTS`, ``--faults``):
the program around the library, or its consumer, misbehaves. Observers raise at random calls
(``observer``); each process's `Admission` raises from `lease_written` at
random calls (``admission``); a transport call of a process cancels one
of its runners' tasks at random (``cancel``: the runner is then cancelled
at whatever it awaits, and a new runner for the role starts a moment
later, as a supervisor would start it); a cancelled function ignores the
cancellation for a random time (``stubborn``); and the roles run under
``placement="balanced"`` with a `Rebalancer` in each process, the members
hosting the different role sets the seed drew (``balanced``); in term
mode, a member's terms tail (a leader's more often than not) fails once,
stalls (delivers nothing for 0.3 to 4 leases) or lags (every read 0.1 to 1
lease late, for 1 to 4 leases), every 2 or 5 leases on average (``tail``;
the tail's follower reads again, and a campaign whose tail failed is
campaigned again by its runner). The runs
check, besides the above (`tests.faults.history`):

- no tenure outlives its runner by more than one renew interval of its
  process's running time (in epoch mode from the lease records, so a
  tenure no runner was told of is caught too), and a stopped runner never
  says it leads;
- at no instant do two copies of a role's function run, in one process or
  (once a copy outran its tenure by the runner's stop bound) across members;
- in epoch mode, every lease a tenure committed is in the leadership-change
  events the library derives from the state topic (folded as written,
  before compaction), ``elected`` first, then its renewals in order;
- a rebalancing never hands a role back to the member that handed it,
  while nothing changed in between (no fault, no restart).

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
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field

import krabka.runner as runner_module
from krabka import (
    TERMS_TOPIC,
    EpochLostError,
    FencedError,
    FencingToken,
    Kind,
    LeaderRunner,
    Leadership,
    LeadershipOptions,
    Rebalancer,
    RoleFold,
    RunnerObserver,
    RunnerState,
    TenureState,
    TenureStop,
    TermKind,
    TermLeadership,
    TransportError,
    decode_key,
    decode_lease,
    decode_term_key,
    role_partition,
)
from krabka.format.records import Lease
from krabka.options import Fencing
from krabka.rules.state import Record, RoleState
from krabka.term.fold import TermFold, TermView, build_term_view
from krabka.testing import ManualClock, MemoryBroker, MemoryTransport
from krabka.testing.memory import MAX_EPOCH
from tests.faults.history import (
    FunctionRun,
    HistoryReport,
    HistoryWriter,
    LeaseStory,
    OutputRecord,
    TenureEnd,
    TenureLife,
    TermTenure,
    Violation,
    check_function_copies,
    check_history,
    check_lease_stories,
    check_tenure_owners,
    check_term_history,
)
from tests.support.sim import STATE, FaultyTransport, MemberClock, ProcessCrashed, quiesce

OUTPUT = "history"
ROLE_NAMES = ("billing", "reports", "ledger")
LIVELOCK_LEASES = 20
ZOMBIE_LEASES = 3
SETTLE_LEASES = 3
REPLAY = "python -m tests.faults.simulation --seed {seed} --leases {leases}"
LIBRARY_FAULTS = ("observer", "admission", "cancel", "stubborn", "balanced", "tail")


class PlantedFault(Exception):
    """An error the simulation makes the program around the library raise."""


class PlantedTailError(TransportError):
    """A read of a terms tail that the simulation makes fail."""


@dataclass(frozen=True)
class LibraryFaults:
    """How the program around the library misbehaves in one run (all off by default).

    Probabilities are per call: of an observer method raising, of an
    admission's `lease_written` raising, of a transport call cancelling one
    of its process's runner tasks; `stubborn` is the chance a cancelled
    function ignores it, for up to `stubborn_ms`. `tail_gap` is the mean
    time in seconds between faults of a member's terms tail (term mode only:
    it fails, stalls or lags; `Simulation._tail_fault`), 0 for none.
    """

    observer: float = 0.0
    admission: float = 0.0
    cancel: float = 0.0
    stubborn: float = 0.0
    stubborn_ms: int = 0
    balanced: bool = False
    tail_gap: float = 0.0
    kinds: tuple[str, ...] = ()
    """The kinds the seed was allowed to draw (what replays it)."""

    @classmethod
    def draw(cls, seed: int, lease: float, kinds: Collection[str]) -> LibraryFaults:
        """The faults `seed` draws, from a stream of its own, for the named `kinds`.

        A seed without kinds draws nothing, so it runs as before they existed.
        """
        unknown = set(kinds) - set(LIBRARY_FAULTS)
        if unknown:
            raise ValueError(f"no library fault {sorted(unknown)}; known: {LIBRARY_FAULTS}")
        rng = random.Random(f"{seed}:library")
        draws = {
            "observer": rng.choice((0.0, 0.01, 0.05)),
            "admission": rng.choice((0.0, 0.05, 0.3)),
            "cancel": rng.choice((0.0, 0.002, 0.01)),
            "stubborn": rng.choice((0.0, 0.5, 1.0)),
            "stubborn_ms": round(lease * 1000 * rng.choice((0.5, 1.5, 3.0))),
            "balanced": rng.random() < 0.5,
            "tail_gap": lease * rng.choice((0.0, 2.0, 5.0)),
        }
        return cls(
            observer=draws["observer"] if "observer" in kinds else 0.0,
            admission=draws["admission"] if "admission" in kinds else 0.0,
            cancel=draws["cancel"] if "cancel" in kinds else 0.0,
            stubborn=draws["stubborn"] if "stubborn" in kinds else 0.0,
            stubborn_ms=draws["stubborn_ms"] if "stubborn" in kinds else 0,
            balanced=draws["balanced"] if "balanced" in kinds else False,
            tail_gap=draws["tail_gap"] if "tail" in kinds else 0.0,
            kinds=tuple(kind for kind in LIBRARY_FAULTS if kind in kinds),
        )

    @property
    def any(self) -> bool:
        """Whether any fault is on."""
        return (self.observer, self.admission, self.cancel, self.stubborn,
                self.balanced, self.tail_gap) != (0.0, 0.0, 0.0, 0.0, False, 0.0)

    def describe(self) -> str:
        if not self.any:
            return "none"
        return (f"observer={self.observer} admission={self.admission} cancel={self.cancel} "
                f"stubborn={self.stubborn} for {self.stubborn_ms}ms balanced={self.balanced} "
                f"terms tail fault every {_seconds(self.tail_gap or None)}")


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
    library: LibraryFaults = LibraryFaults()

    @classmethod
    def from_seed(cls, seed: int, *, duration_leases: int = 24,
                  fencing: Fencing = "epoch",
                  library: Collection[str] = LIBRARY_FAULTS) -> SimConfig:
        """Draw a cluster from `seed`; term mode draws the same, without epoch exhaustion.

        `library` names the kinds of `LibraryFaults` the seed may draw (all by default).
        """
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
            library=LibraryFaults.draw(seed, lease, library),
        )
        if fencing == "term":  # no producer epochs to exhaust
            config = dataclasses.replace(config, near_exhaustion={}, fencing="term")
        else:  # no terms tail to fail
            config = dataclasses.replace(
                config, library=dataclasses.replace(config.library, tail_gap=0.0))
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
            f"duration={self.duration}s fencing={self.fencing} "
            f"library faults: {self.library.describe()}"
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
    lifecycle_violations: list[Violation] = field(default_factory=list)
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
        found += [str(violation) for violation in self.lifecycle_violations]
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
        if self.config.fencing == "term":
            command += " --fencing term"
        kinds = self.config.library.kinds
        if set(kinds) != set(LIBRARY_FAULTS):
            command += f" --faults {','.join(kinds) or 'none'}"
        return command

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


_Holders = tuple[tuple[str, tuple[str, ...]], ...]
"""Who holds each role, by role: the members whose tenure is not over yet."""


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
        self.runner_tasks: dict[str, asyncio.Task[None]] = {}
        self.dead = False
        self.running_since: int | None = None
        self.ran_ms = 0
        """Running time before `running_since` (the paused time left out)."""
        self.stopped_at: list[int] = []
        """When the process was paused or crashed (cluster ms)."""
        self.died = asyncio.get_running_loop().create_future()
        self.rng = random.Random()
        """The process's own stream for library faults (seeded by the simulation)."""
        self.rebalancer: Rebalancer | None = None
        self.tail_fails = 0
        """How many of the next reads of its terms tail fail."""
        self.tail_stalled_until = 0
        """Until when (cluster ms) its terms tail delivers nothing."""
        self.tail_lag_until = 0
        self.tail_lag_ms = 0
        """Until when its terms tail delivers every read `tail_lag_ms` late."""

    @property
    def running(self) -> bool:
        return not self.dead and not self.clock.paused

    def running_ms(self, now: int) -> int:
        """How long the process has run, pauses left out, at cluster time `now`."""
        since = self.running_since
        return self.ran_ms + (0 if since is None else now - since)

    def stop_running(self, now: int) -> None:
        """The process stops (a pause or a crash): its running time stops too."""
        self.ran_ms = self.running_ms(now)
        self.running_since = None
        self.stopped_at.append(now)

    def planted(self, probability: float, what: str) -> None:
        """Raise `PlantedFault` with `probability`, from this process's stream."""
        if probability and self.rng.random() < probability:
            raise PlantedFault(f"{self}: {what} raised (planted)")

    def __str__(self) -> str:
        return f"{self.member}.{self.incarnation}"


class _SimObserver(RunnerObserver):
    """Records a process's tenures for the invariants, and its failures as errors.

    With the ``observer`` library fault, each call raises `PlantedFault` at
    random, after it recorded what it heard.
    """

    def __init__(self, sim: Simulation, process: _Process, runner: LeaderRunner) -> None:
        self.sim = sim
        self.process = process
        self.runner = runner
        self.raising = sim.config.library.observer

    def elected(self, role: str, leadership: Leadership) -> None:
        self.process.leaderships.append(leadership)
        self.sim.leaderships[role].append((self.process, leadership))
        self.sim._trace(f"{self.process} leads {role} with {leadership.token}, "
                        f"tenure {leadership.tenure}")
        self.sim._owned(self.process, role, self.runner, leadership)
        self.process.planted(self.raising, "elected()")

    def renewed(self, role: str, leadership: Leadership, latency: float) -> None:
        lease = getattr(leadership, "lease", None)
        if isinstance(lease, Lease):
            self.sim.stories.setdefault(leadership, []).append(lease)
        self.process.planted(self.raising, "renewed()")

    def fenced(self, role: str, leadership: Leadership) -> None:
        self.process.planted(self.raising, "fenced()")

    def resigned(self, role: str, leadership: Leadership) -> None:
        self.process.planted(self.raising, "resigned()")

    def lost(self, role: str, leadership: Leadership, stop: TenureStop) -> None:
        self.sim._trace(f"{self.process} stops leading {role} ({leadership.token}): "
                        f"{stop.reason}: {leadership.err}")
        # A fence or the deadline can end a tenure while it steps down; any
        # other error of a resignation is a bug.
        if stop.reason == "stepped-down" and not isinstance(
                leadership.err, (type(None), FencedError, EpochLostError, ProcessCrashed)):
            self.sim.report.errors.append(f"{self.process}: resign({role}) failed: "
                                          f"{leadership.err!r}")
        self.process.planted(self.raising, "lost()")

    def campaign_failed(self, role: str, error: BaseException) -> None:
        # A candidate's follower hands a failed read of its tail to the
        # campaign's caller, and the runner campaigns again: that is the
        # retry, not a failure. Nothing else may end a campaign.
        if not isinstance(error, (ProcessCrashed, PlantedTailError)):
            self.sim.report.errors.append(
                f"{self.process}: campaigning for {role} raised {error!r}")
        self.process.planted(self.raising, "campaign_failed()")


class _SimAdmission:
    """A process's admission: always open; with the ``admission`` library fault,
    `lease_written` raises `PlantedFault` at random calls."""

    def __init__(self, process: _Process, raising: float) -> None:
        self.process = process
        self.raising = raising

    def closed_for_ms(self) -> int:
        return 0

    def lease_written(self, seconds: float) -> None:
        self.process.planted(self.raising, "lease_written()")


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
        self.won_twice: set[tuple[str, int]] = set()
        self.deposed: dict[Leadership, tuple[_Process, int]] = {}
        """Each tenure of a superseded term whose function may still run: its
        process, and that process's running ms when the higher term was claimed."""
        self.copies_of: dict[Leadership, list[list[object]]] = {}
        self.tail_rng = random.Random(f"{config.seed}:terms-tail")
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
        # The library faults and what their invariants watch.
        self.library = config.library
        self.library_rng = random.Random(f"{config.seed}:library-faults")
        self.owners: dict[tuple[str, object], tuple[_Process, LeaderRunner, Leadership]] = {}
        self.handed: dict[tuple[str, object], int] = {}
        """When a campaign returned each tenure to its runner, by (role, token),
        in its process's running ms: the campaign owns a tenure until then."""
        """Each tenure a runner was told of, by role and token."""
        self.stories: dict[Leadership, list[Lease]] = {}
        """Each epoch tenure's leases as it was told of them: first, then renewals."""
        self.runner_ended: dict[LeaderRunner, int] = {}
        """When each runner's task ended, in its process's running ms."""
        self.tenure_ended: dict[Leadership, tuple[int, int]] = {}
        self.left_leading: dict[Leadership, int] = {}
        """When each owned tenure left LEADING (its resignation began, or it
        ended), in its process's running ms: from then on it renews nothing
        and admits no guarded write, whatever its hand-back still waits for."""
        """When each owned tenure ended: its process's running ms and cluster ms."""
        self.copies: list[list[object]] = []
        """Each copy of a function: role, process, tenure, started, ended (cluster ms),
        whether it ignored its cancellation."""
        self.state_read = [0] * config.partitions
        self.state_appended = [0] * config.partitions
        self.appended_ms: dict[tuple[int, int], tuple[_Process, int]] = {}
        """Each lease record appended, not yet committed: its writer's running ms then."""
        self.state_log: list[list[Record]] = [[] for _ in range(config.partitions)]
        """The state topic as written, before any compaction."""
        self.role_folds = {role: RoleFold(role) for role in config.roles}
        self.log_tenures: dict[tuple[str, FencingToken], dict[str, object]] = {}
        """Each tenure of the lease records: member, tenure, began and renewals (running ms)."""
        self.changes = 0
        """Counts faults and restarts: a rebalancing move back is an oscillation only
        when nothing changed since the move forth."""
        self.moves_seen: dict[str, tuple[str, str, int, _Holders]] = {}
        self.moves_read: dict[_Process, object] = {}
        self.stopped_leading: set[LeaderRunner] = set()

    # Running.

    async def run(self) -> SimReport:
        """Run the schedule to its end, then check the histories.

        Errors the event loop reports (a task whose exception nobody
        retrieved: work a cancelled caller left running) are collected at the
        end, after a garbage collection, and fail the run.
        """
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(self._loop_error)
        # The runners' campaigns are watched for the instant each returns a
        # tenure: until then the campaign owns it, from then on the runner.
        campaign = runner_module.acquire_leadership

        async def watched(transport: object, role: str, member: str,
                          **kwargs: object) -> Leadership:
            leadership = await campaign(transport, role, member, **kwargs)  # type: ignore[arg-type]
            process = self.processes.get(member)
            if process is not None:
                self.handed[(role, leadership.token)] = process.running_ms(self.clock.now_ms())
            return leadership

        runner_module.acquire_leadership = watched  # type: ignore[assignment]
        try:
            with _quiet_library_logs(self.library.any):
                report = await self._run()
        finally:
            runner_module.acquire_leadership = campaign
        for process in self.every_process:  # drop the finished tasks and what they hold
            process.tasks.clear()
            process.leaderships.clear()
        self.leaderships.clear()
        self.owners.clear()
        self.stories.clear()
        self.tenure_ended.clear()
        self.left_leading.clear()
        self.copies.clear()
        self.copies_of.clear()
        self.deposed.clear()
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
        if self.term_mode and self.library.tail_gap:
            self._schedule(self._next_tail_fault_at(), "tail fault")
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
        if not self.term_mode:  # what the coordinator's aborts let readers see at last
            self._read_state(self.clock.now_ms())
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
        if self.library.any:
            process.rng.seed(self.library_rng.getrandbits(64))
        if self.library.cancel:
            transport.delay = self._cancelling(process, transport.delay)
        if self.term_mode:
            transport.tail_fault = self._tail_fault(process)
        self.processes[member] = process
        self.every_process.append(process)
        self.changes += 1
        for role in self.config.roles:
            if member in self.config.candidates[role]:
                process.writers[role] = HistoryWriter(
                    f"{process}/{role}", OUTPUT, self.config.roles.index(role), clock=self.clock)
                process.tasks.append(self._candidate(process, role))
        if self.library.balanced:
            process.rebalancer = self._rebalancer(process)
            process.tasks.append(asyncio.create_task(process.rebalancer.run(),
                                                     name=f"{process} rebalancer"))

    def _rebalancer(self, process: _Process) -> Rebalancer:
        """Evens out the process's balanced roles, from the state as written so far."""
        def states() -> Mapping[str, RoleState]:
            return {role: self.role_folds[role].state for role in process.runners}

        def live() -> list[str]:
            return [p.member for p in self.processes.values() if not p.dead]

        return Rebalancer(process.member, process.runners, states, live, process.clock,
                          interval=self.config.lease)

    def _cancelling(self, process: _Process, delay: Callable[[str], tuple[int, int]] | None
                    ) -> Callable[[str], tuple[int, int]]:
        """`delay`, and at random a call cancels one of the process's runner tasks
        (one handing over, when there is one, half the time)."""
        def cancelling(call: str) -> tuple[int, int]:
            if process.rng.random() < self.library.cancel:
                tasks = {role: task for role, task in process.runner_tasks.items()
                         if not task.done()}
                handing = [role for role in tasks
                           if process.runners[role].state is RunnerState.HANDING_OVER]
                if tasks:
                    choice = (handing if handing and process.rng.random() < 0.5
                              else sorted(tasks))
                    role = process.rng.choice(choice)
                    state = process.runners[role].state.value
                    self.report.faults["runner cancelled"] += 1
                    self.report.faults[f"runner cancelled {state}"] += 1
                    self._trace(f"{process}: the runner of {role} is cancelled while {state} "
                                f"(at a {call})")
                    tasks[role].cancel()
            return delay(call) if delay is not None else (0, 0)

        return cancelling

    def _delays(self, rng: random.Random) -> Callable[[str], tuple[int, int]]:
        probability, most = self.config.delay_probability, self.config.delay_max_ms

        def delay(call: str) -> tuple[int, int]:
            if rng.random() >= probability:
                return (0, 0)
            total = rng.randint(1, most)
            before = rng.randint(0, total)
            return (before, total - before)

        return delay

    def _tail_fault(self, process: _Process) -> Callable[[str], Awaitable[None]]:
        """How each read of `process`'s terms tail fares: it fails (the read is
        lost; the tail is opened again), is held while the tail stalls, or
        arrives late while it lags."""
        transport = process.transport

        async def fault(name: str) -> None:
            if name != "tail_terms":
                return
            if process.tail_fails:
                process.tail_fails -= 1
                raise PlantedTailError(f"{process}: the terms tail failed (planted)")
            now = self.clock.now_ms()
            if now < process.tail_stalled_until:
                await transport._sleep(process.tail_stalled_until - now)
            elif now < process.tail_lag_until:
                await transport._sleep(process.tail_lag_ms)

        return fault

    def _candidate(self, process: _Process, role: str) -> asyncio.Task[None]:
        """The library's runner for `role` in `process`, writing history while it leads."""
        config = self.config
        writer = process.writers[role]

        library = config.library

        async def work(leadership: Leadership) -> None:
            copy: list[object] = [role, process, leadership, self.clock.now_ms(), None, False]
            self.copies.append(copy)
            self.copies_of.setdefault(leadership, []).append(copy)
            try:
                while True:
                    try:
                        await writer.write(leadership)
                    except ProcessCrashed:
                        return
                    except Exception as exc:  # an unknown outcome: the checker judges it
                        self.report.write_errors[type(exc).__name__] += 1
                        self._trace(f"{process} write for {role}: {exc!r}")
                    interval = config.write_interval_ms
                    await process.clock.sleep_until(process.clock.now_ms() + interval)
            except asyncio.CancelledError:
                if library.stubborn and process.rng.random() < library.stubborn:
                    copy[5] = True
                    await self._ignore_cancellation(process, role)
                raise
            finally:
                copy[4] = self.clock.now_ms()

        options = LeadershipOptions(
            config.partitions, config.lease, config.renew, config.stagger[role],
            placement="balanced" if library.balanced else "registration",
            fencing=config.fencing, outputs=(OUTPUT,) if self.term_mode else ())
        runner = LeaderRunner(process.transport, role, process.member, work, options=options,
                              clock=process.clock, stop_timeout=config.lease,
                              retry_interval=config.renew, max_backoff=config.lease,
                              admission=(_SimAdmission(process, library.admission)
                                         if library.admission else None))
        runner.observer = _SimObserver(self, process, runner)
        process.runners[role] = runner
        task = asyncio.create_task(runner.run(), name=f"{process} {role}")
        process.runner_tasks[role] = task
        task.add_done_callback(lambda done: self._runner_ended(process, role, runner, done))
        return task

    async def _ignore_cancellation(self, process: _Process, role: str) -> None:
        """A function that ignores its cancellation for a while (its process's death ends it)."""
        until = self.clock.now_ms() + process.rng.randint(1, self.library.stubborn_ms)
        self.report.faults["function ignores cancellation"] += 1
        self._trace(f"{process}: the function of {role} ignores its cancellation for "
                    f"{until - self.clock.now_ms()}ms")
        while self.clock.now_ms() < until and not process.dead:
            waiting = asyncio.ensure_future(self.clock.sleep_until(until))
            try:
                await asyncio.wait([waiting, process.died], return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                self._trace(f"{process}: the function of {role} ignores another cancellation")
            finally:
                waiting.cancel()

    def _runner_ended(self, process: _Process, role: str, runner: LeaderRunner,
                      task: asyncio.Task[None]) -> None:
        """A runner's task ended in a live process: a supervisor starts another."""
        if process.dead:
            return
        now = self.clock.now_ms()
        self.runner_ended[runner] = process.running_ms(now)
        self.changes += 1
        why = "cancelled" if task.cancelled() else repr(task.exception())
        self._trace(f"{process}: the runner of {role} ended ({why}), with "
                    f"{runner.leadership and runner.leadership.token} in hand")
        if runner.state is RunnerState.STOPPED and runner.leading:
            self.report.invariant_violations.append(
                f"{role} at t={now - self.start_ms}ms: {process}'s runner stopped, yet says it "
                f"leads with {runner.leadership and runner.leadership.token}")
        delay = process.rng.randint(0, self.config.lease_ms)
        self._schedule(now + delay, "rerun", process.member, (role, process.incarnation))

    def _owned(self, process: _Process, role: str, runner: LeaderRunner,
               leadership: Leadership) -> None:
        """A runner was told it leads: the tenure's owner, story and end are watched."""
        self.owners[(role, leadership.token)] = (process, runner, leadership)
        lease = getattr(leadership, "lease", None)
        if isinstance(lease, Lease):
            self.stories[leadership] = [lease]

        def ended(_: object) -> None:
            now = self.clock.now_ms()
            self.tenure_ended.setdefault(leadership, (process.running_ms(now), now))

        leadership.done.add_done_callback(ended)

    # Faults.

    def at(self, seconds: float, kind: str, member: str = "", arg: object = None) -> None:
        """Script a fault `seconds` after the start (for scenario tests).

        `member` ``"@role"`` names whoever leads the role then. Kinds:
        ``crash`` (`arg`: restart after that many ms, or never),
        ``pause`` / ``freeze`` (`arg`: for that many ms; a frozen clock stops
        too), ``resign`` (`arg`: ``(role, deregister)``), ``slow`` (`arg`:
        ``(call, ms)``: from now on, every answer to the process's `call`
        arrives that many ms late, e.g. ``"tail_terms"``, a lagging consumer),
        ``tail`` (term mode; `arg`: ``("fail",)``: the next read of
        the process's terms tail fails; ``("stall", ms)``: it delivers nothing
        for that long; ``("lag", ms, late_ms)``: for that long every read
        arrives `late_ms` late).
        """
        self._schedule(self.start_ms + round(seconds * 1000), kind, member, arg)

    def _schedule(self, at_ms: int, kind: str, member: str = "", arg: object = None) -> None:
        heapq.heappush(self.events, (at_ms, next(self._order), kind, member, arg))

    def _next_fault_at(self) -> int:
        assert self.config.fault_gap is not None
        gap = self.rng.expovariate(1 / self.config.fault_gap)
        return self.clock.now_ms() + max(1, round(gap * 1000))

    def _next_tail_fault_at(self) -> int:
        gap = self.tail_rng.expovariate(1 / self.library.tail_gap)
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
        elif kind == "tail fault":
            self._random_tail_fault()
            self._schedule(self._next_tail_fault_at(), "tail fault")
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
        elif kind == "rerun":
            assert isinstance(arg, tuple)
            role, incarnation = arg
            if process.incarnation == incarnation and not process.dead:
                self.report.faults["runner restarted"] += 1
                self._trace(f"{process}: a new runner of {role} starts")
                process.tasks.append(self._candidate(process, role))
        elif kind == "restart":
            self.report.faults["restart"] += 1
            self._start(member)
            self._trace(f"{self.processes[member]} starts")
        elif kind in ("pause", "freeze") and process.running:
            assert isinstance(arg, int)
            self.report.faults[kind] += 1
            self._trace(f"{process} {kind}s for {arg}ms")
            process.clock.pause()
            process.stop_running(now)
            self.changes += 1
            self._schedule(now + arg, "resume" if kind == "pause" else "thaw", member)
        elif kind in ("resume", "thaw") and not process.dead:
            self._trace(f"{process} {'resumes' if kind == 'resume' else 'thaws, clock behind'}")
            process.clock.resume(frozen=kind == "thaw")
            process.running_since = now
            self.changes += 1
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
        elif kind == "tail" and not process.dead:
            assert isinstance(arg, tuple)
            what = arg[0]
            self.report.faults[f"terms tail {what}"] += 1
            self.changes += 1
            if what == "fail":
                process.tail_fails += 1
                self._trace(f"{process}: the next read of its terms tail fails")
            elif what == "stall":
                process.tail_stalled_until = max(process.tail_stalled_until, now + arg[1])
                self._trace(f"{process}: its terms tail stalls for {arg[1]}ms")
            else:
                process.tail_lag_until = now + arg[1]
                process.tail_lag_ms = arg[2]
                self._trace(f"{process}: its terms tail lags {arg[2]}ms for {arg[1]}ms")
        elif kind == "resign" and process.running:
            assert isinstance(arg, tuple)
            role, deregister = arg
            self.report.faults["resign"] += 1
            self.changes += 1
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

    def _random_tail_fault(self) -> None:
        """A fault of one running member's terms tail, a leader's more often than not."""
        rng = self.tail_rng
        running = [p for p in self.processes.values() if p.running]
        if not running:
            return
        leaders = [p for p in running if self._leading(p)]
        process = rng.choice(leaders if leaders and rng.random() < 0.6 else running)
        lease = self.config.lease_ms
        what = rng.choice(("fail", "stall", "lag"))
        if what == "fail":
            arg: tuple[object, ...] = ("fail",)
        elif what == "stall":
            arg = ("stall", round(lease * rng.uniform(0.3, 4)))
        else:
            arg = ("lag", round(lease * rng.uniform(1, 4)), round(lease * rng.uniform(0.1, 1)))
        self._fire("tail", process.member, arg)

    def _crash(self, process: _Process) -> None:
        """The process dies: nothing more reaches the broker, its tasks stop."""
        now = self.clock.now_ms()
        process.dead = True
        process.transport.crash()
        if process.running_since is not None:
            process.stop_running(now)
        else:
            process.stopped_at.append(now)
        if not process.died.done():
            process.died.set_result(None)
        self.changes += 1
        for leadership in process.leaderships:  # its tenures end with it
            self.tenure_ended.setdefault(leadership, (process.ran_ms, now))
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

    def _holders(self, *, but: str) -> _Holders:
        """Who holds each role other than `but` (a tenure not over yet counts)."""
        return tuple((role, tuple(sorted(p.member for p, lead in held if not lead.done.done())))
                     for role, held in sorted(self.leaderships.items()) if role != but)

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
        for process, _runner, lead in self.owners.values():
            if lead.state is not TenureState.LEADING and lead not in self.left_leading:
                self.left_leading[lead] = process.running_ms(now)
        if not self.term_mode:
            self._read_state(now)
        if self.library.balanced:
            self._observe_moves(now)
        if self.term_mode:
            for role in self.config.roles:
                led = self._observe_term(role, now, elapsed)
                if not self.settling:
                    self._account_leader(role, now, elapsed, led)
            self._check_deposed_functions(now)
            return
        for role in self.config.roles:
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

    def _read_state(self, now: int) -> None:
        """Fold what was committed to the state topic since the last step.

        Each step reads before any compaction can remove a record, so
        `state_log` is the topic as written; each lease record is timed on
        its writer's running clock when it was appended (another role's open
        transaction on the partition can hide it from readers for longer).
        """
        for partition in range(self.config.partitions):
            log = self.broker.partition(STATE, partition)
            fresh = []
            for entry in reversed(log.entries):
                if entry.offset < self.state_appended[partition]:
                    break
                fresh.append(entry)
            self.state_appended[partition] = log.next_offset
            for entry in fresh:
                if entry.control or not entry.key or not entry.value:
                    continue
                key = decode_key(entry.key)
                if key.kind == Kind.LEASE and key.role in self.role_folds:
                    writer = self.processes[decode_lease(entry.value).member]
                    self.appended_ms[(partition, entry.offset)] = (writer,
                                                                   writer.running_ms(now))
            read = log.read_committed(self.state_read[partition])
            self.state_read[partition] = max(self.state_read[partition],
                                             read.last_stable_offset)
            for record in read.records:
                self.state_log[partition].append(record)
                key = decode_key(record.key)
                fold = self.role_folds.get(key.role)
                if fold is None:
                    continue
                fold.apply(record)
                if key.kind != Kind.LEASE or not record.value:
                    continue
                lease = decode_lease(record.value)
                token = FencingToken(lease.producer_id, lease.producer_epoch)
                entry = self.log_tenures.get((key.role, token))
                writer, at = self.appended_ms.pop((partition, record.offset))
                if entry is None:
                    self.log_tenures[(key.role, token)] = {
                        "member": lease.member, "process": writer,
                        "tenure": record.offset, "began": at, "renewals": []}
                else:
                    assert isinstance(entry["renewals"], list)
                    entry["renewals"].append(at)

    def _observe_moves(self, now: int) -> None:
        """A rebalancing that hands a role back, with nothing changed since, oscillates.

        Changed: a fault or restart came (`changes`), or another role changed
        hands (a hand-over that an earlier fault began can end after the move
        forth, and leave the members' counts the other way round)."""
        for process in self.processes.values():
            if process.rebalancer is None or not process.rebalancer.moves:
                continue
            moves = process.rebalancer.moves
            last = self.moves_read.get(process)
            start = next((i + 1 for i, move in enumerate(moves) if move is last), 0)
            for move in moves[start:]:
                self.report.faults["rebalancing move"] += 1
                self._trace(f"{process} rebalances {move.role} to {move.taker}")
                before = self.moves_seen.get(move.role)
                others = self._holders(but=move.role)
                if before == (move.taker, move.giver, self.changes, others):
                    self.report.invariant_violations.append(
                        f"{move.role} at t={now - self.start_ms}ms: {move.giver} hands it back "
                        f"to {move.taker}, which handed it over, nothing changed since: "
                        f"{move.reason}")
                self.moves_seen[move.role] = (move.giver, move.taker, self.changes, others)
            self.moves_read[process] = moves[-1]

    def _observe_term(self, role: str, now: int, elapsed: int) -> bool:
        """Term mode's per-step invariants for `role`; whether a running process leads it."""
        at = f"{role} at t={now - self.start_ms}ms"
        view = self._term_view(role)
        self._track_term(role, at, view)
        live = [(p, lead) for p, lead in self.leaderships[role] if not lead.done.done()]
        for process, lead in live:
            assert isinstance(lead, TermLeadership)
            self._check_won_once(role, at, lead._follower.view, f"{process}'s fold")
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
                    self.deposed[lead] = (process, process.running_ms(now))
                    ran = 0
                elif process.running:
                    ran += elapsed
                    if ran > bound >= self.zombie_ms[lead]:
                        self.report.invariant_violations.append(
                            f"{at}: {process} still leads term {_term(lead)} after running "
                            f"{ran}ms since term {view.term} was claimed")
                self.zombie_ms[lead] = ran
        return any(p.running for p, _ in holders)

    def _check_won_once(self, role: str, at: str, view: TermView, whose: str) -> None:
        """No term is won twice: the claim that won the highest term of `view`,
        a member's fold, is the one that won it in the whole log.

        Only the highest term's winner is acted on, so only it is compared: a
        fold begun on the compacted partition may name another winner of a
        lower term (its winning claim settled, a late losing one not yet),
        which no member acts on.
        """
        claim = view.winner(view.term)
        if claim is None:
            return
        first = self._term_view(role).winner(view.term)
        if (first is None or (first.member, first.offset) != (claim.member, claim.offset)) \
                and (role, view.term) not in self.won_twice:
            self.won_twice.add((role, view.term))
            won = "no claim" if first is None else (
                f"{first.member}'s claim at offset {first.offset}")
            self.report.invariant_violations.append(
                f"{at}: term {view.term} was won twice: by {won} in the whole log, and in "
                f"{whose} by {claim.member}'s at offset {claim.offset}")

    def _check_deposed_functions(self, now: int) -> None:
        """A deposed term leader's function ends by its fence deadline, plus the
        runner's bound on stopping it, of its process's running time.

        Every heartbeat that counts toward a term-mode fence deadline was read
        back before the higher claim (a tail reads in order, and reading the
        claim ends the tenure), so it was sent before the claim was written,
        and so was the claim that won the tenure: the deadline falls at most
        lease minus margin after the claim on the process's monotonic clock,
        which runs at least as long as the process does (a pause with the
        clock running counts toward the deadline, not toward running time; a
        frozen one toward neither). At the deadline the tenure ends and the
        runner cancels the function at once, allowing it `stop_timeout` (the
        simulation passes one lease). The clock moves from one wake-up to the
        next and every step is observed, so no slack is needed. A function
        that ignores its cancellation is left running by the runner once that
        bound passes (its writes are dropped by readers): it is not held to it.
        """
        for lead, (process, since) in list(self.deposed.items()):
            copies = [c for c in self.copies_of.get(lead, ()) if c[4] is None]
            if not copies and (lead.done.done() or process.dead):
                del self.deposed[lead]
                continue
            bound = lead.options.lease_ms - lead.options.margin_ms + self.config.lease_ms
            ran = process.running_ms(now) - since
            late = [c for c in copies if c[5] is not True]
            if ran > bound and late:
                del self.deposed[lead]
                self.report.invariant_violations.append(
                    f"{lead.role} at t={now - self.start_ms}ms: the function of {process}'s "
                    f"deposed term {_term(lead)} still runs {ran}ms of running time after a "
                    f"higher term was claimed, past its fence deadline and stop bound "
                    f"({bound}ms)")

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
            if task.done() and not task.cancelled() and task.exception() is not None \
                    and not isinstance(task.exception(), PlantedFault):
                self.report.errors.append(f"{task.get_name()} died: {task.exception()!r}")
        self.clock.advance_ms(self.config.lease_ms + 1000)
        self.broker.expire_transactions()
        await quiesce()

    def _check_lifecycles(self) -> None:
        """Owners of tenures, copies of functions, and (epoch mode) the events' story."""
        report, config = self.report, self.config
        lives = []
        if self.term_mode:
            for (role, token), (process, runner, lead) in self.owners.items():
                lives.append(self._life(role, process.member, lead.tenure, str(token),
                                        process, (process, runner, lead), 0, []))
        for (role, token), entry in self.log_tenures.items():
            process, renewals, member, tenure, began = (
                entry["process"], entry["renewals"], entry["member"], entry["tenure"],
                entry["began"])
            assert isinstance(process, _Process)
            assert isinstance(renewals, list)
            assert isinstance(member, str)
            assert isinstance(tenure, int)
            assert isinstance(began, int)
            lives.append(self._life(role, member, tenure, str(token), process,
                                    self.owners.get((role, token)), began, renewals))
        report.lifecycle_violations += check_tenure_owners(
            lives, round(config.renew * 1000))
        runs = []
        for role, process, lead, started, ended, ignored in self.copies:
            assert isinstance(process, _Process)
            assert isinstance(lead, Leadership)
            assert isinstance(started, int)
            gone = self.tenure_ended.get(lead)
            runs.append(FunctionRun(
                str(role), str(process), lead.tenure, started,
                ended if isinstance(ended, int) else None,
                None if gone is None else gone[1],
                next((at for at in process.stopped_at if at >= started), None),
                ignored is True))
        report.lifecycle_violations += check_function_copies(runs, config.lease_ms)
        if self.term_mode:
            return
        for role in config.roles:
            partition = role_partition(role, config.partitions)
            stories = [LeaseStory(role, lead.member, lead.tenure,
                                  (lead.token.producer_id, lead.token.producer_epoch),
                                  tuple(leases))
                       for lead, leases in self.stories.items()
                       if lead.role == role and isinstance(lead.token, FencingToken)]
            report.lifecycle_violations += check_lease_stories(
                role, partition, self.state_log[partition], stories)

    def _life(self, role: str, member: str, tenure: int, token: str, process: _Process,
              owned: tuple[_Process, LeaderRunner, Leadership] | None, began: int,
              renewals: list[int]) -> TenureLife:
        handed = next((at for (r, t), at in self.handed.items()
                       if r == role and str(t) == token), None)
        if owned is None:
            return TenureLife(role, member, tenure, token, "", began, None, None,
                              process.ran_ms, tuple(renewals), handed)
        owner, runner, lead = owned
        gone = self.tenure_ended.get(lead)
        ends = [at for at in (None if gone is None else gone[0],
                              self.left_leading.get(lead)) if at is not None]
        return TenureLife(role, member, tenure, token, f"{owner}/{role}", began,
                          self.runner_ended.get(runner), min(ends) if ends else None,
                          owner.ran_ms, tuple(renewals), handed)

    def _check_histories(self) -> None:
        self._check_lifecycles()
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
def _quiet_library_logs(planted: bool) -> Iterator[None]:
    """Keep the library's INFO and WARNING lines out of a run (the trace has them),
    and its ERROR lines too when the run plants errors (the library logs them).

    A test runner that captures logs keeps every record until its test ends;
    thousands of runs in one test would keep millions.
    """
    logger = logging.getLogger("krabka")
    level = logger.level
    logger.setLevel(logging.CRITICAL if planted else logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def run_seed(
    seed: int,
    *,
    duration_leases: int = 24,
    fencing: Fencing = "epoch",
    library: Collection[str] = LIBRARY_FAULTS,
    broker_factory: Callable[..., MemoryBroker] = MemoryBroker,
) -> SimReport:
    """Run one seed in a fresh event loop, with the `library` fault kinds it draws."""
    config = SimConfig.from_seed(seed, duration_leases=duration_leases, fencing=fencing,
                                 library=library)
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
    parser.add_argument("--faults", default=",".join(LIBRARY_FAULTS),
                        help="the library fault kinds seeds may draw, comma-separated, or "
                             f"none (default all: {','.join(LIBRARY_FAULTS)})")
    args = parser.parse_args(argv)
    library = [] if args.faults == "none" else [k for k in args.faults.split(",") if k]
    if args.seed is not None:
        report = run_seed(args.seed, duration_leases=args.leases or 12, fencing=args.fencing,
                          library=library)
        print(report.describe(trace_lines=0))
        print("\n".join(report.trace))
        return 0 if report.ok else 1
    began = time.perf_counter()
    reports = []
    for seed in range(args.start, args.start + args.seeds):
        report = run_seed(seed, duration_leases=args.leases or 24, fencing=args.fencing,
                          library=library)
        if report.ok:
            report.trace.clear()  # thousands of traces would fill the memory
        reports.append(report)
    print(f"--seeds {args.seeds} --start {args.start} --leases {args.leases or 24} "
          f"--fencing {args.fencing} --faults {args.faults}")
    print(summarize(reports, time.perf_counter() - began))
    failing = [r for r in reports if not r.ok]
    for report in failing[:3]:
        print(report.describe())
    return 1 if failing else 0


if __name__ == "__main__":
    raise SystemExit(main())
