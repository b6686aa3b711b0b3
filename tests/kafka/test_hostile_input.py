"""Hostile input: a state topic holding bytes that no member of this library wrote.

Anyone who can write to ``__coordination_state`` (a broken tool, a port with a
bug, a careless operator) can put any bytes there. docs/design.md#the-record-format says what a
reader does with them: a record that fails to decode, an undecodable key and
a registration whose value names another member are skipped, change no state,
and are listed in `RoleState.errors` as ``(offset, reason)`` with the reason
naming the part that failed; a record whose role hashes to another partition
is counted in `RoleState.misplaced`. Everything valid around them still counts.

The integration tests plant one partition with a plain aiokafka producer:
valid registrations and leases (the library's encoders) interleaved with
malformed, impostor, misplaced and oversized records, each planted with the
fate it must meet. The read-only tests share one planted topic; tests that
write (a candidate, a refused member) plant their own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import struct
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from krabka import (
    FormatError,
    Leadership,
    StateTopicError,
    acquire_leadership,
    describe_leadership,
    describe_role_state,
)
from krabka.format.partition import role_partition
from krabka.format.records import (
    Kind,
    Lease,
    Registration,
    decode_key,
    decode_lease,
    decode_registration,
    encode_key,
    encode_lease,
    encode_registration,
    lease_key,
    registration_key,
)
from krabka.format.token import NO_EPOCH
from krabka.kafka import KafkaTransport
from krabka.rules.fold import build_role_state
from krabka.rules.state import Record, RoleState
from tests.support.kafka_io import create_state_and_output_topics
from tests.support.polling import eventually
from tests.support.processes import ROOT

integration = pytest.mark.integration

PARTITIONS = 4
MAX_NAME_BYTES = 32767
"""The longest role or member the format carries: an i16 length of UTF-8 bytes."""
TIMING = {"lease_duration": 3.0, "renew_interval": 1.0, "challenge_stagger": 0.5}
WITHIN = 30.0

VALID = "valid"
"""A record of the role under test that must count."""
NEIGHBOUR = "neighbour"
"""A valid record of another role of the same partition: not the role's business."""
MISPLACED = "misplaced"
"""A valid record of a role that hashes to another partition."""
PARTS = ("key", "registration value", "lease value")
"""The other fates: a record skipped as malformed in that part."""


# ----------------------------------------------------------------- raw bytes


def i16(value: int) -> bytes:
    return struct.pack(">h", value)


def string(raw: bytes) -> bytes:
    """A format string from raw bytes, which need not be UTF-8."""
    return i16(len(raw)) + raw


def raw_key(role: bytes, member: bytes = b"", *, kind: int = 0, version: int = 0) -> bytes:
    """Key bytes built field by field, so any field can be wrong."""
    return i16(version) + i16(kind) + string(role) + string(member)


def with_version(encoded: bytes, version: int) -> bytes:
    """`encoded` (a key or value) with its leading i16 version replaced."""
    return i16(version) + encoded[2:]


def registration(role: str, member: str, at: int) -> tuple[bytes, bytes]:
    return (encode_key(registration_key(role, member)),
            encode_registration(Registration(member, at)))


def lease(role: str, member: str, epoch: int, granted_at: int, deadline: int
          ) -> tuple[bytes, bytes]:
    return (encode_key(lease_key(role)),
            encode_lease(Lease(member, 4242, epoch, granted_at, deadline)))


def huge_name(partition: int) -> str:
    """A role of exactly 32767 UTF-8 bytes, mostly two-byte characters, in `partition`."""
    for i in range(1000):
        name = "é" * 16380 + f"-{i:06d}"
        if role_partition(name, PARTITIONS) == partition:
            assert len(name.encode("utf-8")) == MAX_NAME_BYTES
            return name
    raise AssertionError("no huge name hashes to the partition")


# ------------------------------------------------------------ the planted log


