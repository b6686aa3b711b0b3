"""ClientOptions: what each aiokafka client of a KafkaTransport is given."""

from aiokafka import AIOKafkaProducer

from krabka.kafka.options import ClientOptions
from krabka.kafka.transport import ROLE_PRODUCER_DEFAULTS


def test_role_producers_retry_concurrent_transactions_after_20_ms_by_default():
    options = ClientOptions("b:9092", {})
    assert options.producer(ROLE_PRODUCER_DEFAULTS)["retry_backoff_ms"] == 20


def test_a_users_option_overrides_a_default():
    options = ClientOptions("b:9092", {"retry_backoff_ms": 250})
    assert options.producer(ROLE_PRODUCER_DEFAULTS)["retry_backoff_ms"] == 250


def test_fixed_options_override_defaults_and_the_bootstrap_is_the_transports():
    options = ClientOptions("b:9092", {})
    kwargs = options.for_class(AIOKafkaProducer, {"acks": 1}, acks="all")
    assert kwargs["acks"] == "all"
    assert kwargs["bootstrap_servers"] == "b:9092"
