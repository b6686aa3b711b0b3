"""A `TermFilter`'s marks in a consumer group's committed offsets.

A reader of a term-mode leader's outputs must keep its marks across restarts,
or it would accept a zombie's record it dropped before
(docs/term-mode.md#saved-marks). Kafka already stores one string with every
committed offset, the offset-commit metadata, and commits a partition's
offset and metadata in one OffsetCommit: so the marks saved there resume
exactly where the offset does, with no second store to keep in step.

- `commit_marks` commits offsets with each partition's marks
  (``TermFilter.save_text``) through the consumer's own public
  ``commit({tp: (offset, metadata)})``. Kafka refuses metadata longer than
  the broker's ``offset.metadata.max.bytes`` (4096 by default); every
  partition's text is checked against `max_bytes` before anything is
  committed, and a broker that still refuses it (a lower setting) gives the
  same `MarksTooLargeError`, never a silent commit without the marks.
- `resume` puts a consumer and its filter back where the group stands: a
  committed offset with marks resumes there with them; a partition with no
  committed offset starts at its end, seeded with each role's highest term
  from the terms topic (`krabka.term.seed`); a committed offset
  without marks (committed by a reader that did not save them) resumes
  there, seeded the same way, because a reader mid-log with no marks cannot
  tell a zombie's record from a current one and the filter fails closed.
  A committed offset below the partition's log start (retention or
  DeleteRecords removed the records after it) resumes at the log start,
  with its saved marks if any and seeded too: a barrier of a newer term may
  have been among the removed records, and without it the marks are stale.
  The committed metadata is read with the public
  ``AIOKafkaAdminClient.list_consumer_group_offsets`` (the consumer's own
  ``committed()`` returns the offset only).

The consumer and the admin client are the caller's (aiokafka's classes,
configured like any other client of the cluster); nothing here reaches
into their internals. A failure of Kafka is a `KafkaTransportError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

from aiokafka import TopicPartition  # type: ignore[import-untyped, unused-ignore]
from aiokafka import errors as _errors  # type: ignore[import-untyped, unused-ignore]

from krabka.errors import FormatError
from krabka.kafka.errors import KafkaTransportError, MarksTooLargeError, is_outage
from krabka.kafka.transport import KafkaTransport
from krabka.term.filter import TermFilter
from krabka.term.seed import highest_terms

__all__ = [
    "OFFSET_METADATA_MAX_BYTES",
    "Resumed",
    "StartKind",
    "commit_marks",
    "marks_metadata",
    "resume",
]

OFFSET_METADATA_MAX_BYTES: Final = 4096
"""The broker's default ``offset.metadata.max.bytes``: the longest metadata it stores."""

T = TypeVar("T")

RETRY_BACKOFF_S: Final = 0.1
"""The first pause before asking the group coordinator again; it doubles up to 1 s."""

StartKind = Literal["restored", "end", "seeded", "truncated"]
"""restored: the committed offset, with its saved marks; end: no committed
offset, so the partition's end, seeded; seeded: a committed offset without
saved marks, resumed there and seeded (the filter fails closed); truncated: a
committed offset below the partition's log start, resumed at the log start
with its saved marks (if any) and seeded (the filter fails closed)."""


@dataclass(frozen=True, slots=True)
class Resumed:
    """Where `resume` put one partition: the offset it reads next, and how."""

    offset: int
    kind: StartKind


def marks_metadata(term_filter: TermFilter, topic: str, partition: int, *,
                   max_bytes: int = OFFSET_METADATA_MAX_BYTES) -> str:
    """The partition's marks as offset-commit metadata; `MarksTooLargeError` above `max_bytes`.

    The text is base64, one byte per character, as the broker counts it.
    """
    text = term_filter.save_text(topic, partition)
    if len(text) > max_bytes:
        raise MarksTooLargeError(
            f"the term marks of {topic} partition {partition} take {len(text)} bytes of "
            f"offset-commit metadata, over the limit of {max_bytes} (the broker's "
            "offset.metadata.max.bytes): seed only the roles that write this topic, or "
            "raise the broker setting and pass it as max_bytes")
    return text


async def commit_marks(consumer: Any, term_filter: TermFilter,
                       offsets: Mapping[TopicPartition, int], *,
                       max_bytes: int = OFFSET_METADATA_MAX_BYTES) -> None:
    """Commit `offsets` (the next offset to read, per partition) with each partition's marks.

    The marks must be the filter's after it was handed every record below
    the partition's offset, and none at or above it. Every partition's
    metadata is checked before anything is sent.
    """
    commit = {tp: (offset, marks_metadata(term_filter, tp.topic, tp.partition,
                                          max_bytes=max_bytes))
              for tp, offset in offsets.items()}
    if not commit:
        return
    try:
        await _kafka(consumer.commit(commit), "committing offsets with term marks")
    except KafkaTransportError as exc:
        if not isinstance(exc.__cause__, _errors.OffsetMetadataTooLargeError):
            raise
        longest = max(len(text) for _, text in commit.values())
        raise MarksTooLargeError(
            f"the broker refused term marks of up to {longest} bytes as offset-commit "
            "metadata (its offset.metadata.max.bytes is lower): seed only the roles that "
            "write this topic, or raise the broker setting and pass it as max_bytes"
        ) from exc.__cause__