@dataclass(frozen=True)
class Planted:
    """One record written into the role's partition, and the fate it must meet."""

    label: str
    fate: str
    key: bytes
    value: bytes | None
    timestamp: int
    offset: int = -1
    reason: str = ""
    """For a malformed record: a fragment its reported reason must contain."""

    @property
    def record(self) -> Record:
        return Record(self.offset, self.key, self.value, self.timestamp)


@dataclass(frozen=True)
class HostilePartition:
    """A fresh state topic whose `role` partition holds the planted records."""

    bootstrap: str
    topic: str
    role: str
    partition: int
    huge_role: str
    misplaced_role: str
    planted: list[Planted]

    def fated(self, *fates: str) -> list[Planted]:
        return [p for p in self.planted if p.fate in fates]

    def labelled(self, label: str) -> Planted:
        (found,) = [p for p in self.planted if p.label == label]
        return found

    def transport(self) -> KafkaTransport:
        return KafkaTransport(self.bootstrap, topic=self.topic)


def hostile_plan(role: str, partition: int, base: int) -> tuple[str, str, list[Planted]]:
    """The records to plant, in offset order, with timestamps from `base`."""
    huge = huge_name(partition)
    misplaced = next(f"{role}.elsewhere-{i}" for i in range(100)
                     if role_partition(f"{role}.elsewhere-{i}", PARTITIONS) != partition)
    rb = role.encode("utf-8")
    lapsed = base - 60_000  # every lease lapsed long ago: a candidate may challenge at once
    plan: list[tuple[str, str, bytes, bytes | None, str]] = []

    def add(label: str, fate: str, key: bytes, value: bytes | None, reason: str = "") -> None:
        plan.append((label, fate, key, value, reason))

    add("registration of a", VALID, *registration(role, "a", base))
    add("garbage key", "key", b"\xde\xad\xbe\xef" * 3, b"garbage value", "unsupported version")
    add("empty key", "key", b"", b"\x00", "truncated in version at byte 0")
    add("key of version 1 re-registering a", "key",
        with_version(encode_key(registration_key(role, "a")), 1),
        encode_registration(Registration("a", base + 1)), "unsupported version 1")
    add("registration of b", VALID, *registration(role, "b", base))
    add("truncated key registering c", "key",
        encode_key(registration_key(role, "c"))[:-2],
        encode_registration(Registration("c", base)), "truncated in member")
    add("key of unknown kind 7", "key", raw_key(rb, b"a", kind=7),
        encode_registration(Registration("a", base)), "unknown kind 7")
    add("lease of a", VALID, *lease(role, "a", 7, lapsed - 10_000, lapsed - 5_000))
    add("key with trailing bytes", "key", encode_key(lease_key(role)) + b"\x00",
        encode_lease(Lease("mallory", 1, 1, base, base)), "1 trailing bytes")
    add("registration key with an empty member", "key", raw_key(rb, b"", kind=0),
        encode_registration(Registration("", base)), "registration key with an empty member")
    add("lease key naming a member", "key", raw_key(rb, b"mallory", kind=1),
        encode_lease(Lease("mallory", 1, 1, base, base)), "lease key with a non-empty member")
    add("key with an empty role", "key", raw_key(b"", b"a"), b"\x00", "empty role")
    add("truncated registration value of c", "registration value",
        encode_key(registration_key(role, "c")),
        encode_registration(Registration("c", base))[:-3], "truncated in registered_at")
    add("registration of e", VALID, *registration(role, "e", base))
    add("truncated registration value of b", "registration value",
        encode_key(registration_key(role, "b")), b"\x00\x00\x00", "truncated in member length")
    add("registration value of version 1", "registration value",
        encode_key(registration_key(role, "d")),
        with_version(encode_registration(Registration("d", base)), 1), "unsupported version 1")
    add("registration value whose member is not UTF-8", "registration value",
        encode_key(registration_key(role, "d")), i16(0) + string(b"\xc3(") + bytes(8),
        "member is not valid UTF-8")
    add("registration value with a negative member length", "registration value",
        encode_key(registration_key(role, "d")), i16(0) + i16(-1) + bytes(8),
        "negative length -1 for member")
    add("lease of b", VALID, *lease(role, "b", 8, lapsed - 2_000, lapsed - 1_000))
    add("truncated lease value", "lease value", encode_key(lease_key(role)),
        encode_lease(Lease("mallory", 4242, 9, base, base + 10**9))[:-1], "truncated in deadline")
    add("deregistration of e", VALID, encode_key(registration_key(role, "e")), None)
    add("impostor registration under b's key", "registration value",
        encode_key(registration_key(role, "b")), encode_registration(Registration("mallory", base)),
        "names member 'mallory' under the key of 'b'")
    add("renewal of b", VALID, *lease(role, "b", 8, lapsed - 1_000, lapsed))
    add("misplaced registration", MISPLACED, *registration(misplaced, "x", base))
    add("huge neighbour registration", NEIGHBOUR, *registration(huge, "huge-member", base))
    add("role that is not UTF-8", "key",
        raw_key(role.encode("utf-8") + b"\xff\xfe", b"a"), b"anything",
        "role is not valid UTF-8")
    add("role over the length limit", "key",
        i16(0) + i16(0) + i16(40_000 - 65_536) + b"r" * 40_000 + string(b"a"),
        encode_registration(Registration("a", base)), "negative length -25536 for role")
    add("lease value of version 1 naming mallory", "lease value", encode_key(lease_key(role)),
        with_version(encode_lease(Lease("mallory", 4242, 9, base, base + 10**9)), 1),
        "unsupported version 1")
    add("lease value with trailing bytes", "lease value", encode_key(lease_key(role)),
        encode_lease(Lease("mallory", 4242, 9, base, base + 10**9)) + b"\x00",
        "1 trailing bytes")
    add("registration value under a lease key", "lease value", encode_key(lease_key(role)),
        encode_registration(Registration("mallory", base)), "truncated in producer_epoch")
    add("lease value under a registration key", "registration value",
        encode_key(registration_key(role, "b")),
        encode_lease(Lease("b", 4242, 9, base, base + 10**9)), "18 trailing bytes")
    add("registration of f", VALID, *registration(role, "f", base))
    add("deregistration of a member never registered", VALID,
        encode_key(registration_key(role, "g")), b"")
    planted = [Planted(label, fate, key, value, base + i, reason=reason)
               for i, (label, fate, key, value, reason) in enumerate(plan)]
    return huge, misplaced, planted


