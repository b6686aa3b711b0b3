"""The worker logs aiokafka's lines for conditions aiokafka retries as WARNING, and
every other aiokafka ERROR as ERROR."""

from __future__ import annotations

import importlib
import inspect
import logging

import pytest
from aiokafka import errors as kafka_errors
from aiokafka.cluster import ClusterMetadata
from aiokafka.protocol.metadata import MetadataResponse_v0

from app import kafka_logs

UNKNOWN_TOPIC_OR_PARTITION = 3


@pytest.fixture
def filtered():
    """The filter installed on aiokafka's loggers for the test, removed after it."""
    kafka_logs.install()
    yield
    for name in kafka_logs.MESSAGES:
        logger = logging.getLogger(name)
        for installed in [f for f in logger.filters
                          if isinstance(f, kafka_logs.RetriedAsWarning)]:
            logger.removeFilter(installed)


def _levels(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [record.levelname for record in caplog.records if record.name == logger]


@pytest.mark.parametrize("logger", sorted(kafka_logs.MESSAGES))
def test_each_lowered_message_is_still_in_the_installed_aiokafka(logger):
    source = inspect.getsource(importlib.import_module(logger))
    assert f'log.error("{kafka_logs.MESSAGES[logger]}"' in source


def test_a_topic_missing_from_aiokafkas_metadata_is_a_warning(filtered, caplog):
    caplog.set_level(logging.WARNING, logger="aiokafka.cluster")
    response = MetadataResponse_v0([(0, "127.0.0.1", 9092)],
                                   [(UNKNOWN_TOPIC_OR_PARTITION, "not-created-yet", [])])
    ClusterMetadata().update_metadata(response)
    lines = [r for r in caplog.records if r.name == "aiokafka.cluster"]
    assert [r.getMessage() for r in lines] == [
        "Topic not-created-yet not found in cluster metadata"]
    assert _levels(caplog, "aiokafka.cluster") == ["WARNING"]


def test_a_retriable_group_coordinator_error_is_a_warning_and_another_stays_an_error(
    filtered, caplog
):
    logger = logging.getLogger("aiokafka.consumer.group_coordinator")
    caplog.set_level(logging.DEBUG, logger=logger.name)
    logger.error(kafka_logs.GROUP_COORDINATOR, kafka_errors.GroupCoordinatorNotAvailableError())
    logger.error(kafka_logs.GROUP_COORDINATOR, kafka_errors.UnknownError())
    logger.error("Unexpected error in heartbeat routine")
    assert _levels(caplog, logger.name) == ["WARNING", "ERROR", "ERROR"]


def test_installing_twice_adds_one_filter_per_logger(filtered):
    kafka_logs.install()
    for name in kafka_logs.MESSAGES:
        filters = logging.getLogger(name).filters
        assert sum(isinstance(f, kafka_logs.RetriedAsWarning) for f in filters) == 1


def test_without_the_filter_aiokafka_logs_a_missing_topic_as_an_error(caplog):
    caplog.set_level(logging.WARNING, logger="aiokafka.cluster")
    response = MetadataResponse_v0([(0, "127.0.0.1", 9092)],
                                   [(UNKNOWN_TOPIC_OR_PARTITION, "not-created-yet", [])])
    ClusterMetadata().update_metadata(response)
    assert _levels(caplog, "aiokafka.cluster") == ["ERROR"]
