"""aiokafka's ERROR lines for conditions it retries itself, logged as WARNING.

A worker's first start on a new cluster, or under a new app id, made aiokafka
log two kinds of ERROR line, a dozen of each on three workers, although
nothing was wrong: "Group Coordinator Request failed: [Error 15]
GroupCoordinatorNotAvailableError" while the broker creates
``__consumer_offsets`` for the first consumer group, and "Topic ... not found
in cluster metadata" while Faust creates its internal topics. aiokafka retries
both, and the worker starts. An operator who alerts on ERROR would be paged by
every first deployment, so `install` lowers exactly these to WARNING:

- the group coordinator's failed lookup, when the error is retriable (a
  non-retriable one, such as a refused group authorization, stays ERROR);
- a topic missing from the metadata. aiokafka asks again at its next
  refresh, and a state topic that is really missing is reported by the
  library as well: each campaign fails with a `StateTopicError` naming the
  topic and how to create it, logged as a warning at every retry.

aiokafka has no option for this, and no logger of its own for either
condition, hence a filter keyed on its message formats. `MESSAGES` names the
module and the format of each; a unit test checks that each is still in the
installed aiokafka's source, so an upgrade that rewords one fails ``make
unit`` rather than bringing the ERROR lines back unnoticed.
"""

from __future__ import annotations

import logging

from aiokafka import errors as kafka_errors

__all__ = ["MESSAGES", "RetriedAsWarning", "install"]

GROUP_COORDINATOR = "Group Coordinator Request failed: %s"
TOPIC_NOT_FOUND = "Topic %s not found in cluster metadata"

MESSAGES: dict[str, str] = {
    "aiokafka.consumer.group_coordinator": GROUP_COORDINATOR,
    "aiokafka.cluster": TOPIC_NOT_FOUND,
}
"""The logger (aiokafka's module) and the message format of each line lowered."""


class RetriedAsWarning(logging.Filter):
    """Lowers aiokafka's ERROR records for conditions it retries to WARNING."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.ERROR and _retried(record):
            record.levelno = logging.WARNING
            record.levelname = logging.getLevelName(logging.WARNING)
        return True


def _retried(record: logging.LogRecord) -> bool:
    if record.msg == TOPIC_NOT_FOUND:
        return True
    if record.msg == GROUP_COORDINATOR and isinstance(record.args, tuple) and record.args:
        error = record.args[0]
        return isinstance(error, kafka_errors.KafkaError) and bool(error.retriable)
    return False


def install() -> None:
    """Add the filter to the loggers of `MESSAGES` (once, however often called)."""
    for name in MESSAGES:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RetriedAsWarning) for f in logger.filters):
            logger.addFilter(RetriedAsWarning())
