"""The options of a role's candidate, and the checks of names and options.

Everything here is checked before any I/O: a bad name or option is a
`ValueError` that names the fix.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, get_args

from krabka import defaults
from krabka.format.wire import MAX_STRING_BYTES
from krabka.rules.evaluate import Placement, check_placement, stagger_ms

__all__ = ["FENCINGS", "Fencing", "LeadershipOptions", "check_fencing", "check_name",
           "resolve_options"]

MAX_FENCE_MARGIN = 5.0

Fencing = Literal["epoch", "term"]
FENCINGS: tuple[Fencing, ...] = get_args(Fencing)


def check_fencing(fencing: str) -> Fencing:
    """`fencing` if it names a mode; a `ValueError` naming the choices otherwise."""
    for known in FENCINGS:
        if fencing == known:
            return known
    raise ValueError(f"fencing must be one of {', '.join(map(repr, FENCINGS))}, "
                     f"got {fencing!r}")


@dataclass(frozen=True, slots=True)
class LeadershipOptions:
    """Validated timing and layout of one role's candidate.

    The fence margin is min(5 s, lease/3): a leader stops trusting its lease
    that long before the lease runs out, to cover the delay between a record
    being sent and being written, clock error between members, and the delay
    between the deadline passing and the leader noticing.

    `placement` orders a role's challengers: ``"registration"`` by
    registration offset (the format's rule), ``"balanced"`` by a rendezvous
    hash of role and member, so the roles of a group spread over its members
    (docs/design.md#placement). Every member of a role must use the same.

    `fencing` chooses how a deposed leader is fenced: ``"epoch"`` by the
    broker, through the role's transactional producer; ``"term"`` by the
    readers, from claims on the terms topic (docs/term-mode.md). In term
    mode `lease_duration` is the election timeout (a standby claims after
    that long without a sign of life from the leader) and `renew_interval`
    the heartbeat interval. Every member of a role must use the same
    fencing mode.

    `outputs` are the topics the leader writes to. In term mode they are the
    only topics it may write, and each gets a term barrier before the
    tenure's first record. In epoch mode the broker fences every topic
    through the role's producer, so they are only a hint: the standby first
    in line reads their metadata while it waits, so the first guarded write
    after a takeover does not wait for a Metadata request, and writing to
    another topic still works.

    `allow_compacted_outputs`: in term mode a declared output whose
    ``cleanup.policy`` compacts is refused (`CompactedOutputError`), because
    the cleaner can keep a deposed leader's record of a key in place of the
    current leader's (docs/term-mode.md#compacted-output-topics); True
    accepts that. Epoch mode ignores it: there the broker fences the writes.
    """

    partitions: int = defaults.PARTITIONS
    lease_duration: float = defaults.LEASE_DURATION
    renew_interval: float = defaults.RENEW_INTERVAL
    challenge_stagger: float = defaults.CHALLENGE_STAGGER
    placement: Placement = defaults.PLACEMENT
    fencing: Fencing = defaults.FENCING
    outputs: tuple[str, ...] = ()
    allow_compacted_outputs: bool = False

    def __post_init__(self) -> None:
        check_placement(self.placement)
        check_fencing(self.fencing)
        if isinstance(self.outputs, str):
            raise ValueError(f"outputs must be a collection of topic names, not the string "
                             f"{self.outputs!r}")
        object.__setattr__(self, "outputs", tuple(self.outputs))
        for topic in self.outputs:
            if not isinstance(topic, str) or not topic:
                raise ValueError(f"an output topic must be a non-empty string, got {topic!r}")
        if self.partitions < 1:
            raise ValueError(f"partitions must be at least 1, got {self.partitions}")
        if not self.lease_duration > 0:
            raise ValueError(f"lease_duration must be positive, got {self.lease_duration}")
        if not self.renew_interval > 0:
            raise ValueError(f"renew_interval must be positive, got {self.renew_interval}")
        if self.challenge_stagger < 0:
            raise ValueError(
                f"challenge_stagger must not be negative, got {self.challenge_stagger}"
            )
        limit = self.lease_duration - self.fence_margin
        if not self.renew_interval < limit:
            raise ValueError(
                f"renew_interval ({self.renew_interval} s) must be shorter than lease_duration "
                f"minus the fence margin ({self.lease_duration} - {self.fence_margin:.3f} = "
                f"{limit:.3f} s), or the leader fences itself between renewals"
            )

    @property
    def fence_margin(self) -> float:
        """How long before the lease runs out the leader stops trusting it."""
        return min(MAX_FENCE_MARGIN, self.lease_duration / 3)

    @property
    def lease_ms(self) -> int:
        """The lease duration in milliseconds."""
        return round(self.lease_duration * 1000)

    @property
    def renew_ms(self) -> int:
        """The renew interval in milliseconds."""
        return round(self.renew_interval * 1000)

    @property
    def margin_ms(self) -> int:
        """The fence margin in milliseconds."""
        return round(self.fence_margin * 1000)

    @property
    def stagger_ms(self) -> int:
        """The challenge stagger in milliseconds, rounded half up."""
        return stagger_ms(self.challenge_stagger)


def check_name(kind: str, name: str) -> None:
    """Refuse an empty, unencodable or oversized name (`kind` is "role" or "member")."""
    if not name:
        raise ValueError(f"the {kind} must not be empty")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValueError(f"the {kind} is not encodable as UTF-8: {exc.reason} "
                         f"at position {exc.start}") from None
    if size > MAX_STRING_BYTES:
        raise ValueError(f"the {kind} is {size} UTF-8 bytes, over the limit of 32767")


def resolve_options(
    options: LeadershipOptions | None,
    partitions: int | None,
    lease_duration: float | None,
    renew_interval: float | None,
    challenge_stagger: float | None,
    placement: str | None = None,
    fencing: str | None = None,
    outputs: Iterable[str] | None = None,
    allow_compacted_outputs: bool | None = None,
) -> LeadershipOptions:
    """`options`, or one built from the separate keywords (the defaults for those not given)."""
    given = {name: value for name, value in (
        ("partitions", partitions), ("lease_duration", lease_duration),
        ("renew_interval", renew_interval), ("challenge_stagger", challenge_stagger),
        ("placement", placement), ("fencing", fencing), ("outputs", outputs),
        ("allow_compacted_outputs", allow_compacted_outputs),
    ) if value is not None}
    if options is not None:
        if given:
            raise ValueError(f"pass either options= or {', '.join(sorted(given))}=, not both")
        return options
    return LeadershipOptions(**given)  # type: ignore[arg-type]

