"""The records of term mode: claims, heartbeats, barriers and the term header.

Term mode (docs/term-mode.md) elects through the log itself, for
Kafka-compatible services without transactions. Its claims and heartbeats
live on their own compacted topic, ``__coordination_terms``, in the partition
`role_partition` gives (the state topic's rule), so the frozen state format
never meets a record it cannot decode. Barriers and the term header travel on
the leader's own output topics. The format is versioned (version 0) and has
golden vectors in ``tests/unit/vectors/terms.json``; the layouts are in
docs/term-mode.md#the-record-layouts:

    term key:        i16 version=0 | i16 kind | string role | string member | i64 term
                     kind 2 claim: member and term >= 1 name the claimant and its term
                     kind 3 heartbeat: member "" and term 0 (one key per role)
                     kind 4 barrier: member and term >= 1 name the leader and its term
    claim value:     i16 version=0 | string member | i64 term | i64 claimed_at
    heartbeat value: i16 version=0 | string member | i64 term | i64 sent_at | i16 resigned
    barrier value:   i16 version=0 | string member | i64 term | i64 written_at
    term header:     i16 version=0 | string role | i64 term | i16 barrier

A claim's key is unique to (role, term, claimant), so compaction never
removes a claim and a role's highest term survives any idle spell; a
heartbeat's key names the role only, so compaction keeps its latest; a
barrier's key is unique to (role, term, leader), so a compacted output topic
keeps every term's barrier. The kinds continue the state format's (0 and 1),
so a key on the wrong topic fails either decoder as an unknown kind or by its
length. A flag is an i16 that is exactly 0 or 1.

The encoding rules are `krabka.format.wire`'s, shared with the state format;
decoders are strict and raise only `FormatError`, encoders check widths only
and raise `ValueError`. The types and codecs are exported from `krabka`
because other implementations and tools (a reader that decodes barriers, a
dashboard that shows claims) need them, as they need the state records'.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from krabka.errors import FormatError
from krabka.format.wire import Reader, Writer

__all__ = [
    "TERM_FORMAT_VERSION",
    "TERM_HEADER",
    "Barrier",
    "Claim",
    "Heartbeat",
    "TermKey",
    "TermKind",
    "TermStamp",
    "barrier_key",
    "claim_key",
    "decode_barrier",
    "decode_claim",
    "decode_heartbeat",
    "decode_term_header",
    "decode_term_key",
    "encode_barrier",
    "encode_claim",
    "encode_heartbeat",
    "encode_term_header",
    "encode_term_key",
    "heartbeat_key",
    "term_role_of",
]

TERM_FORMAT_VERSION: Final = 0

TERM_HEADER: Final = "krabka.term"
"""The name of the header that stamps a record with its writer's role and term."""


class TermKind(IntEnum):
    """What a term key describes; the numbers follow the state format's kinds."""

    CLAIM = 2
    HEARTBEAT = 3
    BARRIER = 4


@dataclass(frozen=True, slots=True)
class TermKey:
    """The key of a term record: a claim, a role's heartbeat, or a barrier."""

    role: str
    member: str
    term: int
    kind: int


def claim_key(role: str, member: str, term: int) -> TermKey:
    """The key of `member`'s claim of `term` for `role`: one per (role, term, claimant)."""
    return TermKey(role, member, term, TermKind.CLAIM)


def heartbeat_key(role: str) -> TermKey:
    """The key of `role`'s heartbeats; it names no member and no term."""
    return TermKey(role, "", 0, TermKind.HEARTBEAT)


def barrier_key(role: str, member: str, term: int) -> TermKey:
    """The key of the barrier that `member`, leading `role` in `term`, writes to a partition."""
    return TermKey(role, member, term, TermKind.BARRIER)


