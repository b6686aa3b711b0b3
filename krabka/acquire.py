"""Taking a role: the one place that chooses between the fencing modes.

`acquire_leadership` checks its arguments before any I/O, then hands the
campaign to the mode's candidate: `krabka.epoch.candidate` (a Kafka
transaction per tenure, fenced by the producer epoch) or
`krabka.term.candidate` (a claim of the next term, fenced by the term in
every record). The two modes share registration, ranking and the
`Leadership` lifecycle, and never import each other: what both need lives
at the package's root.
"""

from __future__ import annotations

from collections.abc import Iterable

from krabka.clock import Clock, SystemClock
from krabka.epoch.candidate import FirstWrite, acquire_epoch_leadership
from krabka.options import Fencing, LeadershipOptions, check_name, resolve_options
from krabka.rules.evaluate import Placement
from krabka.scale.admission import Admission
from krabka.tenure import Leadership
from krabka.term.candidate import acquire_term_leadership
from krabka.transport import Transport

__all__ = ["acquire_leadership", "check_first"]


async def acquire_leadership(
    transport: Transport,
    role: str,
    member: str,
    *,
    options: LeadershipOptions | None = None,
    partitions: int | None = None,
    lease_duration: float | None = None,
    renew_interval: float | None = None,
    challenge_stagger: float | None = None,
    placement: Placement | None = None,
    fencing: Fencing | None = None,
    outputs: Iterable[str] | None = None,
    allow_compacted_outputs: bool | None = None,
    clock: Clock | None = None,
    admission: Admission | None = None,
    first: FirstWrite | None = None,
) -> Leadership:
    """Register `member` for `role`, wait its turn, and take the role.

    In epoch mode (the default) returns an `EpochLeadership` once this
    member has committed the first lease record of its tenure under a
    freshly minted epoch (`krabka.epoch.candidate`); with
    ``fencing="term"`` a `TermLeadership` once its claim of a new term won
    (`krabka.term.candidate`). Timing,
    placement, fencing and the term-mode outputs come from `options` or
    from the separate keywords (defaults: `LeadershipOptions`); every member
    of a role must use the same `placement` and `fencing`. Raises
    `ValueError` before any I/O for a bad name or option, and
    `StateTopicError` for a state or terms topic the protocol cannot run on;
    in term mode `CompactedOutputError` for a compacted declared output,
    unless `allow_compacted_outputs`.

    With an `admission` (`krabka.scale.admission`), a turn that has come
    waits while the admission is closed: the process is too busy to take
    one more role, and the members ranked behind take theirs.

    With `first` (epoch mode only), the tenure's first guarded write rides
    in the transaction of its first lease: each challenge awaits
    ``first(txn)`` after adding the lease record and before the commit, so
    what it sends becomes visible with the lease, and only if the lease
    commits (a challenge that lost aborts them both). It is awaited once per
    challenge, so possibly more than once, and possibly while a superseded
    tenure's function still runs (`Leadership.predecessor_until`): it is to
    add records to `txn` and do nothing the broker cannot fence. An error it
    raises aborts the challenge and is raised here, the epoch handed back.

    Cancel the call to stop waiting. A cancellation or error that arrives
    after the epoch was minted hands it back before it propagates: no lease
    is left live and no producer open, and no `Leadership` exists that
    nobody holds.
    """
    check_name("role", role)
    check_name("member", member)
    options = resolve_options(options, partitions, lease_duration, renew_interval,
                              challenge_stagger, placement, fencing, outputs,
                              allow_compacted_outputs)
    check_first(first, options)
    if options.fencing == "term":
        return await acquire_term_leadership(transport, role, member, options,
                                             clock or SystemClock(), admission)
    return await acquire_epoch_leadership(transport, role, member, options,
                                          clock or SystemClock(), admission, first)


def check_first(first: FirstWrite | None, options: LeadershipOptions) -> None:
    """`ValueError` for a first write where no first lease transaction carries it."""
    if first is not None and options.fencing == "term":
        raise ValueError("a first write rides in the first lease's transaction, which only "
                         "epoch mode has: pass first only with fencing='epoch'")