async def plant_hostile_partition(bootstrap: str) -> HostilePartition:
    """A fresh topic; its role's partition written by a plain producer, record by record."""
    topic, _ = await create_state_and_output_topics(bootstrap, PARTITIONS)
    role = f"test.hostile-{uuid.uuid4().hex[:8]}"
    partition = role_partition(role, PARTITIONS)
    base = int(time.time() * 1000) - 100_000
    huge, misplaced, plan = hostile_plan(role, partition, base)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        planted = []
        for entry in plan:
            sent = await producer.send_and_wait(topic, entry.value, key=entry.key,
                                                partition=partition,
                                                timestamp_ms=entry.timestamp)
            planted.append(dataclasses.replace(entry, offset=sent.offset))
    finally:
        await producer.stop()
    return HostilePartition(bootstrap, topic, role, partition, huge, misplaced, planted)


@pytest.fixture(scope="module")
def hostile(kafka_bootstrap: str) -> HostilePartition:
    """One planted partition shared by the tests that only read it."""
    return asyncio.run(plant_hostile_partition(kafka_bootstrap))


async def read_state(hostile: HostilePartition, role: str | None = None) -> RoleState:
    async with hostile.transport() as transport:
        return await describe_role_state(transport, role or hostile.role, PARTITIONS)


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        ends = await consumer.end_offsets(
            [TopicPartition(topic, p) for p in range(PARTITIONS)])
        return {tp.partition: end for tp, end in ends.items()}
    finally:
        await consumer.stop()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "krabka", *args], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, check=False)


# ------------------------------------------------------- reading the garbage