async def resume(
    consumer: Any,
    admin: Any,
    group_id: str,
    term_filter: TermFilter,
    terms: KafkaTransport,
    partitions: Collection[TopicPartition],
    roles: Iterable[str] | None = None,
    *,
    coordinator_wait: float = 30.0,
) -> dict[TopicPartition, Resumed]:
    """Seek `consumer` on `partitions` and put `term_filter`'s marks where the group left them.

    `consumer` must have `partitions` assigned; `admin` is an
    ``AIOKafkaAdminClient`` of the same cluster. `terms` reads the leaders'
    terms topic (`KafkaTransport.terms_topic`), whose partition count is
    the state topic's (every leader checks that). `roles`: the roles whose terms
    seed a partition without saved marks or whose committed offset is below
    its log start (None: every role of the terms topic; naming the writers
    of the topic keeps the saved marks small). Every position is fixed
    before the terms topic is read, so a barrier below a start position
    always has its claim in what the seed reads. Give `consumer`
    ``auto_offset_reset="earliest"``: a log start that passes a position
    later then moves the reader to the new start, whose removed barriers the
    seed covers, rather than past records nobody judged.
    The committed offsets are asked for again while the group coordinator
    answers with a retriable error (a cluster's first group waits for
    ``__consumer_offsets`` to be created), for up to `coordinator_wait` seconds.
    """
    wanted = sorted(set(partitions), key=lambda tp: (tp.topic, tp.partition))
    committed = await _retrying(
        lambda: admin.list_consumer_group_offsets(group_id, partitions=wanted),
        f"reading the committed offsets of group {group_id!r}", coordinator_wait)
    kinds: dict[TopicPartition, StartKind] = {}
    resuming = [tp for tp in wanted
                if (saved := committed.get(tp)) is not None and saved.offset >= 0]
    # Fetched after the committed offsets: a log start that moves on later
    # only removes records the seed, read after every position, covers.
    starts: dict[TopicPartition, int] = (
        await _kafka(consumer.beginning_offsets(resuming),
                     f"reading the log start of {len(resuming)} partitions")
        if resuming else {})
    for tp in wanted:
        saved = committed.get(tp)
        if saved is None or saved.offset < 0:
            kinds[tp] = "end"
            await _kafka(consumer.seek_to_end(tp), f"seeking {tp.topic} to its end")
            continue
        if saved.offset < starts[tp]:
            # The records from the committed offset to the log start are gone, and
            # with them perhaps a newer term's barrier: resume at the log start
            # (not wherever the consumer's reset policy would go) and seed.
            kinds[tp] = "truncated"
            consumer.seek(tp, starts[tp])
        else:
            consumer.seek(tp, saved.offset)
            kinds[tp] = "restored" if saved.metadata else "seeded"
        if not saved.metadata:
            continue
        try:
            term_filter.restore_text(tp.topic, tp.partition, saved.metadata)
        except FormatError as exc:
            raise FormatError("term marks", (
                f"group {group_id!r} committed metadata for {tp.topic} partition "
                f"{tp.partition} that is not a TermFilter's saved marks: {exc.reason}")) from exc
    resumed = {tp: Resumed(await _kafka(consumer.position(tp), f"positioning on {tp.topic}"),
                           kinds[tp]) for tp in wanted}
    unseeded = [tp for tp in wanted if kinds[tp] != "restored"]
    if unseeded:
        count = await terms.output_partitions(terms.terms_topic)
        highest = await highest_terms(terms, count, roles)
        for tp in unseeded:
            for role, term in highest.items():
                term_filter.seed(tp.topic, tp.partition, role, term)
    return resumed


async def _retrying(call: Callable[[], Awaitable[T]], what: str, within: float) -> T:
    """`call()`'s result, calling again after a retriable Kafka error for `within` seconds.

    aiokafka's admin client sends FindCoordinator once and raises what it
    gets; its consumer retries the same error by itself, so this matches it.
    """
    deadline = asyncio.get_running_loop().time() + within
    backoff = RETRY_BACKOFF_S
    while True:
        try:
            return await call()
        except _errors.KafkaError as exc:
            if not exc.retriable or asyncio.get_running_loop().time() + backoff > deadline:
                raise KafkaTransportError(f"{what} failed: {exc!r}") from exc
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)


async def _kafka(request: Awaitable[T], what: str) -> T:
    """`request`'s result; a failure of Kafka is a `KafkaTransportError`, any other error
    (a bug, a wrong argument) propagates as it is."""
    try:
        return await request
    except KafkaTransportError:
        raise
    except Exception as exc:
        if not is_outage(exc):
            raise
        raise KafkaTransportError(f"{what} failed: {exc!r}") from exc
