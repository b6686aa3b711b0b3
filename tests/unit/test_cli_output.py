"""The operator CLI without a broker: its parser, --version, the choice of
output and the table layout of each command's JSON answer."""

from __future__ import annotations

import io
import subprocess
import sys
import tomllib
from importlib.metadata import version

import pytest

from coordination.cli import DISTRIBUTION, PROG, main, output_format
from coordination.cli_output import columns, render, timestamp_text, token_text
from tests.support.processes import ROOT

TOKEN = {"producer_id": 4000, "producer_epoch": 7}


# --- the command line ------------------------------------------------------------------


def test_the_script_is_the_cli_and_names_its_distribution():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {PROG: "coordination.cli:main"}
    assert project["name"] == DISTRIBUTION


def test_version_prints_the_installed_distribution_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"{PROG} {version(DISTRIBUTION)}\n"


def test_python_dash_m_coordination_is_the_same_cli():
    result = subprocess.run([sys.executable, "-m", "coordination", "--version"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{PROG} {version(DISTRIBUTION)}\n"


def test_usage_names_the_program_and_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {PROG} ")
    for command in ("describe", "state", "fence", "roles", "watch"):
        assert f"    {command} " in out


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
    for argv in (["describe", "r"], ["state", "r"], ["fence", "r"], ["roles"], ["watch"]):
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
