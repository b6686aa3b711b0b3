"""The flags of the commands that stand for a role (``run``, ``elect``), and their checks."""

from __future__ import annotations

import argparse
import os
import socket
from typing import Any, Protocol

from krabka import defaults
from krabka.options import LeadershipOptions, check_name

__all__ = ["add_campaign_arguments", "campaign_member", "campaign_options", "default_member"]


class Subcommands(Protocol):
    """What ``ArgumentParser.add_subparsers()`` returns, as far as a command
    module registers itself on it (argparse names its class privately)."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        """A parser for the subcommand `name`."""
        ...


def default_member() -> str:
    """``<host name>-<pid>``: unique on a machine, but new on every start."""
    return f"{socket.gethostname()}-{os.getpid()}"


def add_campaign_arguments(parser: argparse.ArgumentParser) -> None:
    """ROLE, ``--member`` and the candidate's timing, named like `LeadershipOptions`."""
    parser.add_argument("role", metavar="ROLE")
    parser.add_argument("--member", default=None,
                        help="this member's id (default: <host name>-<pid>; give a stable "
                             "one so that a restart keeps its place in the roster)")
    parser.add_argument("--lease-duration", type=float, default=defaults.LEASE_DURATION,
                        help="seconds; in term mode the election timeout (default %(default)s)")
    parser.add_argument("--renew-interval", type=float, default=defaults.RENEW_INTERVAL,
                        help="seconds; in term mode the heartbeat interval "
                             "(default %(default)s)")
    parser.add_argument("--challenge-stagger", type=float, default=defaults.CHALLENGE_STAGGER,
                        help="seconds between successive standbys' challenges "
                             "(default %(default)s)")


def campaign_member(args: argparse.Namespace) -> str:
    """The member's id, checked: a `ValueError` says what is wrong."""
    check_name("role", args.role)
    member: str = args.member if args.member is not None else default_member()
    check_name("member", member)
    return member


def campaign_options(args: argparse.Namespace) -> LeadershipOptions:
    """The candidate's options from the flags (`--partitions` and `--fencing` included)."""
    return LeadershipOptions(partitions=args.partitions, lease_duration=args.lease_duration,
                             renew_interval=args.renew_interval,
                             challenge_stagger=args.challenge_stagger, fencing=args.fencing)