@dataclass(frozen=True, slots=True)
class Claim:
    """`member` claims `term`; the first claim of a term in offset order wins it.

    `claimed_at` is the claimant's wall clock in epoch milliseconds, for
    people reading the log; no rule reads it.
    """

    member: str
    term: int
    claimed_at: int


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The leader of `term` is still there; with `resigned`, it has stepped down.

    `sent_at` is the leader's wall clock in epoch milliseconds, for people; a
    follower's election timeout runs on its own monotonic clock from when it
    read the heartbeat.
    """

    member: str
    term: int
    sent_at: int
    resigned: bool = False


@dataclass(frozen=True, slots=True)
class Barrier:
    """The value of the barrier `member` writes to a partition before its data of `term`."""

    member: str
    term: int
    written_at: int


@dataclass(frozen=True, slots=True)
class TermStamp:
    """The term header's content: the role and term a record was written under.

    `barrier` marks a barrier record, which carries no user data.
    """

    role: str
    term: int
    barrier: bool = False


def encode_term_key(key: TermKey) -> bytes:
    """The bytes of `key`; raises `ValueError` for a value out of its width."""
    return (
        Writer()
        .i16(TERM_FORMAT_VERSION, "version")
        .i16(int(key.kind), "kind")
        .string(key.role, "role")
        .string(key.member, "member")
        .i64(key.term, "term")
        .done()
    )


def decode_term_key(data: bytes) -> TermKey:
    """The key in `data`; raises `FormatError` with part ``"term key"``."""
    reader = Reader(data, "term key")
    reader.version(TERM_FORMAT_VERSION)
    raw_kind = reader.i16("kind")
    role = reader.string("role")
    member = reader.string("member")
    term = reader.i64("term")
    reader.end()
    try:
        kind = TermKind(raw_kind)
    except ValueError:
        raise reader.fail(f"unknown kind {raw_kind}") from None
    if not role:
        raise reader.fail("empty role")
    if kind is TermKind.HEARTBEAT:
        if member:
            raise reader.fail("heartbeat key with a non-empty member")
        if term != 0:
            raise reader.fail(f"heartbeat key with term {term}, not 0")
    else:
        if not member:
            raise reader.fail(f"{kind.name.lower()} key with an empty member")
        if term < 1:
            raise reader.fail(f"{kind.name.lower()} key with term {term}, below 1")
    return TermKey(role, member, term, kind)


def term_role_of(key: bytes) -> str | None:
    """The role a term key names, or None for a key that does not decode (a
    term fold cannot attribute it, so every role's fold lists it as an error)."""
    try:
        return decode_term_key(key).role
    except FormatError:
        return None


def encode_claim(claim: Claim) -> bytes:
    """The value bytes of `claim`."""
    return (
        Writer()
        .i16(TERM_FORMAT_VERSION, "version")
        .string(claim.member, "member")
        .i64(claim.term, "term")
        .i64(claim.claimed_at, "claimed_at")
        .done()
    )


def decode_claim(data: bytes) -> Claim:
    """The claim in `data`; raises `FormatError` with part ``"claim value"``."""
    reader = Reader(data, "claim value")
    reader.version(TERM_FORMAT_VERSION)
    member = reader.string("member")
    term = reader.i64("term")
    claimed_at = reader.i64("claimed_at")
    reader.end()
    return Claim(member, term, claimed_at)


def encode_heartbeat(heartbeat: Heartbeat) -> bytes:
    """The value bytes of `heartbeat`."""
    return (
        Writer()
        .i16(TERM_FORMAT_VERSION, "version")
        .string(heartbeat.member, "member")
        .i64(heartbeat.term, "term")
        .i64(heartbeat.sent_at, "sent_at")
        .flag(heartbeat.resigned, "resigned")
        .done()
    )


def decode_heartbeat(data: bytes) -> Heartbeat:
    """The heartbeat in `data`; raises `FormatError` with part ``"heartbeat value"``."""
    reader = Reader(data, "heartbeat value")
    reader.version(TERM_FORMAT_VERSION)
    member = reader.string("member")
    term = reader.i64("term")
    sent_at = reader.i64("sent_at")
    resigned = reader.flag("resigned")
    reader.end()
    return Heartbeat(member, term, sent_at, resigned)


def encode_barrier(barrier: Barrier) -> bytes:
    """The value bytes of `barrier`."""
    return (
        Writer()
        .i16(TERM_FORMAT_VERSION, "version")
        .string(barrier.member, "member")
        .i64(barrier.term, "term")
        .i64(barrier.written_at, "written_at")
        .done()
    )


def decode_barrier(data: bytes) -> Barrier:
    """The barrier in `data`; raises `FormatError` with part ``"barrier value"``."""
    reader = Reader(data, "barrier value")
    reader.version(TERM_FORMAT_VERSION)
    member = reader.string("member")
    term = reader.i64("term")
    written_at = reader.i64("written_at")
    reader.end()
    return Barrier(member, term, written_at)


def encode_term_header(stamp: TermStamp) -> bytes:
    """The value of the `TERM_HEADER` header for `stamp`."""
    return (
        Writer()
        .i16(TERM_FORMAT_VERSION, "version")
        .string(stamp.role, "role")
        .i64(stamp.term, "term")
        .flag(stamp.barrier, "barrier")
        .done()
    )


def decode_term_header(data: bytes) -> TermStamp:
    """The stamp in a `TERM_HEADER` value; raises `FormatError` with part ``"term header"``.

    Stricter than the values: an empty role or a term below 1 is rejected,
    since a reader drops by the header alone and must never compare against
    a term no leader could hold.
    """
    reader = Reader(data, "term header")
    reader.version(TERM_FORMAT_VERSION)
    role = reader.string("role")
    term = reader.i64("term")
    barrier = reader.flag("barrier")
    reader.end()
    if not role:
        raise reader.fail("empty role")
    if term < 1:
        raise reader.fail(f"term {term}, below 1")
    return TermStamp(role, term, barrier)
