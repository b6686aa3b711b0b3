"""Run a function for as long as this member leads a role.

`LeaderRunner` is the loop every active/standby program needs around
`acquire_leadership`: campaign, run the function while leading, stop it when
the tenure ends, campaign again, back off after failures, and stop cleanly.
It is the only copy of that loop in this project; write your own only if
you need something it cannot do, and keep its order of a clean stop.

That order is the point. On a clean stop (or a step-down, or the function
returning) the function is cancelled **first** and waited for, and only then
is the role resigned: the resignation's lease tombstone is what lets a
successor start, so the old function has stopped before any successor can
see the role free. When the tenure ends on its own (a fence, a lost
producer, the fence deadline) the function is cancelled at once; the broker
has already refused, or will refuse, its guarded writes.

The function starts once the tenure is ready (`Leadership.ready`: in term
mode, once the term's barriers are on every declared output partition), and
a campaign that returns a tenure already past its fence deadline is handed
back unreported, as a failed campaign.

States (`RunnerState`): IDLE until started; CAMPAIGNING while waiting for
the role; LEADING while the function runs; HANDING_OVER while it is being
stopped and the role resigned; AWAITING_FUNCTION while a function that
ignored its cancellation still runs after the hand-over (the runner stands
again only once it has ended, so one process never runs two copies);
BACKING_OFF after a failed or short tenure; STOPPED at the end. An observer
hears of every tenure: elected, renewed (with the renewal's latency),
fenced or resigned, then lost.

A tenure always has an owner. From the moment `acquire_leadership` returns
a `Leadership` to the runner, every way out of the runner (a stop, a
step-down, the function's end, an error, a cancellation of the runner's
task) stops the function first and then resigns; a cancellation of the
runner's task waits for that hand-over and is raised after it. An
observer's or an admission's error is logged and changes nothing
(`krabka.runtime.callbacks`).

The runner campaigns again after what the protocol expects to happen (a
`TransportError`, a fence, a lost epoch, a `StateTopicError` an operator can
fix) and after the function failed. It never retries a bug: a campaign or a
tenure that ended with an error that is not a `CoordinationError` (a
`TypeError` from a transport, a `ValueError` for a bad option), or with an
`InvalidStateError`, stops the runner after the usual hand-over and
deregistration, and `run()` (so the task `start` returned, and `stop()`)
raises that error.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from krabka.acquire import acquire_leadership, check_first
from krabka.clock import Clock, SystemClock
from krabka.epoch.candidate import FirstWrite
from krabka.errors import CoordinationError, InvalidStateError
from krabka.format.partition import role_partition
from krabka.options import LeadershipOptions
from krabka.registration import deregister
from krabka.runtime.callbacks import contained
from krabka.runtime.cancellation import through_cancellation
from krabka.scale.admission import Admission
from krabka.tenure import Leadership
from krabka.transport import Transport

__all__ = ["LeaderRunner", "RoleFunction", "RunnerObserver", "RunnerState", "TenureStop",
           "backoff_delay"]

log = logging.getLogger("krabka.runner")

RoleFunction = Callable[[Leadership], Awaitable[None]]
"""``async def fn(leadership)``: the work only the leader does."""

MAX_BACKOFF = 30.0

# The back-off's exponent stops growing here: 2**32 first intervals is past
# any cap, and a float power that grows with the failures would overflow
# after about a thousand of them (a long enough outage).
_MAX_DOUBLINGS = 32


def backoff_delay(failures: int, first: float, cap: float, rng: random.Random) -> float:
    """Seconds to wait after `failures` (>= 1) failed campaigns or short tenures in a row.

    Exponential with full jitter above a floor: drawn uniformly between
    `first` and ``min(cap, first * 2 ** (failures - 1))``. Full jitter,
    because the runners of one process fail together (a broker outage ends
    every campaign at once) and should not come back in lockstep; drawn
    afresh from the count alone, unlike decorrelated jitter, whose next
    delay depends on the last draw. The floor `first` keeps a role whose
    function fails at once from minting an epoch per loop. Defined for any
    number of failures: the exponent is bounded.
    """
    ceiling = min(cap, first * 2.0 ** min(failures - 1, _MAX_DOUBLINGS))
    return rng.uniform(min(first, ceiling), ceiling)


# The function task each (role, member) last started in this process, until
# it ends. A runner stands for a role only once the function that any runner
# of the same role and member left running has ended (one cancelled while
# its function ignored the cancellation, say), so one process never runs two
# copies of a role's function, whichever runners started them.
_FUNCTIONS: dict[tuple[str, str], asyncio.Task[None]] = {}


def campaigns_again_after(error: BaseException | None) -> bool:
    """Whether the runner campaigns again after `error` ended a campaign or a tenure.

    Yes after a clean end and after the protocol's own outcomes (every
    `CoordinationError`); no after a bug or a misuse (any other error, and
    `InvalidStateError`): retrying cannot help.
    """
    return error is None or (isinstance(error, CoordinationError)
                             and not isinstance(error, InvalidStateError))


class RunnerState(enum.Enum):
    """Where a `LeaderRunner` is."""

    IDLE = "idle"
    CAMPAIGNING = "campaigning"
    LEADING = "leading"
    HANDING_OVER = "handing-over"
    AWAITING_FUNCTION = "awaiting-function"
    BACKING_OFF = "backing-off"
    STOPPED = "stopped"


_TRANSITIONS: dict[RunnerState, frozenset[RunnerState]] = {
    RunnerState.IDLE: frozenset({RunnerState.CAMPAIGNING, RunnerState.AWAITING_FUNCTION,
                                 RunnerState.STOPPED}),
    RunnerState.CAMPAIGNING: frozenset({RunnerState.LEADING, RunnerState.BACKING_OFF,
                                        RunnerState.STOPPED}),
    RunnerState.LEADING: frozenset({RunnerState.HANDING_OVER}),
    RunnerState.HANDING_OVER: frozenset({RunnerState.AWAITING_FUNCTION, RunnerState.CAMPAIGNING,
                                         RunnerState.BACKING_OFF, RunnerState.STOPPED}),
    RunnerState.AWAITING_FUNCTION: frozenset({RunnerState.CAMPAIGNING, RunnerState.BACKING_OFF,
                                              RunnerState.STOPPED}),
    RunnerState.BACKING_OFF: frozenset({RunnerState.CAMPAIGNING, RunnerState.AWAITING_FUNCTION,
                                        RunnerState.STOPPED}),
    RunnerState.STOPPED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class TenureStop:
    """When and why the function last stopped.

    `reason` is one of ``"fenced"`` (the tenure ended on its own: `error`
    says how), ``"stopped"`` (the runner was stopped), ``"stepped-down"``,
    ``"returned"`` or ``"failed"`` (the function returned or raised).
    `at` is wall-clock epoch ms; `fence_deadline` is the tenure's, for display.
    """

    at: int
    reason: str
    token: str
    tenure: int
    fence_deadline: int
    error: str | None


class RunnerObserver:
    """What a runner reports; subclass and override what you need.

    Every method is called from the runner's task and must not block. An
    error one raises is logged and ignored: it ends no tenure and stops no
    runner (`krabka.runtime.callbacks`).
    """

    def elected(self, role: str, leadership: Leadership) -> None:
        """This member leads; the function starts next."""

    def renewed(self, role: str, leadership: Leadership, latency: float) -> None:
        """A lease renewal committed, `latency` seconds after it was sent."""

    def fenced(self, role: str, leadership: Leadership) -> None:
        """The tenure ended on its own (`leadership.err` says why); the function stopped."""

    def resigned(self, role: str, leadership: Leadership) -> None:
        """The runner handed the role back after stopping the function."""

    def campaign_failed(self, role: str, error: BaseException) -> None:
        """A campaign ended with `error` (the runner backs off and campaigns again).

        Not called for an error the runner does not retry: that stops it.
        """

    def lost(self, role: str, leadership: Leadership, stop: TenureStop) -> None:
        """The tenure is over and the function has stopped: the last event of a tenure."""


class LeaderRunner:
    """Runs `fn` on this member whenever it leads `role`, until `stop()`.

    `stop_timeout` bounds each step of stopping (cancelling the function,
    resigning, deregistering). A function that ignores its cancellation
    that long is reported, and the role is resigned without it: the
    resignation's epoch bump fences its guarded writes (in term mode, the
    readers' filter drops them). Until it has ended, neither this runner nor
    any other of the same role and member in this process stands for the
    role (the runner reports it every `stop_timeout`): the role stays vacant
    from this member meanwhile.
    `retry_interval` is the first back-off after a failed campaign or a
    tenure shorter than a lease; the back-off doubles up to `max_backoff`,
    jittered (`backoff_delay`, drawn from `rng`, by default one seeded
    with the role and the member). Every wait is on `clock`'s monotonic
    time, so a `ManualClock` drives the whole runner. Each campaign runs
    with `options`, its placement included, and waits while `admission` is
    closed (`krabka.scale.admission`). With `first` (epoch mode), each
    tenure's first guarded write rides in its first lease's transaction
    (`acquire_leadership`'s ``first``), before the function starts.
    """

    def __init__(
        self,
        transport: Transport,
        role: str,
        member: str,
        fn: RoleFunction,
        *,
        options: LeadershipOptions | None = None,
        clock: Clock | None = None,
        observer: RunnerObserver | None = None,
        stop_timeout: float = 5.0,
        retry_interval: float = 1.0,
        max_backoff: float = MAX_BACKOFF,
        admission: Admission | None = None,
        rng: random.Random | None = None,
        first: FirstWrite | None = None,
    ) -> None:
        self.transport = transport
        self.admission = admission
        self.role = role
        self.member = member
        self.fn = fn
        self.first = first
        self.options = options or LeadershipOptions()
        check_first(first, self.options)
        self.clock: Clock = clock or SystemClock()
        self.observer = observer or RunnerObserver()
        self.stop_timeout = stop_timeout
        self.retry_interval = retry_interval
        self.max_backoff = max_backoff
        # Seeded with the role and the member, so a process's runners draw
        # different back-offs and a run with a ManualClock is reproducible.
        self.rng = rng or random.Random(f"{role}\x00{member}")
        self.leadership: Leadership | None = None
        """The current tenure while LEADING or HANDING_OVER, else None."""
        self.tenures = 0
        self.running = False
        """Whether the function is running now (also after its tenure, if it
        ignores its cancellation)."""
        self.last_stop: TenureStop | None = None
        self._state = RunnerState.IDLE
        self._stop = asyncio.Event()
        self._deregister_on_stop = True
        self._step_down = asyncio.Event()
        self._deregister_on_step_down = False
        self._task: asyncio.Task[None] | None = None
        # Whether this member may be on the role's roster: from the first
        # campaign until a resignation or a deregistration removed it.
        self._may_be_registered = False

    @property
    def state(self) -> RunnerState:
        """The runner's lifecycle state."""
        return self._state

    @property
    def leading(self) -> bool:
        """Whether this member holds the role and may act on it now: LEADING,
        with a tenure that is not over."""
        return (self._state is RunnerState.LEADING and self.leadership is not None
                and not self.leadership.fenced())

    def start(self) -> asyncio.Task[None]:
        """Run the loop in a task of its own until `stop` (idempotent)."""
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name=f"runner {self.role}")
        return self._task

    async def stop(self, *, deregister: bool = True) -> None:
        """Stop the function, resign (or stop campaigning) and end the loop.

        With `deregister` (the default) this member's registration is
        removed too, as a process that leaves for good should; a member
        that will be back soon may keep it. Raises the error that stopped
        the runner before, if one did (see `campaigns_again_after`).
        """
        self._deregister_on_stop = deregister
        self._stop.set()
        if self._task is not None:
            await asyncio.shield(self._task)

    def step_down(self, *, deregister: bool = False) -> None:
        """Hand the current tenure over (function first, then resign), then campaign again.

        Does nothing unless LEADING. The registration is kept unless
        `deregister`; either way this member stands again after every other
        candidate (no failback).
        """
        if self._state is RunnerState.LEADING:
            self._deregister_on_step_down = deregister
            self._step_down.set()

    async def run(self) -> None:
        """The loop itself; `start` runs it in a task."""
        if self._state is not RunnerState.IDLE:
            raise InvalidStateError(f"{self.role}: a runner runs once; make a new one")
        failures = 0
        try:
            while not self._stop.is_set():
                await self._outlive_function()
                if self._stop.is_set():
                    break
                self._move(RunnerState.CAMPAIGNING)
                self._may_be_registered = True
                leadership = await self._campaign()
                if leadership is None:
                    if self._stop.is_set():
                        break
                    failures += 1
                    await self._back_off(failures)
                    continue
                started = self.clock.monotonic_ms()
                stop = await self._lead(leadership)
                if self._stop.is_set():
                    break
                err = leadership.err
                if err is not None and not campaigns_again_after(err):
                    raise err
                if stop.reason == "stepped-down":
                    failures = 0
                    continue
                # A tenure that ended quickly (the function returned or failed
                # at once, or a fence at once) backs off, so a broken role does
                # not mint an epoch per loop; a long tenure starts afresh.
                long = self.clock.monotonic_ms() - started > self.options.lease_ms
                failures = 1 if long else failures + 1
                await self._back_off(failures)
            # Stopped: a campaign, a tenure handed back without deregistering
            # (a fenced one, or a stop that came during its hand-over) or a
            # back-off may have left this member's registration behind.
            if self._may_be_registered and self._deregister_on_stop:
                await self._deregister()
        except Exception as exc:
            if not campaigns_again_after(exc):
                log.error("%s: %s stops the runner: %r cannot be retried", self.role,
                          self.member, exc)
                await self._deregister()
            raise
        finally:
            self._state = RunnerState.STOPPED

    async def _campaign(self) -> Leadership | None:
        """Wait for this member's turn; None when stopped or after a transport error."""
        acquiring = asyncio.ensure_future(acquire_leadership(
            self.transport, self.role, self.member, options=self.options, clock=self.clock,
            admission=self.admission, first=self.first,
        ))
        stopping = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({acquiring, stopping}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            # The runner's task was cancelled: a tenure the campaign won in
            # that instant is handed back before the cancellation goes on.
            await through_cancellation(asyncio.ensure_future(self._abandon(acquiring)))
            raise
        finally:
            stopping.cancel()
        if self._stop.is_set():
            # A tenure won in the same instant as the stop is handed back.
            await through_cancellation(asyncio.ensure_future(self._abandon(acquiring)))
            return None
        leadership = await self._settle_campaign(acquiring)  # done: it does not wait
        if leadership is not None and leadership.fenced():
            # A win whose tenure is already over (its fence deadline passed on
            # the way here) is no tenure to run a function in: handed back,
            # and the runner campaigns again as after a failed campaign.
            log.warning("%s: %s won %s past its fence deadline; handing it back", self.role,
                        self.member, leadership.token)
            await through_cancellation(asyncio.ensure_future(
                self._resign(leadership, deregister=False)))
            return None
        return leadership

    async def _abandon(self, acquiring: asyncio.Future[Leadership]) -> None:
        """Stop the campaign; resign a tenure it won. Run it through a cancellation."""
        won = await self._settle_campaign(acquiring)
        if won is not None:
            await self._resign(won, deregister=self._deregister_on_stop)

    async def _settle_campaign(self, acquiring: asyncio.Future[Leadership]
                               ) -> Leadership | None:
        """Cancel an unfinished campaign and wait for it; its Leadership if it won.

        A campaign can win in the same instant it is cancelled; the tenure it
        returns is resigned by the caller, never dropped.
        """
        if not acquiring.done():
            acquiring.cancel()
            await asyncio.wait({acquiring})
        if acquiring.cancelled():
            return None
        exc = acquiring.exception()
        if exc is None:
            return acquiring.result()
        if not campaigns_again_after(exc):
            raise exc  # a bug or a bad option: retrying cannot help
        log.warning("%s: %s could not stand for the role: %r", self.role, self.member, exc)
        contained(self.role, "the observer's campaign_failed", self.observer.campaign_failed,
                  self.role, exc)
        return None

    async def _lead(self, leadership: Leadership) -> TenureStop:
        """Run the function for one tenure; stop it first, then resign what is left.

        The hand-over runs to its end whatever happens to the runner's task
        meanwhile; a cancellation of that task is raised after it.
        """
        self.leadership = leadership
        self.tenures += 1
        self._step_down.clear()
        self._move(RunnerState.LEADING)

        def renewed(_lease: object, latency: float) -> None:
            self.observer.renewed(self.role, leadership, latency)

        leadership.on_renewed = renewed
        contained(self.role, "the observer's elected", self.observer.elected, self.role,
                  leadership)
        work = asyncio.create_task(self._call(leadership), name=f"{self.role} function")
        key = (self.role, self.member)
        _FUNCTIONS[key] = work

        def ended(task: asyncio.Task[None]) -> None:
            if _FUNCTIONS.get(key) is task:
                del _FUNCTIONS[key]

        work.add_done_callback(ended)
        stopping = asyncio.ensure_future(self._stop.wait())
        stepping = asyncio.ensure_future(self._step_down.wait())
        try:
            waiting: set[asyncio.Future[Any]] = {work, leadership.done, stopping, stepping}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            # The runner's own task was cancelled: still stop in order.
            await through_cancellation(asyncio.ensure_future(self._hand_over(
                leadership, work, "stopped", deregister=self._deregister_on_stop)))
            raise
        finally:
            stopping.cancel()
            stepping.cancel()
        if leadership.done.done():
            reason = "fenced"
        elif self._stop.is_set():
            reason = "stopped"
        elif self._step_down.is_set():
            reason = "stepped-down"
        elif work.cancelled() or work.exception() is not None:
            reason = "failed"
        else:
            reason = "returned"
        deregister = ((reason == "stopped" and self._deregister_on_stop)
                      or (reason == "stepped-down" and self._deregister_on_step_down))
        return await through_cancellation(asyncio.ensure_future(
            self._hand_over(leadership, work, reason, deregister=deregister)))

    async def _hand_over(self, leadership: Leadership, work: asyncio.Task[None], reason: str,
                         *, deregister: bool) -> TenureStop:
        self._move(RunnerState.HANDING_OVER)
        await self._cancel(work)
        # The stop is when the function stopped, not when the resignation
        # (bounded, but slow without a broker) returned.
        error = None if leadership.err is None else str(leadership.err)
        stop = TenureStop(at=self.clock.now_ms(), reason=reason, token=str(leadership.token),
                          tenure=leadership.tenure, fence_deadline=leadership.fence_deadline,
                          error=error)
        self.last_stop = stop
        if reason == "fenced":
            log.warning("%s: %s stopped the role's function: the tenure of %s ended (%s)",
                        self.role, self.member, leadership.token, leadership.err)
            contained(self.role, "the observer's fenced", self.observer.fenced, self.role,
                      leadership)
        # A stop that came while the function was being stopped deregisters too.
        deregister = deregister or (self._stop.is_set() and self._deregister_on_stop)
        # After a fence the tombstone commits only if nobody took over (then a
        # standby need not wait out the lease); the broker refuses it otherwise.
        resigned = await self._resign(leadership, deregister=deregister)
        if reason != "fenced" and resigned:
            contained(self.role, "the observer's resigned", self.observer.resigned, self.role,
                      leadership)
        self.leadership = None
        contained(self.role, "the observer's lost", self.observer.lost, self.role, leadership,
                  stop)
        return stop

    async def _call(self, leadership: Leadership) -> None:
        until = leadership.predecessor_until
        if until is not None and self.clock.now_ms() < until:
            # This tenure fenced one that had just begun; its function stops
            # when its next write or renewal is refused, at the latest at its
            # fence deadline. Two functions must never run at once.
            await self.clock.sleep_until(until)
        # In term mode, once this term's barriers are on every declared output
        # partition: an older term's record then precedes the function's start
        # or is dropped by every TermFilter. At once in epoch mode.
        await leadership.ready()
        self.running = True
        try:
            await self.fn(leadership)
        except asyncio.CancelledError:
            raise
        except Exception:
            if not (self._stop.is_set() or leadership.fenced()):
                log.exception("%s: the role's function failed; resigning", self.role)
            raise
        else:
            log.info("%s: the role's function returned; resigning", self.role)
        finally:
            self.running = False

    async def _cancel(self, work: asyncio.Task[None]) -> None:
        if work.done():
            if not work.cancelled():
                work.exception()  # logged by _call; retrieved so asyncio stays quiet
            return
        work.cancel()
        if not await self._within(work, self.stop_timeout):
            # Still aborting its transaction over a slow link, or ignoring
            # cancellation: either way the resignation's bump fences it, and
            # the runner stands again only once it has ended.
            log.error("%s: the role's function has not stopped %.1f s after it was "
                      "cancelled; the role is resigned without it (its guarded writes are "
                      "fenced) and %s stands again only once it has ended", self.role,
                      self.stop_timeout, self.member)
            work.add_done_callback(self._function_ended_late)
        elif not work.cancelled():
            work.exception()

    def _function_ended_late(self, work: asyncio.Task[None]) -> None:
        error = None if work.cancelled() else work.exception()
        log.warning("%s: the role's function that ignored its cancellation has ended (%r)",
                    self.role, error if error is not None else "cancelled" if work.cancelled()
                    else "returned")

    async def _outlive_function(self) -> None:
        """Wait until the function a runner of this role and member last
        started in this process has ended, reporting it every `stop_timeout`,
        so that the process never runs two copies of it.

        A stop ends the wait: the function is left to end on its own, and
        its end is logged.
        """
        work = _FUNCTIONS.get((self.role, self.member))
        if (work is None or work.done()
                or work.get_loop() is not asyncio.get_running_loop()):
            return
        self._move(RunnerState.AWAITING_FUNCTION)
        stopping = asyncio.ensure_future(self._stop.wait())
        since = self.clock.monotonic_ms()
        try:
            while not work.done() and not stopping.done():
                until = self.clock.monotonic_ms() + round(self.stop_timeout * 1000)
                timer = asyncio.ensure_future(self.clock.sleep_until_monotonic(until))
                try:
                    await asyncio.wait({work, stopping, timer},
                                       return_when=asyncio.FIRST_COMPLETED)
                finally:
                    timer.cancel()
                if not work.done() and not stopping.done():
                    log.error("%s: the role's function still runs %.1f s after its tenure "
                              "was handed over; %s does not stand for the role until it ends",
                              self.role, (self.clock.monotonic_ms() - since) / 1000,
                              self.member)
        finally:
            stopping.cancel()

    async def _resign(self, leadership: Leadership, *, deregister: bool) -> bool:
        """Resign within `stop_timeout` (the hand-back goes on if it takes longer)."""
        resigning = asyncio.ensure_future(leadership.resign(deregister=deregister))
        if not await self._within(resigning, self.stop_timeout):
            resigning.cancel()  # the hand-back itself goes on (Leadership.resign)
            log.warning("%s: %s is still resigning after %.1f s; going on", self.role,
                        self.member, self.stop_timeout)
            return False
        resigning.result()
        if deregister:
            self._may_be_registered = False
        return leadership.err is None

    async def _deregister(self) -> None:
        self._may_be_registered = False
        partition = role_partition(self.role, self.options.partitions)
        appending = asyncio.ensure_future(
            deregister(self.transport, partition, self.role, self.member))
        # Best effort: a dead registration is passed over by the next leader.
        if not await self._within(appending, self.stop_timeout):
            appending.cancel()
            log.warning("%s: %s could not deregister within %.1f s", self.role, self.member,
                        self.stop_timeout)
        elif appending.exception() is not None:
            log.warning("%s: %s could not deregister: %r", self.role, self.member,
                        appending.exception())

    async def _within(self, work: asyncio.Future[Any], seconds: float) -> bool:
        """Wait for `work` at most `seconds` of the clock's monotonic time; True if done."""
        until = self.clock.monotonic_ms() + round(seconds * 1000)
        timer = asyncio.ensure_future(self.clock.sleep_until_monotonic(until))
        try:
            await asyncio.wait({work, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
        return work.done()

    async def _back_off(self, failures: int) -> None:
        self._move(RunnerState.BACKING_OFF)
        delay = backoff_delay(failures, self.retry_interval, self.max_backoff, self.rng)
        until = self.clock.monotonic_ms() + round(delay * 1000)
        sleeping = asyncio.ensure_future(self.clock.sleep_until_monotonic(until))
        stopping = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({sleeping, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeping.cancel()
            stopping.cancel()

    def _move(self, to: RunnerState) -> None:
        if to not in _TRANSITIONS[self._state]:
            raise InvalidStateError(
                f"{self.role}: a runner cannot move from {self._state.value} to {to.value}"
            )
        self._state = to
