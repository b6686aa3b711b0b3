"""The operator CLI without a broker: its parser, --version, the choice of
output and the table layout of each command's JSON answer."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tomllib
from importlib.metadata import version

import pytest

from krabka import TermStatus, TermToken
from krabka.cli.main import (
    FENCING_VARIABLE,
    PROG,
    main,
    output_format,
    roles_json,
    term_state_json,
    term_status_json,
)
from krabka.cli.output import columns, render, timestamp_text, token_text
from krabka.rules.state import RoleState, RosterEntry
from krabka.runtime.versions import DISTRIBUTION
from tests.support.processes import ROOT

TOKEN = {"producer_id": 4000, "producer_epoch": 7}


# --- the command line ------------------------------------------------------------------


def test_the_script_is_the_cli_and_names_its_distribution():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {PROG: "krabka.cli.main:main"}
    assert project["name"] == DISTRIBUTION


def test_version_prints_the_installed_distribution_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"{PROG} {version(DISTRIBUTION)}\n"


def test_python_dash_m_krabka_is_the_same_cli():
    result = subprocess.run([sys.executable, "-m", "krabka", "--version"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{PROG} {version(DISTRIBUTION)}\n"


def test_usage_names_the_program_and_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {PROG} ")
    for command in ("describe", "state", "fence", "roles", "watch", "create-topics"):
        assert re.search(rf"^    {command}\s", out, re.MULTILINE), command


@pytest.mark.parametrize("argv", [
    [],
    ["roles", "--output", "yaml"],
    ["roles", "--partitions", "four"],
    ["describe"],
    ["watch", "--from-beginning", "--no-such-flag"],
])
def test_bad_arguments_exit_2_with_the_usage(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_bad_connection_settings_exit_2_naming_the_setting(capsys):
    assert main(["roles", "--security-protocol", "SASL_SSL"]) == 2
    assert "KAFKA_SASL_MECHANISM" in capsys.readouterr().err


def test_every_command_takes_the_connection_flags():
    for argv in (["describe", "r"], ["state", "r"], ["fence", "r"], ["roles"], ["watch"],
                 ["create-topics"]):
        assert main([*argv, "--ssl-cafile", "/no/such/ca.pem"]) == 2


# --- the choice of output --------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_output_is_a_table_on_a_terminal_and_json_otherwise():
    assert output_format(None, Terminal()) == "table"
    assert output_format(None, io.StringIO()) == "json"


def test_an_output_chosen_on_the_command_line_wins():
    assert output_format("json", Terminal()) == "json"
    assert output_format("table", io.StringIO()) == "table"


# --- tables ----------------------------------------------------------------------------


def test_columns_are_as_wide_as_their_widest_cell_and_none_shows_a_dash():
    assert columns(("A", "LONG HEADER"), [("wide cell", None), ("x", 12)]) == (
        "A          LONG HEADER\n"
        "wide cell  -\n"
        "x          12"
    )


def test_tokens_and_instants_have_one_short_form():
    assert token_text(TOKEN) == "4000/7"
    assert token_text(None) == "-"
    assert timestamp_text(1_700_000_000_123) == "2023-11-14T22:13:20.123Z"
    assert timestamp_text(None) == "-"


def test_roles_is_one_row_per_role():
    body = {"now": 0, "roles": [
        {"role": "billing", "holder": "worker-1", "token": TOKEN,
         "deadline": 1_700_000_000_123, "status": "held", "members": 2},
        {"role": "reports", "holder": None, "token": None, "deadline": None,
         "status": "vacant", "members": 0},
    ]}
    assert render("roles", body).splitlines() == [
        "ROLE     HOLDER    TOKEN   DEADLINE                  STATUS  MEMBERS",
        "billing  worker-1  4000/7  2023-11-14T22:13:20.123Z  held    2",
        "reports  -         -       -                         vacant  0",
    ]


def test_describe_and_fence_are_field_lists():
    assert render("describe", {"role": "billing", "state": "Ongoing", "token": TOKEN}) == (
        "role   billing\n"
        "state  Ongoing\n"
        "token  4000/7"
    )
    fenced = {"role": "billing", "fenced": None, "token": TOKEN}
    assert render("fence", fenced).splitlines()[1:] == ["fenced  -", "token   4000/7"]


def test_state_lists_the_lease_the_roster_and_the_skipped_records():
    body = {
        "role": "billing", "partition": 3, "misplaced": 0,
        "lease": {"member": "a", "token": TOKEN, "tenure": 5,
                  "granted_at": 1_700_000_000_000, "deadline": 1_700_000_010_000},
        "roster": [{"member": "a", "rank": 0, "offset": 1, "registered_at": 1_700_000_000_000},
                   {"member": "bb", "rank": 1, "offset": 2,
                    "registered_at": 1_700_000_000_500}],
        "skipped": [{"offset": 9, "reason": "bad lease value"}],
    }
    fields, roster, skipped = render("state", body).split("\n\n")
    assert "holder      a" in fields.splitlines()
    assert "deadline    2023-11-14T22:13:30.000Z" in fields.splitlines()
    assert "skipped     1" in fields.splitlines()
    assert roster.splitlines() == [
        "RANK  MEMBER  OFFSET  REGISTERED AT",
        "0     a       1       2023-11-14T22:13:20.000Z",
        "1     bb      2       2023-11-14T22:13:20.500Z",
    ]
    assert skipped == "skipped offset 9: bad lease value"


def test_a_vacant_roles_state_shows_no_holder():
    body = {"role": "r", "partition": 0, "misplaced": 0, "lease": None, "roster": [],
            "skipped": []}
    fields, roster = render("state", body).split("\n\n")
    assert "holder     -" in fields.splitlines()
    assert roster == "RANK  MEMBER  OFFSET  REGISTERED AT"


# --- term mode ---------------------------------------------------------------------------

TERM_TOKEN = {"term": 3}


def term_status(**changes) -> TermStatus:
    fields = {"role": "billing", "partition": 2, "token": TermToken(3), "holder": "worker-1",
              "tenure": 17, "claimed_at": 1_700_000_000_000, "last_sign_at": 1_700_000_004_000,
              "resigned": False, "read_at": 1_700_000_005_000, "election_timeout_ms": 30_000}
    return TermStatus(**{**fields, **changes})


def test_a_term_token_shows_as_its_term():
    assert token_text(TERM_TOKEN) == "term 3"


def test_fencing_other_than_epoch_or_term_is_a_usage_error(capsys, monkeypatch):
    assert_usage_error(["roles", "--fencing", "lease"], capsys, "fencing")
    monkeypatch.setenv(FENCING_VARIABLE, "lease")
    assert_usage_error(["roles"], capsys, FENCING_VARIABLE)


def test_fence_refuses_term_mode_from_the_flag_or_the_environment(capsys, monkeypatch):
    assert_usage_error(["fence", "r", "--fencing", "term"], capsys, "higher term")
    monkeypatch.setenv(FENCING_VARIABLE, "term")
    assert_usage_error(["fence", "r"], capsys, "higher term")


def assert_usage_error(argv: list[str], capsys, naming: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert naming in capsys.readouterr().err


def test_term_describe_json_has_the_term_holder_liveness_and_reading_time():
    assert term_status_json(term_status()) == {
        "role": "billing", "fencing": "term", "partition": 2, "member": "worker-1",
        "token": TERM_TOKEN, "tenure": 17, "claimed_at": 1_700_000_000_000,
        "last_sign_at": 1_700_000_004_000, "live": True, "resigned": False, "status": "held",
        "election_timeout_ms": 30_000, "now": 1_700_000_005_000}


def test_term_describe_is_a_field_list():
    assert render("describe", term_status_json(term_status())).splitlines() == [
        "role        billing",
        "partition   2",
        "holder      worker-1",
        "term        3",
        "status      held",
        "live        yes",
        "resigned    no",
        "tenure      17",
        "claimed at  2023-11-14T22:13:20.000Z",
        "last sign   2023-11-14T22:13:24.000Z",
        "timeout     30 s",
    ]


def test_a_term_role_never_claimed_describes_as_vacant():
    status = term_status(token=None, holder=None, tenure=None, claimed_at=None,
                         last_sign_at=None)
    lines = render("describe", term_status_json(status)).splitlines()
    assert "holder      -" in lines
    assert "term        -" in lines
    assert "status      vacant" in lines
    assert "live        no" in lines


def test_term_state_has_the_roster_the_term_and_the_records_skipped_on_each_topic():
    state = RoleState("billing", entries=[RosterEntry("worker-1", 4, 1_700_000_000_000, 0)],
                      errors=[(9, "bad registration")])
    status = term_status(resigned=True, errors=((3, "bad claim value"),))
    body = term_state_json(state, status)
    assert body["term"]["status"] == "resigned"
    assert "lease" not in body
    assert (body["fencing"], body["partition"], body["now"]) == ("term", 2, status.read_at)
    assert body["terms_skipped"] == [{"offset": 3, "reason": "bad claim value"}]
    fields, roster, skipped = render("state", body).split("\n\n")
    assert "status         resigned" in fields.splitlines()
    assert "terms skipped  1" in fields.splitlines()
    assert roster.splitlines()[1].split()[:3] == ["0", "worker-1", "4"]
    assert skipped.splitlines() == ["skipped offset 9: bad registration",
                                    "skipped terms offset 3: bad claim value"]


def test_term_roles_list_every_role_of_either_topic_with_its_term_and_status():
    registered_only = RoleState("reports", entries=[RosterEntry("worker-2", 1, 0, 0)])
    claimed = RoleState("billing", entries=[RosterEntry("worker-1", 0, 0, 0),
                                            RosterEntry("worker-2", 2, 0, 0)])
    lapsed = term_status(read_at=1_700_000_004_000 + 30_000)
    orphan = term_status(role="audit", holder="old", token=TermToken(9))
    body = roles_json([claimed, registered_only], [orphan, lapsed], 1)
    assert [(row["role"], row["holder"], row["token"], row["status"], row["members"])
            for row in body["roles"]] == [
        ("audit", "old", {"term": 9}, "held", 0),
        ("billing", "worker-1", TERM_TOKEN, "lapsed", 2),
        ("reports", None, None, "vacant", 1),
    ]
    assert render("roles", body).splitlines() == [
        "ROLE     HOLDER    TERM  LAST SIGN                 STATUS  MEMBERS",
        "audit    old       9     2023-11-14T22:13:24.000Z  held    0",
        "billing  worker-1  3     2023-11-14T22:13:24.000Z  lapsed  2",
        "reports  -         -     -                         vacant  1",
    ]
