"""The requests of a direct lease write are byte for byte what aiokafka's own
encoder makes of the same fields, and their answers are read as aiokafka's
decoder reads them.

The broker accepting them, the retries and the fallbacks are checked against
a real broker (tests/kafka/test_kafka_transport.py, "lease writes in requests
of our own").
"""

from __future__ import annotations

from io import BytesIO

import pytest
from aiokafka import errors as aiokafka_errors
from aiokafka.protocol.api import RequestHeader_v1
from aiokafka.protocol.produce import ProduceRequest_v8, ProduceResponse_v8
from aiokafka.protocol.transaction import (
    AddPartitionsToTxnRequest_v0,
    AddPartitionsToTxnResponse_v0,
    EndTxnRequest_v0,
    EndTxnResponse_v0,
)

from krabka.kafka.producer import direct_lease

TXN = "billing.role"
TOPIC = "__coordination_state"
PRODUCER_ID, EPOCH = 4_000_000_017, 3
RECORDS = bytes(range(61))


def test_add_partitions_to_txn_v0_is_aiokafka_s_encoding():
    theirs = AddPartitionsToTxnRequest_v0(TXN, PRODUCER_ID, EPOCH, [(TOPIC, [11])]).encode()
    assert direct_lease.add_partitions_to_txn_body(TXN, PRODUCER_ID, EPOCH, TOPIC, 11) == theirs


def test_produce_v8_is_aiokafka_s_encoding_with_acks_all():
    theirs = ProduceRequest_v8(TXN, -1, 30_000, [(TOPIC, [(5, RECORDS)])]).encode()
    assert direct_lease.produce_body(TXN, 30_000, TOPIC, 5, RECORDS) == theirs


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_v0_is_aiokafka_s_encoding(commit):
    theirs = EndTxnRequest_v0(TXN, PRODUCER_ID, EPOCH, commit).encode()
    assert direct_lease.end_txn_body(TXN, PRODUCER_ID, EPOCH, commit) == theirs


@pytest.mark.parametrize("api", [direct_lease.ADD_PARTITIONS_TO_TXN, direct_lease.PRODUCE,
                                 direct_lease.END_TXN])
def test_the_request_header_is_aiokafka_s_v1_header(api):
    request = direct_lease.DirectRequest(api, b"")
    ours = request.build_request_header(correlation_id=977, client_id="role-client").encode()
    shape = type("Shape", (), {"API_KEY": api[0], "API_VERSION": api[1]})()
    assert ours == RequestHeader_v1(shape, correlation_id=977, client_id="role-client").encode()


def test_a_request_refuses_a_connection_that_does_not_support_its_version():
    request = direct_lease.DirectRequest(direct_lease.PRODUCE, b"")
    assert request.prepare({0: (3, 12)}) is request
    with pytest.raises(aiokafka_errors.IncompatibleBrokerVersion, match="API 0 v8"):
        request.prepare({0: (3, 7)})
    with pytest.raises(aiokafka_errors.IncompatibleBrokerVersion):
        request.prepare({})


def answer(request: direct_lease.DirectRequest, body: bytes) -> bytes:
    """What `AIOKafkaConnection` hands back for a frame: the body after the header."""
    frame = BytesIO((977).to_bytes(4, "big") + body)
    assert request.parse_response_header(frame).correlation_id == 977
    return request.RESPONSE_TYPE.decode(frame)


@pytest.mark.parametrize("code", [0, 51, 47])
def test_the_add_partitions_answer_is_read_at_its_one_partition(code):
    body = AddPartitionsToTxnResponse_v0(0, [(TOPIC, [(11, code)])]).encode()
    request = direct_lease.DirectRequest(direct_lease.ADD_PARTITIONS_TO_TXN, b"")
    assert direct_lease.read_add_partitions_to_txn(answer(request, body)) == code


@pytest.mark.parametrize(("code", "offset"), [(0, 123_456_789_012), (46, 7), (10, -1)])
def test_the_produce_answer_gives_the_code_and_offset_of_its_one_partition(code, offset):
    body = ProduceResponse_v8([(TOPIC, [(5, code, offset, -1, 0, [], None)])], 0).encode()
    request = direct_lease.DirectRequest(direct_lease.PRODUCE, b"")
    assert direct_lease.read_produce(answer(request, body)) == (code, offset)


def test_the_produce_answer_is_read_past_a_long_error_message():
    body = ProduceResponse_v8(
        [(TOPIC, [(5, 10, -1, -1, 0, [(0, "too large")], "x" * 300)])], 25).encode()
    assert direct_lease.read_produce(body) == (10, -1)


@pytest.mark.parametrize("code", [0, 47, 90, 51])
def test_the_end_txn_answer_is_its_error_code(code):
    body = EndTxnResponse_v0(17, code).encode()
    request = direct_lease.DirectRequest(direct_lease.END_TXN, b"")
    assert direct_lease.read_end_txn(answer(request, body)) == code
