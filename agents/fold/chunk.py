"""The chunked fold: a fetched chunk of state-topic records folded in one pass (pure).

The fold agent hands the records Faust fetched (up to `agents.fold.agent.FOLD_BATCH`,
of any partitions it owns, each partition's in offset order) to `fold_chunk`,
which says what they cause: each record's events in the chunk's order, each
role's value after the chunk, each partition's count of records no role
owns, and what the agent logs and counts. It stores and sends nothing.

Its outputs are those of folding the chunk record by record with
`agents.fold.rules.fold` from the same table values (the regression test
compares both on a recorded topic), at less cost per record:

- each distinct key of the chunk is decoded and routed once (`route`), and
  the library's fold is handed the decoded key (`RoleFold.apply_key`);
- a role's value is read from the table (and decoded) once per chunk, and
  changed in place by each of its records (`agents.fold.rules.step`) with one
  `RoleFold` per role per chunk, where `fold` copies the value and builds a
  fold for every record;
- the agent writes each role's value once per chunk.

Changing values in place has one cost: a record the pure fold fails on (a
bug; malformed bytes are counted, never raised) may leave its role's value
half changed, and the record must cost only itself. The role's value is then
rebuilt from the table value and the chunk's earlier records of the role, all
of which folded before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agents.events import LeadershipEvent
from agents.fold.partition_value import PartitionValue
from agents.fold.role_value import RoleValue
from agents.fold.rules import Unattributed, role_fold, route, step
from krabka import defaults
from krabka.format.records import Key
from krabka.rules.evaluate import Placement
from krabka.rules.fold import RoleFold
from krabka.rules.state import OutOfOrder, Record, RoleState

__all__ = ["Chunk", "Failure", "LoadPartition", "LoadRole", "Skip", "fold_chunk"]

LoadRole = Callable[[bytes], RoleValue | None]
"""A role's value in the table, decoded afresh at each call (None: no value yet)."""
LoadPartition = Callable[[int], PartitionValue | None]
"""A partition's value in the table, decoded afresh at each call (None: no value yet)."""


@dataclass(frozen=True, slots=True)
class Skip:
    """A record counted as skipped: ``malformed`` (in its role's value) or a
    `agents.fold.partition_value.SkipKind` (in its partition's)."""

    partition: int
    offset: int
    kind: str
    reason: str
    role: str | None


@dataclass(frozen=True, slots=True)
class Failure:
    """A record the pure fold raised on (a bug): skipped, its role's value as before it."""

    partition: int
    offset: int
    error: Exception


@dataclass(slots=True)
class Chunk:
    """What folding a chunk causes; indexes are positions in the chunk."""

    events: list[tuple[int, list[LeadershipEvent]]] = field(default_factory=list)
    """Each record's events (records with none left out), in the chunk's order."""
    values: dict[bytes, tuple[RoleValue, int]] = field(default_factory=dict)
    """Role key -> its value after the chunk and the index of its last record that
    changed it (the write belongs to that record's partition)."""
    partitions: dict[int, tuple[PartitionValue, int]] = field(default_factory=dict)
    """Partition -> its value after the chunk and the index of its last record counted."""
    skips: list[Skip] = field(default_factory=list)
    out_of_order: list[tuple[str, OutOfOrder]] = field(default_factory=list)
    """Each new tenure the worker's placement puts before its slot: (role, what was seen)."""
    failures: list[Failure] = field(default_factory=list)


@dataclass(slots=True)
class _Working:
    """A role's value the chunk owns, and the library's fold changing it."""

    value: RoleValue
    folder: RoleFold


