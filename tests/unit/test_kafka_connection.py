"""The connection settings: read once from the environment or flags, checked
before any connection, and the same aiokafka options for every client."""

from __future__ import annotations

import argparse
import ssl

import pytest

from krabka import ConfigurationError
from krabka.kafka import Connection, KafkaTransport


def test_without_settings_it_is_a_plaintext_connection_to_the_local_broker():
    connection = Connection.from_env({})
    assert connection.bootstrap_servers == "127.0.0.1:9092"
    assert connection.client_options() == {"security_protocol": "PLAINTEXT"}


def test_sasl_ssl_settings_become_the_options_of_every_aiokafka_client(tmp_path):
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    connection = Connection.from_env({
        "KAFKA_BOOTSTRAP_SERVERS": "broker-1:9094,broker-2:9094",
        "KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
        "KAFKA_SASL_MECHANISM": "scram-sha-512",
        "KAFKA_SASL_USERNAME": "worker",
        "KAFKA_SASL_PASSWORD_FILE": str(secret),
    })
    options = connection.client_options()
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert options["sasl_plain_username"] == "worker"
    assert options["sasl_plain_password"] == "s3cret"  # the file's trailing newline dropped
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    assert options["ssl_context"].check_hostname
    # The transport accepts them as they are (it splits them per aiokafka class).
    KafkaTransport(connection.bootstrap_servers, **options)


def test_the_host_name_check_can_be_turned_off_for_a_broker_known_by_address():
    connection = Connection.from_env({"KAFKA_SECURITY_PROTOCOL": "SSL",
                                      "KAFKA_SSL_CHECK_HOSTNAME": "false"})
    context = connection.ssl_context()
    assert context is not None
    assert not context.check_hostname


@pytest.mark.parametrize(("environ", "named"), [
    ({"KAFKA_SECURITY_PROTOCOL": "TLS"}, "KAFKA_SECURITY_PROTOCOL='TLS'"),
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "KAFKA_SASL_MECHANISM"),
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "GSSAPI",
      "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": "p"}, "KAFKA_SASL_MECHANISM='GSSAPI'"),
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "PLAIN",
      "KAFKA_SASL_PASSWORD": "p"}, "KAFKA_SASL_USERNAME"),
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "PLAIN",
      "KAFKA_SASL_USERNAME": "u"}, "KAFKA_SASL_PASSWORD_FILE"),
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "PLAIN",
      "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": "p",
      "KAFKA_SASL_PASSWORD_FILE": "/run/secrets/kafka"}, "not both"),
    ({"KAFKA_SASL_USERNAME": "u"}, "KAFKA_SASL_USERNAME set, but KAFKA_SECURITY_PROTOCOL"),
    ({"KAFKA_SSL_CAFILE": "/etc/ca.pem"}, "KAFKA_SSL_CAFILE set, but"),
    ({"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CAFILE": "/nonexistent/ca.pem"},
     "KAFKA_SSL_CAFILE='/nonexistent/ca.pem': no such file"),
    ({"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CERTFILE": "/nonexistent/c.pem"},
     "KAFKA_SSL_KEYFILE"),
    ({"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CHECK_HOSTNAME": "maybe"},
     "KAFKA_SSL_CHECK_HOSTNAME='maybe' is not true or false"),
    ({"KAFKA_BOOTSTRAP_SERVERS": " "}, "KAFKA_BOOTSTRAP_SERVERS is empty"),
])
def test_settings_that_cannot_work_are_refused_naming_the_variable(environ, named):
    with pytest.raises(ConfigurationError, match=named.replace("(", r"\(")):
        Connection.from_env(environ)


def test_a_password_file_that_cannot_be_read_is_refused_by_name(tmp_path):
    secret = tmp_path / "password"
    secret.write_text("p")
    connection = Connection.from_env({
        "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KAFKA_SASL_MECHANISM": "PLAIN",
        "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD_FILE": str(secret)})
    secret.unlink()
    with pytest.raises(ConfigurationError, match="KAFKA_SASL_PASSWORD_FILE"):
        connection.client_options()


def test_flags_override_the_environment_and_unset_flags_keep_it():
    parser = argparse.ArgumentParser()
    Connection.add_arguments(parser)
    environ = {"KAFKA_BOOTSTRAP_SERVERS": "from-env:9092",
               "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KAFKA_SASL_MECHANISM": "PLAIN",
               "KAFKA_SASL_USERNAME": "env-user", "KAFKA_SASL_PASSWORD": "env-pass"}
    args = parser.parse_args(["--bootstrap-servers", "from-flag:9092",
                              "--sasl-username", "flag-user"])
    connection = Connection.from_arguments(args, environ)
    assert connection.bootstrap_servers == "from-flag:9092"
    assert connection.sasl_username == "flag-user"
    assert connection.password() == "env-pass"
    assert Connection.from_arguments(parser.parse_args([]), {}) == Connection()


def test_the_password_never_shows_in_a_description_or_a_repr():
    connection = Connection.from_env({
        "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KAFKA_SASL_MECHANISM": "PLAIN",
        "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": "hunter2"})
    assert connection.describe()["KAFKA_SASL_PASSWORD"] == "********"
    assert connection.describe()["KAFKA_SASL_USERNAME"] == "u"
    assert "hunter2" not in repr(connection)


@pytest.mark.parametrize("servers", [
    "127.0.0.1:9092", "broker-1:9094,broker-2:9094", "broker-1:9094, broker-2:9094",
    "kafka", "[::1]:9092", "[::1]", "::1", "fe80::1:2:3"])
def test_every_address_form_the_kafka_client_parses_is_a_bootstrap_server(servers):
    assert Connection.from_env({"KAFKA_BOOTSTRAP_SERVERS": servers}).bootstrap_servers == servers


@pytest.mark.parametrize(("servers", "named"), [
    ("broker:abc", "'broker:abc': the port must be a number from 1 to 65535"),
    ("broker:0", "the port must be a number from 1 to 65535"),
    ("broker:65536", "the port must be a number from 1 to 65535"),
    ("broker:", "the port must be a number"),
    (":9092", "':9092' has no host"),
    ("a:1,,b:2", "an empty entry"),
    ("a:1,", "an empty entry"),
    ("a b:1", "has a space in it"),
    ("[::1]9092", "only :port may follow the bracketed address"),
    ("[::1:9092", "is not [IPv6 address]"),
    ("a:1:2", "is neither host:port nor an IPv6 address"),
])
def test_a_malformed_bootstrap_list_is_refused_naming_the_variable_and_the_entry(servers,
                                                                                 named):
    with pytest.raises(ConfigurationError) as refused:
        Connection.from_env({"KAFKA_BOOTSTRAP_SERVERS": servers})
    assert str(refused.value).startswith(f"KAFKA_BOOTSTRAP_SERVERS={servers!r}: ")
    assert named in str(refused.value)


def test_a_malformed_bootstrap_flag_is_a_usage_error_naming_the_flag(capsys):
    parser = argparse.ArgumentParser(prog="tool")
    Connection.add_arguments(parser)
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--bootstrap-servers", "broker:abc"])
    assert exit_.value.code == 2
    assert ("tool: error: argument --bootstrap-servers: 'broker:abc': the port must be a "
            "number from 1 to 65535") in capsys.readouterr().err
