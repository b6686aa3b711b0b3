"""A command run as a child process that dies with its parent and stops by deadline.

`Child.start` runs a command in a process group of its own (a new session)
with Linux's parent-death signal set to SIGKILL, so that if the process
that started it dies without stopping it (SIGKILL, the OOM killer) the
kernel kills the child at once. The parent-death signal belongs to the
direct child only: processes the command starts in turn do not inherit it
(`prctl(2)`); they are reached by the process-group signals of a clean stop.

`Child.stop` ends the whole group: SIGTERM, then SIGKILL at the kill time
its caller gives (a function of the clock, read again each time the wait
wakes, so a later deadline is honoured and an earlier one never missed),
then it waits until the direct child is reaped. Members of the group that
outlive the direct child get the same SIGKILL at the kill time.

The parent-death signal fires when the *thread* that forked the child
ends, not the process, so a child must be started from a thread that
lives as long as the process: the main thread, where ``asyncio.run``
runs the event loop (Python 3.11's asyncio starts a subprocess from the
loop's thread).

States (`ChildState`): RUNNING once started; TERMINATING after the group's
SIGTERM; KILLING after its SIGKILL; EXITED once the direct child is reaped.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import enum
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence

from krabka.clock import Clock
from krabka.errors import ConfigurationError, InvalidStateError

__all__ = ["GROUP_POLL_MS", "Child", "ChildState", "exit_status"]

_PR_SET_PDEATHSIG = 1

GROUP_POLL_MS = 20
"""How often a stop looks whether the group's other members have ended
after the direct child was reaped (they are not this process's children,
so there is nothing to wait on)."""


class ChildState(enum.Enum):
    """Where a `Child` is."""

    RUNNING = "running"
    TERMINATING = "terminating"
    KILLING = "killing"
    EXITED = "exited"


_TRANSITIONS: dict[ChildState, frozenset[ChildState]] = {
    ChildState.RUNNING: frozenset({ChildState.TERMINATING, ChildState.KILLING,
                                   ChildState.EXITED}),
    ChildState.TERMINATING: frozenset({ChildState.KILLING, ChildState.EXITED}),
    ChildState.KILLING: frozenset({ChildState.EXITED}),
    ChildState.EXITED: frozenset(),
}


def exit_status(returncode: int) -> int:
    """A reaped child's status as a shell reports it: its exit code, or 128 + N
    when signal N ended it."""
    return 128 - returncode if returncode < 0 else returncode


def _prctl() -> Callable[..., int]:
    """libc's prctl, looked up before any fork: the forked child only calls it."""
    if not sys.platform.startswith("linux"):
        raise ConfigurationError("running a command needs Linux's parent-death signal "
                                 f"(prctl PR_SET_PDEATHSIG); this is {sys.platform}")
    prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    return prctl


def _die_with(parent: int, prctl: Callable[..., int]) -> Callable[[], None]:
    """The child's last step before exec: SIGKILL when the forking thread ends."""
    def preexec() -> None:
        if prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        # The parent may have died between the fork and the prctl: then no
        # signal will ever come, and the child must not run on.
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
    return preexec


class Child:
    """One running command, the leader of its own process group."""

    def __init__(self, process: asyncio.subprocess.Process, clock: Clock) -> None:
        self.process = process
        self.pid = process.pid
        self._clock = clock
        self._state = ChildState.RUNNING
        self._exited = asyncio.ensure_future(process.wait())

    @classmethod
    async def start(cls, argv: Sequence[str], env: Mapping[str, str], clock: Clock) -> Child:
        """Start `argv` with `env`, stdin, stdout and stderr passed through.

        Raises `OSError` (`FileNotFoundError`, `PermissionError`) when the
        command cannot be executed.
        """
        prctl = _prctl()
        process = await asyncio.create_subprocess_exec(
            *argv, env=dict(env), start_new_session=True,
            preexec_fn=_die_with(os.getpid(), prctl))
        return cls(process, clock)

    @property
    def state(self) -> ChildState:
        """The child's lifecycle state."""
        return self._state

    @property
    def exited(self) -> asyncio.Future[int]:
        """Completes with the direct child's return code once it is reaped (shielded)."""
        return asyncio.shield(self._exited)

    async def wait(self) -> int:
        """The direct child's return code, once it has ended by itself or been stopped."""
        code = await asyncio.shield(self._exited)
        self._reaped()
        return code

    async def stop(self, kill_at: Callable[[], int]) -> int:
        """End the child's process group; the direct child's return code.

        SIGTERM to the group now, SIGKILL to it once the clock's monotonic
        time reaches ``kill_at()``, and return once the direct child is
        reaped. Also for a child that has already exited: its group's
        remaining members get the same treatment.
        """
        if self._state is ChildState.RUNNING:
            self._signal(signal.SIGTERM, ChildState.TERMINATING)
        while not self._exited.done():
            at = kill_at()
            if self._clock.monotonic_ms() >= at:
                break
            timer = asyncio.ensure_future(self._clock.sleep_until_monotonic(at))
            try:
                await asyncio.wait({self._exited, timer}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                timer.cancel()
        if not self._exited.done():
            self._signal(signal.SIGKILL, ChildState.KILLING)
        code = await asyncio.shield(self._exited)
        self._reaped()
        await self._end_group(kill_at)
        return code

    async def _end_group(self, kill_at: Callable[[], int]) -> None:
        """Wait for the group's other members until the kill time, then SIGKILL them."""
        self._killpg(signal.SIGTERM)
        while self._group_alive() and self._clock.monotonic_ms() < kill_at():
            await self._clock.sleep_until_monotonic(
                min(kill_at(), self._clock.monotonic_ms() + GROUP_POLL_MS))
        self._killpg(signal.SIGKILL)

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def _killpg(self, signum: int) -> None:
        # The group is gone once its last member is: nothing left to signal.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    def _signal(self, signum: int, to: ChildState) -> None:
        self._move(to)
        self._killpg(signum)

    def _reaped(self) -> None:
        if self._state is not ChildState.EXITED:
            self._move(ChildState.EXITED)

    def _move(self, to: ChildState) -> None:
        if to not in _TRANSITIONS[self._state]:
            raise InvalidStateError(
                f"child {self.pid}: cannot move from {self._state.value} to {to.value}")
        self._state = to