def fold_chunk(
    records: Sequence[tuple[int, Record]], load: LoadRole, load_partition: LoadPartition,
    partitions: int, *, placement: Placement | None = None,
    challenge_stagger: float = defaults.CHALLENGE_STAGGER,
) -> Chunk:
    """Fold `records` ((partition, record) pairs, in the order fetched) from the
    values `load` and `load_partition` read.

    `placement` and `challenge_stagger` are `agents.fold.rules.fold`'s.
    """
    chunk = Chunk()
    routes: dict[tuple[bytes, int], tuple[Key, bytes] | Unattributed] = {}
    working: dict[bytes, _Working] = {}
    counted: dict[int, PartitionValue] = {}
    failed: set[int] = set()
    for index, (partition, record) in enumerate(records):
        routed = routes.get((record.key, partition))
        if routed is None:
            key = route(record, partition, partitions)
            routed = key if isinstance(key, Unattributed) else (key, key.role.encode("utf-8"))
            routes[(record.key, partition)] = routed
        if isinstance(routed, Unattributed):
            try:
                _count(chunk, counted, load_partition, index, partition, record, routed)
            except Exception as exc:
                chunk.failures.append(Failure(partition, record.offset, exc))
            continue
        key, role_key = routed
        work = working.get(role_key)
        try:
            if work is None:
                work = working[role_key] = _load(load, role_key, key.role, partition,
                                                 placement, challenge_stagger)
            value = work.value
            if record.offset <= value.last_offset:
                continue  # a replay
            state = value.state
            skipped, out_of_order = state.skipped, state.out_of_order
            events = step(value, work.folder, key, record)
        except Exception as exc:
            chunk.failures.append(Failure(partition, record.offset, exc))
            failed.add(index)
            if work is not None:
                _rebuild(chunk, working, records, routes, failed, index, load, role_key, key,
                         partition, placement, challenge_stagger)
            continue
        chunk.values[role_key] = (value, index)
        if events:
            chunk.events.append((index, events))
        if state.skipped > skipped:
            chunk.skips.append(Skip(partition, record.offset, "malformed", state.errors[-1][1],
                                    key.role))
        if state.out_of_order > out_of_order:
            assert state.last_out_of_order is not None
            chunk.out_of_order.append((key.role, state.last_out_of_order))
    return chunk


def _load(load: LoadRole, role_key: bytes, role: str, partition: int,
          placement: Placement | None, challenge_stagger: float) -> _Working:
    value = load(role_key)
    if value is None:
        value = RoleValue(RoleState(role), partition)
    elif value.state.role != role:
        raise ValueError(f"a record of role {role!r} folded into {value.state.role!r}")
    return _Working(value, role_fold(value, placement, challenge_stagger))


def _count(chunk: Chunk, counted: dict[int, PartitionValue], load_partition: LoadPartition,
           index: int, partition: int, record: Record, why: Unattributed) -> None:
    """Count a record no role of `partition` owns in the partition's value."""
    value = counted.get(partition)
    if value is None:
        value = counted[partition] = load_partition(partition) or PartitionValue(partition)
    if record.offset <= value.last_offset:
        return  # a replay, already counted
    value.note(why.kind, record.offset, why.reason)
    chunk.partitions[partition] = (value, index)
    chunk.skips.append(Skip(partition, record.offset, why.kind, why.reason, None))


def _rebuild(chunk: Chunk, working: dict[bytes, _Working],
             records: Sequence[tuple[int, Record]],
             routes: dict[tuple[bytes, int], tuple[Key, bytes] | Unattributed],
             failed: set[int], upto: int, load: LoadRole, role_key: bytes, key: Key,
             partition: int, placement: Placement | None, challenge_stagger: float) -> None:
    """Make `role_key`'s value again from the table and the chunk's records of the role
    before `upto` that folded (each did once; their events are already in `chunk`)."""
    work = working[role_key] = _load(load, role_key, key.role, partition, placement,
                                     challenge_stagger)
    value = work.value
    for index in range(upto):
        if index in failed:
            continue
        at, record = records[index]
        routed = routes.get((record.key, at))
        if isinstance(routed, tuple) and routed[1] == role_key and \
                record.offset > value.last_offset:
            step(value, work.folder, routed[0], record)
    if role_key in chunk.values:
        chunk.values[role_key] = (value, chunk.values[role_key][1])
