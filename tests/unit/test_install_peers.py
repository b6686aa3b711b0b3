"""`make bench`'s installer of the peers' Debian packages (bench/install_peers.py).

Driven with a recording runner and a scripted presence check, so nothing is
installed and nothing needs root."""

from __future__ import annotations

import subprocess

import pytest

from bench import install_peers
from bench.install_peers import install, plan
from bench.services import PEER_PACKAGES, server_missing

MISSING = {"etcd": "no `etcd` binary", "zookeeper": "no zookeeper.jar"}


def test_nothing_is_run_when_both_peers_are_present():
    assert plan({}, root=True, apt=True) == install_peers.Plan([], {})


def test_as_root_with_apt_each_missing_package_is_installed_on_its_own_after_an_update():
    commands = plan(MISSING, root=True, apt=True).commands
    assert commands[0] == ["apt-get", "update", "-qq"]
    assert [command[-1] for command in commands[1:]] == ["etcd-server", "zookeeper"]
    assert all(command[:3] == ["apt-get", "install", "-y"] for command in commands[1:])


def test_only_the_missing_peer_is_installed():
    commands = plan({"zookeeper": "no zookeeper.jar"}, root=True, apt=True).commands
    assert [command[-1] for command in commands] == ["-qq", "zookeeper"]


@pytest.mark.parametrize(("root", "apt", "needs"), [
    (False, True, "needs root"), (True, False, "needs apt-get"),
    (False, False, "needs root and apt-get")])
def test_without_root_or_apt_nothing_runs_and_each_missing_peer_says_what_it_needs(
        root, apt, needs):
    steps = plan(MISSING, root=root, apt=apt)
    assert steps.commands == []
    assert set(steps.cannot) == {"etcd", "zookeeper"}
    assert all(reason.startswith(MISSING[peer]) and reason.endswith(needs)
               for peer, reason in steps.cannot.items())


class Machine:
    """Peers that appear once apt-get installs their package, unless it fails."""

    def __init__(self, missing: set[str], failing: set[str]) -> None:
        self.missing = set(missing)
        self.failing = failing
        self.ran: list[list[str]] = []

    def run(self, command: list[str]) -> int:
        self.ran.append(command)
        package = command[-1]
        if command[1] == "install":
            if package in self.failing:
                return 100
            self.missing -= {peer for peer, name in PEER_PACKAGES.items() if name == package}
        return 0

    def why(self, peer: str) -> str | None:
        return MISSING[peer] if peer in self.missing else None


def test_a_package_that_fails_to_install_is_named_and_the_other_still_installs():
    machine = Machine({"etcd", "zookeeper"}, failing={"etcd-server"})
    said: list[str] = []
    left = install(machine.run, machine.why, root=True, apt=True, dry_run=False, say=said.append)
    assert left == {"etcd": MISSING["etcd"]}
    assert [command[-1] for command in machine.ran] == ["-qq", "etcd-server", "zookeeper"]
    assert any("etcd-server exited with 100" in line for line in said)


def test_without_root_nothing_runs_and_both_peers_are_reported_missing():
    machine = Machine({"etcd", "zookeeper"}, failing=set())
    left = install(machine.run, machine.why, root=False, apt=True, dry_run=False,
                   say=lambda _line: None)
    assert machine.ran == []
    assert set(left) == {"etcd", "zookeeper"}
    assert all("needs root" in reason for reason in left.values())


def test_a_dry_run_prints_the_commands_and_runs_none():
    machine = Machine({"etcd"}, failing=set())
    said: list[str] = []
    left = install(machine.run, machine.why, root=True, apt=True, dry_run=True, say=said.append)
    assert machine.ran == []
    assert said == ["would run: apt-get update -qq",
                    "would run: apt-get install -y -qq --no-install-recommends etcd-server"]
    assert left == {"etcd": MISSING["etcd"]}


def test_the_command_line_dry_run_starts_no_process_and_names_each_missing_peer(
        monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise AssertionError(f"a dry run started {args}")

    monkeypatch.setattr(subprocess, "run", refuse)
    assert install_peers.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    for peer in PEER_PACKAGES:
        assert (f"{peer} is NOT installed" in out) == (server_missing(peer) is not None)
