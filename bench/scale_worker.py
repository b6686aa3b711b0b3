"""One worker process holding N roles (roles-scale), or one member of a group
standing for N roles (roles-scale-group).

    python -m bench.scale_worker --bootstrap-servers B --state-topic T --roles N ...
    python -m bench.scale_worker ... --group --member group-1 --placement balanced

Raises its RLIMIT_NOFILE soft limit to the hard limit, opens one
`KafkaTransport` (one transactional producer per held role; the registration
producer, the tail consumer, the reader and the admin client are shared).
Lateness is how long after it was due a renewal was written: the previous
grant plus the tenure's jittered interval (`krabka.tenure.renewal_delay_ms`).
Every event is one JSON line on stdout.

Alone (roles-scale): acquires N roles (``--concurrency`` at a time), then
holds them for ``--hold`` seconds while they renew, timing every renewal. A
tenure that ends on its own is resigned, not campaigned for again. With
``--admission LIMIT`` each campaign waits while a `RenewalLatencyAdmission`
is closed (a lease write took longer than LIMIT seconds in the last
``--admission-hold``), and with ``--admission-rate`` admits at most that
many roles a second; once no role was taken for ``--plateau`` seconds
while it was closed, the campaigns still waiting are cancelled and the
worker holds what it has.
Events: ``baseline`` (transport started, nothing held), ``progress`` (every
tenth of N and every ``--progress-every`` seconds, so a stop says where it
was), ``acquired`` (held, failed, the garbage collector's pauses while acquiring,
and with an admission the roles not admitted and how many slow renewals
closed it), ``settled`` (the heap frozen once acquired, `krabka.scale.heap`:
the objects frozen and the pause), ``after-settle`` (with ``--settle-quiet``:
the renewals of that many seconds, timed apart), ``holding``, ``renewals``
(latency and lateness samples, roles still held, and the garbage collector's
pauses in the window: for generations 0, 1 and 2 how many, the longest and
all together, in ms).

In a group (``--group``): a member does not know when the group holds every
role, so the orchestrator drives the phases with SIGUSR1: after
``baseline`` the first signal starts a `LeaderRunner` for every role at once
(as the worker application runs one per hosted role, with its back-off
after a failed campaign or a short tenure; a standby never leads, so a gate
of N at a time would fill with standbys), or ``--start-rate`` a second, and
``progress`` reports this member's live tenures every ``--progress-every``
seconds (the indices of the roles it holds); the second
signal opens the hold window (``holding``); the third closes it with
``renewals``: the samples of the window, each role held at its end with the
instant its tenure began and the tenure (the offset of its first lease:
of two live tenures of a role, the higher superseded the other, which has not
noticed yet), and every tenure that ended (began, ended, why). A member
settles its heap as the worker application does (`krabka.scale.heap`).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from krabka import (
    LeaderRunner,
    Leadership,
    LeadershipOptions,
    RenewalLatencyAdmission,
    RunnerObserver,
    TenureStop,
    acquire_leadership,
)
from krabka.defaults import PARTITIONS
from krabka.format.records import Lease
from krabka.kafka import KafkaTransport
from krabka.rules.evaluate import PLACEMENTS
from krabka.scale.heap import HeapSettler
from krabka.tenure import renewal_delay_ms


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "t": time.time() * 1000, **fields}), flush=True)


class Renewals:
    """Every renewal's latency and lateness while `holding` is set."""

    def __init__(self, member: str, renew: float) -> None:
        self.member = member
        self.renew_ms = round(renew * 1000)
        self.holding = False
        self.latency_ms: list[float] = []
        self.lateness_ms: list[float] = []

    def timer(self, leadership: Leadership) -> Callable[[Any, float], None]:
        """A renewal observer for one tenure: its latency, and its lateness against
        the instant it was due (the previous grant, the first being the tenure's
        first lease, plus the jittered interval)."""
        role = leadership.role
        first = getattr(leadership, "lease", None)  # an epoch tenure's first lease
        previous: list[int] = [] if first is None else [first.granted_at]
        count = [0]

        def renewed(lease: Any, latency: float) -> None:  # a Lease: the bench runs epoch mode
            if self.holding:
                self.latency_ms.append(latency * 1000)
                if previous:
                    due = previous[0] + renewal_delay_ms(role, self.member, count[0],
                                                         self.renew_ms)
                    self.lateness_ms.append(float(lease.granted_at - due))
            previous[:] = [lease.granted_at]
            count[0] += 1

        return renewed


