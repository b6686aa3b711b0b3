"""Worker settings from the environment: documented defaults, member ids, bad values."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from app.settings import Settings


def test_the_defaults():
    settings = Settings.from_env({})
    assert settings.bootstrap_servers == "127.0.0.1:9092"
    assert settings.partitions == 16
    assert (settings.lease_duration, settings.renew_interval, settings.challenge_stagger) == (
        30.0, 10.0, 5.0)
    assert settings.web_port == 6066
    assert settings.commit_interval <= 0.5  # events become visible at commit
    assert settings.member() == f"{socket.gethostname()}:6066"
    assert settings.datadir == Path("data") / "worker-6066"
    assert settings.demo is False
    assert settings.leadership_options.placement == "registration"
    assert settings.leadership_options.fencing == "epoch"
    assert settings.terms_topic == "__coordination_terms"
    assert settings.admission_limit == 0  # a worker takes its turn however busy it is
    assert settings.metrics_per_role_limit == 1000


def test_every_variable_is_read():
    settings = Settings.from_env({
        "KAFKA_BOOTSTRAP_SERVERS": "k:1", "COORDINATION_PARTITIONS": "8",
        "COORDINATION_LEASE_DURATION": "12", "COORDINATION_RENEW_INTERVAL": "3",
        "COORDINATION_CHALLENGE_STAGGER": "1.5", "COORDINATION_MEMBER_ID": "pod-0",
        "COORDINATION_WEB_PORT": "7000", "COORDINATION_WEB_HOST": "pod-0.svc",
        "COORDINATION_DATA_DIR": "/data", "COORDINATION_DEMO": "yes",
        "COORDINATION_PLACEMENT": "balanced", "COORDINATION_FENCING": "term",
        "COORDINATION_TERMS_TOPIC": "terms", "COORDINATION_ADMISSION_LIMIT": "2.5",
        "COORDINATION_ADMISSION_RATE": "50", "COORDINATION_METRICS_PER_ROLE_LIMIT": "20000",
    })
    assert settings.bootstrap_servers == "k:1"
    assert settings.partitions == 8
    assert settings.member() == "pod-0"
    assert settings.canonical_url == "http://pod-0.svc:7000"
    assert settings.datadir == Path("/data")
    assert settings.demo is True
    assert settings.leadership_options.placement == "balanced"
    assert settings.leadership_options.fencing == "term"
    assert settings.terms_topic == "terms"
    assert (settings.admission_limit, settings.admission_rate) == (2.5, 50)
    assert settings.metrics_per_role_limit == 20_000


def test_the_member_id_follows_the_port_the_worker_serves_on():
    assert Settings.from_env({}).member(6070) == f"{socket.gethostname()}:6070"


@pytest.mark.parametrize(("env", "message"), [
    ({"COORDINATION_PARTITIONS": "many"}, "not an integer"),
    ({"COORDINATION_LEASE_DURATION": "soon"}, "not a number"),
    ({"COORDINATION_PARTITIONS": "0"}, "partitions must be at least 1"),
    ({"COORDINATION_RENEW_INTERVAL": "29"}, "renew_interval"),
    ({"COORDINATION_WEB_PORT": "70000"}, "out of range"),
    ({"COORDINATION_PLACEMENT": "even"},
     "COORDINATION_PLACEMENT='even' is not one of registration, balanced"),
    ({"COORDINATION_FENCING": "terms"},
     "COORDINATION_FENCING='terms' is not one of epoch, term"),
    ({"COORDINATION_ADMISSION_LIMIT": "-1"}, "negative; 0 turns the admission off"),
    ({"COORDINATION_ADMISSION_LIMIT": "1", "COORDINATION_ADMISSION_RATE": "-5"},
     "negative; 0 leaves the admission uncapped"),
    ({"COORDINATION_ADMISSION_RATE": "50"}, "set the limit too"),
    ({"COORDINATION_METRICS_PER_ROLE_LIMIT": "-1"}, "negative; 0 labels only the held gauge"),
    ({"COORDINATION_METRICS_PER_ROLE_LIMIT": "many"}, "not an integer"),
])
def test_impossible_settings_fail_at_start_up(env, message):
    with pytest.raises(ValueError, match=message):
        Settings.from_env(env)


def test_a_role_s_outputs_reach_its_options_in_either_fencing_mode():
    term = Settings.from_env({"COORDINATION_FENCING": "term"})
    assert term.role_options(["out", "audit"]).outputs == ("out", "audit")
    assert term.role_options().fencing == "term"
    # In epoch mode they are read ahead by the standby first in line.
    epoch = Settings.from_env({})
    assert epoch.role_options(["out"]).outputs == ("out",)
    assert epoch.role_options(["out"]).fencing == "epoch"


def test_the_rebalance_interval_is_read_and_must_exceed_the_stagger_under_balanced():
    assert Settings.from_env({}).rebalance_interval == 15.0
    env = {"COORDINATION_PLACEMENT": "balanced", "COORDINATION_CHALLENGE_STAGGER": "2"}
    assert Settings.from_env({**env, "COORDINATION_REBALANCE_INTERVAL": "2.5"}
                             ).rebalance_interval == 2.5
    with pytest.raises(ValueError, match="must be above COORDINATION_CHALLENGE_STAGGER"):
        Settings.from_env({**env, "COORDINATION_REBALANCE_INTERVAL": "2"})
    with pytest.raises(ValueError, match="negative"):
        Settings.from_env({"COORDINATION_REBALANCE_INTERVAL": "-1"})
    with pytest.raises(ValueError, match="not a number"):
        Settings.from_env({"COORDINATION_REBALANCE_INTERVAL": "often"})


def test_rebalancing_runs_only_under_balanced_epoch_placement_with_an_interval():
    assert Settings(placement="balanced").rebalancing_off is None
    assert "not balanced" in Settings().rebalancing_off
    assert "is 0" in Settings(placement="balanced", rebalance_interval=0).rebalancing_off
    assert "term mode" in Settings(placement="balanced", fencing="term").rebalancing_off