@integration
async def test_the_roster_and_lease_are_what_the_valid_records_alone_imply(hostile):
    state = await read_state(hostile)
    valid_only = build_role_state(hostile.role, [p.record for p in hostile.fated(VALID)])
    assert state.roster == ["a", "b", "f"]
    assert state.holder == "b"
    assert state.tenure == hostile.labelled("lease of b").offset
    assert state.lease_offset == hostile.labelled("renewal of b").offset
    assert dataclasses.replace(state, errors=[], skipped=0, misplaced=0) == valid_only


@integration
async def test_every_malformed_record_is_listed_with_its_offset_and_the_part_that_failed(
    hostile,
):
    state = await read_state(hostile)
    malformed = hostile.fated(*PARTS)
    assert [offset for offset, _ in state.errors] == [p.offset for p in malformed]
    for (_, reason), planted in zip(state.errors, malformed, strict=True):
        assert reason.startswith(f"malformed {planted.fate}: "), (planted.label, reason)
        assert planted.reason in reason, (planted.label, reason)


@integration
async def test_a_key_whose_role_is_not_utf8_is_skipped_as_an_undecodable_key(hostile):
    state = await read_state(hostile)
    planted = hostile.labelled("role that is not UTF-8")
    assert (planted.offset, "malformed key: role is not valid UTF-8") in state.errors


@integration
async def test_an_impostor_registration_neither_adds_the_impostor_nor_moves_the_member(
    hostile,
):
    state = await read_state(hostile)
    assert "mallory" not in state.roster
    assert state.entry_of("b").offset == hostile.labelled("registration of b").offset


@integration
async def test_a_record_of_a_role_hashing_to_another_partition_is_counted_as_misplaced(
    hostile,
):
    state = await read_state(hostile)
    assert state.misplaced == 1
    misplaced = hostile.labelled("misplaced registration").offset
    assert misplaced not in [offset for offset, _ in state.errors]
    # The misplaced role's own partition does not see the record either.
    assert (await read_state(hostile, hostile.misplaced_role)).roster == []


@integration
async def test_a_neighbour_role_of_32767_bytes_reads_back_intact_beside_the_garbage(hostile):
    state = await read_state(hostile, hostile.huge_role)
    assert role_partition(hostile.huge_role, PARTITIONS) == hostile.partition
    assert state.role == hostile.huge_role
    assert state.roster == ["huge-member"]
    assert state.entry_of("huge-member").offset == (
        hostile.labelled("huge neighbour registration").offset)
    # Only undecodable keys are the neighbour's business: no role can own them.
    assert [offset for offset, _ in state.errors] == [p.offset for p in hostile.fated("key")]
    assert state.misplaced == 1


@integration
async def test_the_planted_partition_reads_back_byte_for_byte(hostile):
    async with hostile.transport() as transport:
        read = await transport.read_partition(hostile.partition)
    assert read.records == [p.record for p in hostile.planted]


# ------------------------------------------------------ living with garbage


@integration
async def test_a_candidate_acquires_a_role_whose_partition_is_full_of_garbage(kafka_bootstrap):
    hostile = await plant_hostile_partition(kafka_bootstrap)
    async with hostile.transport() as transport:
        leadership = await asyncio.wait_for(
            acquire_leadership(transport, hostile.role, "live", partitions=PARTITIONS,
                               **TIMING),
            WITHIN)
        try:
            assert isinstance(leadership, Leadership)
            status = await describe_leadership(transport, hostile.role)
            assert status.authoritative(leadership.token)
            state = await eventually(
                lambda: describe_role_state(transport, hostile.role, PARTITIONS),
                lambda state: state.holder == "live", WITHIN)
            assert state.tenure == leadership.tenure
            assert [offset for offset, _ in state.errors] == [
                p.offset for p in hostile.fated(*PARTS)]
        finally:
            await leadership.resign()


@integration
def test_the_state_command_exits_0_and_lists_every_skipped_record(hostile):
    result = cli("state", hostile.role, "--topic", hostile.topic, "--partitions",
                 str(PARTITIONS), "--bootstrap-servers", hostile.bootstrap)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert [entry["member"] for entry in answer["roster"]] == ["a", "b", "f"]
    assert answer["lease"]["member"] == "b"
    assert answer["misplaced"] == 1
    malformed = hostile.fated(*PARTS)
    assert [skipped["offset"] for skipped in answer["skipped"]] == [p.offset for p in malformed]
    for skipped, planted in zip(answer["skipped"], malformed, strict=True):
        assert skipped["reason"].startswith(f"malformed {planted.fate}: ")


