"""Term mode's rule for a leader's declared output topics: none may be compacted.

`TermFilter` judges records in offset order and drops a superseded term's
record that follows a newer term's barrier. The log cleaner of a compacted
topic judges nothing: it keeps the latest record of each key. When the new
leader writes ``K=b2`` and the deposed one then writes ``K=z``, every filter
drops ``z``, but after compaction ``z`` is all that is left of ``K``, and a
zombie tombstone removes ``K`` altogether (docs/term-mode.md#compacted-output-topics).
So a term-mode leader refuses a declared output whose ``cleanup.policy``
includes ``compact`` (`CompactedOutputError`) before it registers, unless
its options allow compacted outputs: then the caller has accepted that loss
(for instance, it keys records so that no two terms share a key).

Both transports report the policy (`OutputWriter.output_facts`); this module
applies the rule, so they refuse the same topics with the same message.
"""

from __future__ import annotations

from krabka.errors import CompactedOutputError
from krabka.options import LeadershipOptions
from krabka.topic_policy import TopicFacts
from krabka.transport import OutputWriter

__all__ = ["check_output_topic", "check_outputs", "compacts"]


def compacts(cleanup_policy: str | None) -> bool:
    """Whether a ``cleanup.policy`` value compacts (``compact``, ``compact,delete``, ...)."""
    if not cleanup_policy:
        return False
    return "compact" in (part.strip() for part in cleanup_policy.split(","))


def check_output_topic(facts: TopicFacts, *, allow_compacted: bool = False) -> None:
    """`CompactedOutputError` for a compacted output topic, unless `allow_compacted`.

    A topic that does not exist passes: the tenure's first barrier reports
    it (a `TransportError`, retried, as the topic may be created meanwhile).
    """
    if allow_compacted or not facts.exists or not compacts(facts.cleanup_policy):
        return
    raise CompactedOutputError(facts.topic, facts.cleanup_policy or "")


async def check_outputs(writer: OutputWriter, options: LeadershipOptions) -> None:
    """Apply `check_output_topic` to every output `options` declares."""
    if options.allow_compacted_outputs:
        return
    for topic in options.outputs:
        check_output_topic(await writer.output_facts(topic))