class GcPauses:
    """The garbage collector's collections inside a ``with`` block: for each
    generation, how many, the longest pause and all pauses together (ms).
    Each pause stops the event loop, renewals included."""

    def __init__(self) -> None:
        self._began = 0.0
        self._pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._collected)
        return self

    def __exit__(self, *_exc: object) -> None:
        gc.callbacks.remove(self._collected)

    def _collected(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self._pauses[info["generation"]].append((time.perf_counter() - self._began) * 1000)

    def summary(self) -> dict[str, list[float]]:
        return {str(generation): [len(pauses), round(max(pauses, default=0.0), 1),
                                  round(sum(pauses), 1)]
                for generation, pauses in self._pauses.items()}


async def alone(args: argparse.Namespace, transport: KafkaTransport, renewals: Renewals) -> None:
    gate = asyncio.Semaphore(args.concurrency)
    held: list[Leadership] = []
    failures: list[str] = []
    started = time.monotonic()
    admission = (RenewalLatencyAdmission(args.admission, args.admission_hold,
                                         rate=args.admission_rate or None)
                 if args.admission > 0 else None)
    last_taken = [started]

    def progress() -> None:
        emit("progress", done=len(held) + len(failures), held=len(held), failed=len(failures),
             seconds=time.monotonic() - started)

    resigning: set[asyncio.Future[None]] = set()

    def resign_when_over(leadership: Leadership) -> None:
        """Resign a tenure that ended on its own, as the API asks of every caller
        (the runner does it for the worker application): that releases its
        producer and aborts a transaction the tenure left open, which would
        otherwise hold its partition's stable offset back until the
        coordinator's timeout."""
        def over(_done: object) -> None:
            resignation = asyncio.ensure_future(leadership.resign())
            resigning.add(resignation)
            resignation.add_done_callback(resigning.discard)
        leadership.done.add_done_callback(over)

    async def take(i: int) -> None:
        async with gate:
            try:
                leadership = await take_role(args, transport, i, admission)
                leadership.on_renewed = renewals.timer(leadership)
                resign_when_over(leadership)
                held.append(leadership)
                last_taken[0] = time.monotonic()
            except Exception as exc:
                failures.append(repr(exc)[:300])
            if (len(held) + len(failures)) % max(1, args.roles // 10) == 0:
                progress()

    def plateaued() -> bool:
        """No role taken for `--plateau` seconds while the admission is closed."""
        return (admission is not None and admission.closed
                and time.monotonic() - last_taken[0] > args.plateau)

    ticker = asyncio.create_task(every(args.progress_every, progress))
    # While the held roles grow, freeze the heap as the worker application does,
    # so the collector's full collections do not walk the roles already held
    # again and again (krabka.scale.heap).
    settler = HeapSettler(lambda: frozenset(leadership.role for leadership in held),
                          quiet_ms=round(args.progress_every * 1000))
    settling = asyncio.create_task(settler.run())
    campaigns = [asyncio.create_task(take(i)) for i in range(args.roles)]
    pending: set[asyncio.Task[None]] = set(campaigns)
    try:
        with GcPauses() as acquiring:
            while pending and not plateaued():
                _done, pending = await asyncio.wait(pending, timeout=1.0)
            for campaign in pending:
                campaign.cancel()  # a cancelled campaign leaves no leader (acquire_leadership)
            await asyncio.gather(*campaigns, return_exceptions=True)
    finally:
        ticker.cancel()
        settling.cancel()
    emit("acquired", held=len(held), failed=len(failures), failures=failures[:5],
         gc=acquiring.summary(),
         not_admitted=args.roles - len(held) - len(failures),
         admission_closings=0 if admission is None else admission.closings,
         # After a plateau, until the last role taken, not until the plateau ended.
         seconds=(last_taken[0] if pending else time.monotonic()) - started)
    # The held roles have stopped changing: freeze what is new since the last
    # freeze (the roles only grew), before the hold window, and leave the
    # collector as CPython runs it, so the window measures renewals on a
    # settled heap.
    began = time.perf_counter()
    frozen = settler.step()
    settler.close()
    emit("settled", frozen=frozen, pause_ms=round((time.perf_counter() - began) * 1000, 1))
    if args.settle_quiet > 0:
        # The renewals that came due while the settle stopped the loop are late:
        # timed apart from the window, which measures a settled worker holding.
        renewals.holding = True
        await asyncio.sleep(args.settle_quiet)
        renewals.holding = False
        emit("after-settle", latency_ms=renewals.latency_ms, lateness_ms=renewals.lateness_ms)
        renewals.latency_ms, renewals.lateness_ms = [], []
    renewals.holding = True
    emit("holding")
    with GcPauses() as pauses:
        await asyncio.sleep(args.hold)
    renewals.holding = False
    alive = sum(1 for leadership in held if not leadership.done.done())
    emit("renewals", latency_ms=renewals.latency_ms, lateness_ms=renewals.lateness_ms,
         alive=alive, ended=len(held) - alive, gc=pauses.summary(),
         errors=[repr(leadership.err)[:200] for leadership in held
                 if leadership.done.done()][:5])


async def take_role(args: argparse.Namespace, transport: KafkaTransport, i: int,
                    admission: RenewalLatencyAdmission | None = None) -> Leadership:
    """Campaign for role `i` with the run's options, until this member leads it."""
    return await acquire_leadership(transport, role_name(args, i), args.member,
                                    options=options_of(args), admission=admission)


def role_name(args: argparse.Namespace, i: int) -> str:
    return f"{args.prefix}.{i:05d}"


def options_of(args: argparse.Namespace) -> LeadershipOptions:
    return LeadershipOptions(partitions=args.partitions, lease_duration=args.lease,
                             renew_interval=args.renew, challenge_stagger=args.stagger,
                             placement=args.placement)


async def hold(_leadership: Leadership) -> None:
    """The role's function: nothing to do but hold the role until the runner stops it."""
    await asyncio.Event().wait()


class GroupMember(RunnerObserver):
    """What the runners of one member report: live and ended tenures, failed
    campaigns, and each tenure's renewals timed by `Renewals`."""

    def __init__(self, renewals: Renewals) -> None:
        self.renewals = renewals
        self.live: dict[str, tuple[float, int]] = {}  # role -> (wall-clock ms it began, tenure)
        self.ended: list[list[Any]] = []  # [index, began ms, ended ms, error] of each tenure
        self.failures: list[str] = []
        self._timers: dict[str, Callable[[Lease, float], None]] = {}

    def elected(self, role: str, leadership: Leadership) -> None:
        self.live[role] = (time.time() * 1000, leadership.tenure)
        self._timers[role] = self.renewals.timer(leadership)

    def renewed(self, role: str, leadership: Leadership, latency: float) -> None:
        lease = getattr(leadership, "lease", None)  # the renewal just committed
        if lease is not None:
            self._timers[role](lease, latency)

    def campaign_failed(self, role: str, error: BaseException) -> None:
        self.failures.append(repr(error)[:300])

    def lost(self, role: str, leadership: Leadership, stop: TenureStop) -> None:
        began, _tenure = self.live.pop(role)
        del self._timers[role]
        self.ended.append([index_of(role), began, time.time() * 1000,
                           repr(leadership.err)[:200]])

    def held(self) -> list[int]:
        return sorted(index_of(role) for role in self.live)


def index_of(role: str) -> int:
    return int(role.rsplit(".", 1)[1])


async def member_of_group(args: argparse.Namespace, transport: KafkaTransport,
                          renewals: Renewals) -> None:
    phases: asyncio.Queue[None] = asyncio.Queue()
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, phases.put_nowait, None)
    emit("ready")
    await phases.get()
    member = GroupMember(renewals)
    options = options_of(args)
    started = time.monotonic()

    async def stand(i: int) -> None:
        """Run role `i`'s runner, as the worker application runs one per hosted role."""
        if args.start_rate > 0:
            # A schedule shared by the members (released together): role i at i / rate.
            await asyncio.sleep(i / args.start_rate)
        await LeaderRunner(transport, role_name(args, i), args.member, hold, options=options,
                           observer=member).run()

    def progress() -> None:
        emit("progress", held=len(member.live), held_ids=member.held(),
             ended=len(member.ended), failed=len(member.failures),
             seconds=time.monotonic() - started)

    emit("started")
    candidates = [asyncio.create_task(stand(i)) for i in range(args.roles)]
    ticker = asyncio.create_task(every(args.progress_every, progress))
    settler = asyncio.create_task(HeapSettler(lambda: frozenset(member.live)).run())
    try:
        await phases.get()
        renewals.holding = True
        emit("holding", held=len(member.live))
        await phases.get()
        renewals.holding = False
        emit("renewals", latency_ms=renewals.latency_ms, lateness_ms=renewals.lateness_ms,
             held=[[index_of(role), *member.live[role]] for role in
                   sorted(member.live, key=index_of)],
             ended=member.ended, failed=len(member.failures), failures=member.failures[:5])
    finally:
        ticker.cancel()
        settler.cancel()
        for task in candidates:
            task.cancel()


async def every(seconds: float, call: Callable[[], None]) -> None:
    while True:
        await asyncio.sleep(seconds)
        call()


async def run(args: argparse.Namespace) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    async with KafkaTransport(args.bootstrap_servers, topic=args.state_topic) as transport:
        await transport.check_topic(args.partitions, args.lease)
        renewals = Renewals(args.member, args.renew)
        emit("baseline", nofile=[soft, hard],
             nofile_raised=list(resource.getrlimit(resource.RLIMIT_NOFILE)))
        await asyncio.sleep(1.0)
        if args.group:
            await member_of_group(args, transport, renewals)
        else:
            await alone(args, transport, renewals)
        await asyncio.sleep(3600)  # the orchestrator stops this process by PID


LOOPS = ("asyncio", "uvloop")


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop a worker runs on: None for asyncio's default, or uvloop's.
    The library runs on either unchanged; which one is the process's choice."""
    if name == "uvloop":
        import uvloop  # the bench extra; imported only when asked for

        return uvloop.new_event_loop
    return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap-servers", required=True)
    p.add_argument("--state-topic", required=True)
    p.add_argument("--partitions", type=int, default=PARTITIONS)
    p.add_argument("--roles", type=int, required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--member", default="scale-worker")
    p.add_argument("--placement", choices=PLACEMENTS, default="registration")
    p.add_argument("--group", action="store_true",
                   help="a member of a group: phases driven by SIGUSR1 (see the module doc)")
    p.add_argument("--lease", type=float, default=30.0)
    p.add_argument("--renew", type=float, default=10.0)
    p.add_argument("--stagger", type=float, default=5.0)
    p.add_argument("--hold", type=float, default=40.0)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--admission", type=float, default=0.0,
                   help="alone: hold campaigns while a renewal took longer than this many "
                        "seconds (0: no admission)")
    p.add_argument("--admission-hold", type=float, default=10.0,
                   help="how long one slow renewal keeps the admission closed (s)")
    p.add_argument("--admission-rate", type=float, default=0.0,
                   help="with --admission: take at most this many roles a second (0: no cap)")
    p.add_argument("--plateau", type=float, default=60.0,
                   help="alone, with an admission: stop campaigning once no role was taken "
                        "for this long while the admission was closed (s)")
    p.add_argument("--settle-quiet", type=float, default=0.0,
                   help="alone: time the renewals of this many seconds after the settle "
                        "apart (the after-settle event), then open the hold window")
    p.add_argument("--loop", choices=LOOPS, default="asyncio",
                   help="the event loop: asyncio's own, or uvloop (the bench extra)")
    p.add_argument("--progress-every", type=float, default=5.0)
    p.add_argument("--start-rate", type=float, default=0.0,
                   help="in a group: start this many candidates a second (0: all at once)")
    args = p.parse_args()
    with asyncio.Runner(loop_factory=loop_factory(args.loop)) as runner:
        runner.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