# -------------------------------------------------------------- names, counts


@integration
async def test_a_role_and_member_of_32767_utf8_bytes_each_lead_and_read_back_intact(
    kafka_bootstrap,
):
    topic, _ = await create_state_and_output_topics(kafka_bootstrap, PARTITIONS)
    role = "ж" * 16383 + "r"
    member = "€" * 10922 + "m"
    assert len(role.encode("utf-8")) == len(member.encode("utf-8")) == MAX_NAME_BYTES
    async with KafkaTransport(kafka_bootstrap, topic=topic) as transport:
        leadership = await asyncio.wait_for(
            acquire_leadership(transport, role, member, partitions=PARTITIONS, **TIMING), WITHIN)
        try:
            assert (await describe_leadership(transport, role)).authoritative(leadership.token)
            state = await eventually(lambda: describe_role_state(transport, role, PARTITIONS),
                                     lambda state: state.lease is not None, WITHIN)
            assert state.role == role
            assert state.roster == [member]
            assert state.holder == member
            assert state.tenure == leadership.tenure
            assert state.errors == []
        finally:
            await leadership.resign()


@integration
@pytest.mark.parametrize("configured", [2, 8])
async def test_a_member_configured_with_another_partition_count_is_refused_and_writes_nothing(
    kafka_bootstrap, configured,
):
    hostile = await plant_hostile_partition(kafka_bootstrap)
    before = await end_offsets(kafka_bootstrap, hostile.topic)
    async with hostile.transport() as transport:
        with pytest.raises(StateTopicError) as refused:
            await acquire_leadership(transport, hostile.role, "live", partitions=configured,
                                     **TIMING)
        assert (await describe_leadership(transport, hostile.role)).token == NO_EPOCH
    message = str(refused.value)
    assert f"has {PARTITIONS} partitions" in message
    assert f"configure every member with partitions={PARTITIONS}" in message
    assert await end_offsets(kafka_bootstrap, hostile.topic) == before


@integration
@pytest.mark.parametrize(("role", "member"), [("bad.\udcff", "m"), ("good", "m\ud800")])
async def test_a_name_that_cannot_be_encoded_as_utf8_is_a_value_error_and_writes_nothing(
    kafka_bootstrap, role, member,
):
    topic, _ = await create_state_and_output_topics(kafka_bootstrap, PARTITIONS)
    async with KafkaTransport(kafka_bootstrap, topic=topic) as transport:
        with pytest.raises(ValueError, match="is not encodable as UTF-8: surrogates not allowed"):
            await acquire_leadership(transport, role, member, partitions=PARTITIONS, **TIMING)
    assert set((await end_offsets(kafka_bootstrap, topic)).values()) == {0}


# ----------------------------------------------------- the fold, fuzzed


FUZZ_ROLE = "r"
MEMBERS = ["a", "b", "c"]
TOKENS = [(1000, 0), (1000, 1), (7, 0)]
roles = st.sampled_from([FUZZ_ROLE, FUZZ_ROLE, "s", "ß.role"])  # mostly the role under test
members = st.sampled_from(MEMBERS)
times = st.integers(0, 100_000)

registrations = st.builds(lambda role, member, at: registration(role, member, at),
                          roles, members, times)
deregistrations = st.builds(
    lambda role, member, empty: (encode_key(registration_key(role, member)),
                                 b"" if empty else None),
    roles, members, st.booleans())
leases = st.builds(
    lambda role, member, token, granted, length: (
        encode_key(lease_key(role)),
        encode_lease(Lease(member, token[0], token[1], granted, granted + length))),
    roles, members, st.sampled_from(TOKENS), times, st.integers(0, 50_000))
clears = st.builds(lambda role, empty: (encode_key(lease_key(role)), b"" if empty else None),
                   roles, st.booleans())
