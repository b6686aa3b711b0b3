"""The operator CLI as a command-line citizen, without a broker: arguments
checked before any connection, a deadline on every command that talks to the
cluster, one line of stderr per error, and help text without markup."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from krabka.cli import main as cli_main
from krabka.cli.main import PROG, main
from tests.support.ports import free_port
from tests.support.processes import ROOT

COMMANDS = (["describe", "r"], ["state", "r"], ["fence", "r"], ["roles"], ["watch"],
            ["create-topics"])


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "krabka", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, check=False)


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to reach a cluster fails the test."""
    def reached(*args: object, **kwargs: object) -> None:
        raise AssertionError("the CLI reached for the cluster")

    monkeypatch.setattr(cli_main, "KafkaTransport", reached)
    monkeypatch.setattr(cli_main, "ensure_topics", reached)


# --- arguments, checked before any connection ------------------------------------------


@pytest.mark.parametrize(("argv", "error"), [
    (["roles", "--partitions", "0"], "argument --partitions: must be at least 1, got 0"),
    (["state", "r", "--partitions", "-4"], "argument --partitions: must be at least 1, got -4"),
    (["create-topics", "--partitions", "0"], "argument --partitions: must be at least 1"),
    (["create-topics", "--replication-factor", "0"],
     "argument --replication-factor: must be at least 1, got 0"),
    (["roles", "--partitions", "four"], "argument --partitions: must be a whole number"),
    (["describe", ""], "argument role: must not be empty"),
    (["fence", ""], "argument role: must not be empty"),
    (["watch", "billing", ""], "argument ROLE: must not be empty"),
    (["roles", "--fencing", "lease"], "argument --fencing: must be one of epoch, term, got "
                                      "'lease'"),
    (["roles", "--bootstrap-servers", "broker:abc"],
     "argument --bootstrap-servers: 'broker:abc': the port must be a number from 1 to 65535"),
    (["describe", "r", "--bootstrap-servers", "a:9092,,b:9092"],
     "argument --bootstrap-servers: an empty entry"),
    (["roles", "--timeout", "0"], "argument --timeout: must be a positive number of seconds"),
    (["watch", "--timeout", "-1"], "argument --timeout: must be a positive number of seconds"),
    (["roles", "--timeout", "nan"], "argument --timeout: must be a positive number of seconds"),
    (["fence", "r", "--transaction-timeout", "0"],
     "argument --transaction-timeout: must be a positive number of seconds"),
    (["describe", "r", "--lease-duration", "soon"],
     "argument --lease-duration: must be a number of seconds, got 'soon'"),
])
def test_a_bad_argument_is_a_usage_error_naming_the_flag(argv, error, capsys, no_cluster):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(f"{PROG} {argv[0]}: error: {error}"), last


def test_a_malformed_bootstrap_variable_is_refused_naming_it_before_any_connection(
        monkeypatch, capsys, no_cluster):
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "a:9092,")
    assert main(["roles"]) == 2
    assert capsys.readouterr().err == (
        f"{PROG}: error: KAFKA_BOOTSTRAP_SERVERS='a:9092,': an empty entry (two commas, or a "
        "comma at an end)\n")


# --- the deadline ----------------------------------------------------------------------


def test_every_command_that_talks_to_the_cluster_takes_a_timeout(no_cluster, monkeypatch):
    seen: list[tuple[str, float]] = []

    async def record(args, table):
        seen.append((args.command, args.timeout))

    for name in ("_one_shot", "_follow", "_create_topics"):
        monkeypatch.setattr(cli_main, name, record)
    for argv in COMMANDS:
        assert main([*argv, "--timeout", "2.5"]) == 0
    assert seen == [(argv[0], 2.5) for argv in COMMANDS]


def test_a_one_shot_command_that_outlives_its_timeout_stops_with_status_2(monkeypatch,
                                                                         capsys):
    async def never_answers(args, table):
        await asyncio.Event().wait()

    monkeypatch.setattr(cli_main, "_one_shot", never_answers)
    assert main(["roles", "--bootstrap-servers", "broker-1:9092", "--timeout", "0.1"]) == 2
    assert capsys.readouterr().err == (
        f"{PROG}: error: roles: no answer from the Kafka cluster at broker-1:9092 within "
        "--timeout 0.1 s\n")


@pytest.fixture
def silent_broker() -> Iterator[str]:
    """An address that accepts connections and never answers a request."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield f"127.0.0.1:{server.getsockname()[1]}"


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: argv[0])
def test_a_command_against_a_silent_cluster_ends_by_its_timeout(argv, silent_broker):
    started = time.monotonic()
    result = run(*argv, "--bootstrap-servers", silent_broker, "--timeout", "1")
    # The interpreter's start and the clients' bounded stops come on top of the second.
    assert time.monotonic() - started < 15
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"{PROG}: error: ")
    assert silent_broker in line
    assert "within" in line


# --- stderr ----------------------------------------------------------------------------


def test_an_unreachable_cluster_is_one_line_of_stderr_without_the_clients_log():
    address = f"127.0.0.1:{free_port()}"
    result = run("roles", "--bootstrap-servers", address)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"{PROG}: error: ")
    assert address in line
    assert "Unable connect" not in result.stderr


def test_verbose_shows_the_clients_log_too():
    address = f"127.0.0.1:{free_port()}"
    result = run("roles", "--bootstrap-servers", address, "--verbose")
    assert result.returncode == 2
    assert re.search(r" ERROR aiokafka\S*: Unable connect to ", result.stderr), result.stderr
    assert result.stderr.splitlines()[-1].startswith(f"{PROG}: error: ")


# --- help ------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [[], *([argv[0]] for argv in COMMANDS)],
                         ids=lambda argv: argv[0] if argv else PROG)
def test_help_is_plain_text(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert "`" not in text
    assert not re.search(r":[a-z]+:", text), text
    assert not re.search(r"\*\*|\.\. ", text), text