valid_pairs = st.one_of(registrations, registrations, leases, leases, deregistrations, clears)


@st.composite
def mutated_pairs(draw: st.DrawFn) -> tuple[bytes, bytes | None]:
    """A valid record with its key or value truncated, bit-flipped or extended."""
    key, value = draw(valid_pairs)
    in_key = value is None or draw(st.booleans())
    data = bytearray(key if in_key else value)
    how = draw(st.sampled_from(["truncate", "flip", "extend"]))
    if how == "truncate" and data:
        del data[draw(st.integers(0, len(data) - 1)):]
    elif how == "flip" and data:
        for index, mask in draw(st.lists(st.tuples(st.integers(0), st.integers(1, 255)),
                                         min_size=1, max_size=4)):
            data[index % len(data)] ^= mask
    else:
        data += draw(st.binary(min_size=1, max_size=8))
    return (bytes(data), value) if in_key else (key, bytes(data))


impostors = st.builds(
    lambda role, member, named: (encode_key(registration_key(role, member)),
                                 encode_registration(Registration(named, 0))),
    roles, members, st.sampled_from(["x", "y"]))
swapped_values = st.builds(
    lambda role, member, kind: (
        encode_key(registration_key(role, member) if kind else lease_key(role)),
        encode_lease(Lease(member, 1, 1, 0, 1)) if kind else
        encode_registration(Registration(member, 0))),
    roles, members, st.booleans())
random_pairs = st.tuples(st.binary(max_size=24), st.one_of(st.none(), st.binary(max_size=24)))

logs = st.lists(
    st.tuples(
        st.one_of(valid_pairs, valid_pairs, valid_pairs, mutated_pairs(), mutated_pairs(),
                  impostors, swapped_values, random_pairs),
        st.integers(1, 3),  # offset gap: control markers and compaction leave holes
        times,              # the record's Kafka timestamp
    ),
    min_size=0,
    max_size=80,
)


def fate_for(role: str, record: Record) -> str:
    """What docs/design.md#the-record-format says `role`'s state makes of `record`.

    VALID (it counts), NEIGHBOUR (another role's), or the part that fails to
    decode (skipped and listed).
    """
    try:
        key = decode_key(record.key)
    except FormatError:
        return "key"
    if key.role != role:
        return NEIGHBOUR
    if not record.value:
        return VALID  # a tombstone
    if key.kind == Kind.REGISTRATION:
        try:
            named = decode_registration(record.value).member
        except FormatError:
            return "registration value"
        return VALID if named == key.member else "registration value"
    try:
        decode_lease(record.value)
    except FormatError:
        return "lease value"
    return VALID


def fields_that_differ(one: RoleState, other: RoleState) -> list[str]:
    """The names of the fields where two states differ: a cheap failure message
    (hypothesis shows the falsifying log; a full diff at every shrink step is slow)."""
    return [field.name for field in dataclasses.fields(RoleState)
            if getattr(one, field.name) != getattr(other, field.name)]


@settings(max_examples=200, deadline=None)
@given(logs)
def test_garbage_among_valid_records_changes_nothing_but_the_error_list(drawn):
    records, offset = [], 0
    for (key, value), gap, timestamp in drawn:
        records.append(Record(offset, key, value, timestamp))
        offset += gap
    fates = [fate_for(FUZZ_ROLE, record) for record in records]

    state = build_role_state(FUZZ_ROLE, records)
    valid_only = build_role_state(
        FUZZ_ROLE, [r for r, fate in zip(records, fates, strict=True) if fate == VALID])

    assert valid_only.errors == []
    assert fields_that_differ(dataclasses.replace(state, errors=[], skipped=0), valid_only) == []
    skipped = [(r.offset, fate) for r, fate in zip(records, fates, strict=True) if fate in PARTS]
    assert [offset for offset, _ in state.errors] == [offset for offset, _ in skipped]
    for (_, reason), (_, part) in zip(state.errors, skipped, strict=True):
        assert reason.startswith(f"malformed {part}: ")
