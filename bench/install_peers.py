"""``python -m bench.install_peers [--dry-run]``: the peers' Debian packages, for ``make bench``.

Installs ``etcd-server`` and ``zookeeper`` (`services.PEER_PACKAGES`) for the
peers whose server is missing, when this runs as root with apt-get; what is
missing is decided by `services.server_missing`, the check the bench itself
skips a peer by. Best effort, as ``make test`` is for Chromium
(deploy/install-browser.sh): it never fails the make, and it ends by saying
plainly which peer is still missing and why, so a run that will print
"etcd was NOT measured" is announced before it starts. ``--dry-run`` prints the
commands instead of running them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.services import PEER_PACKAGES, server_missing

APT_ENV = {"DEBIAN_FRONTEND": "noninteractive"}


@dataclass(frozen=True)
class Plan:
    """The apt-get commands to run, and why the peers they cannot help stay missing."""

    commands: list[list[str]]
    cannot: dict[str, str]


def plan(missing: dict[str, str], *, root: bool, apt: bool) -> Plan:
    """What to do for `missing` (peer -> why its server is missing)."""
    if not missing:
        return Plan([], {})
    if not (root and apt):
        needs = "root" if apt else "apt-get" if root else "root and apt-get"
        return Plan([], {peer: f"{why}; installing it needs {needs}"
                         for peer, why in missing.items()})
    # One install per package, so one that fails does not keep the other out.
    return Plan([["apt-get", "update", "-qq"],
                 *(["apt-get", "install", "-y", "-qq", "--no-install-recommends",
                    PEER_PACKAGES[peer]] for peer in missing)], {})


def install(run: Callable[[list[str]], int], missing: Callable[[str], str | None], *,
            root: bool, apt: bool, dry_run: bool, say: Callable[[str], None]) -> dict[str, str]:
    """Carry out the plan with `run`; the peers still missing afterwards, with why."""
    before = {peer: why for peer in PEER_PACKAGES if (why := missing(peer)) is not None}
    steps = plan(before, root=root, apt=apt)
    for command in steps.commands:
        if dry_run:
            say("would run: " + " ".join(command))
            continue
        say("running: " + " ".join(command))
        code = run(command)
        if code != 0:
            say(f"{' '.join(command)} exited with {code}")
    if dry_run:
        return dict(before)
    after = {peer: why for peer in before if (why := missing(peer)) is not None}
    after.update({peer: why for peer, why in steps.cannot.items() if peer in after})
    return after


def _run(command: list[str]) -> int:
    return subprocess.run(command, env={**os.environ, **APT_ENV}, check=False,
                          stdout=subprocess.DEVNULL).returncode


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.install_peers",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dry-run", action="store_true",
                        help="print the apt-get commands instead of running them")
    args = parser.parse_args(argv)

    def say(line: str) -> None:
        print(f"install-peers: {line}", flush=True)

    left = install(_run, server_missing, root=os.geteuid() == 0,
                   apt=shutil.which("apt-get") is not None, dry_run=args.dry_run, say=say)
    if not left:
        say("etcd and ZooKeeper are installed")
    for peer, why in left.items():
        say(f"{peer} is NOT installed ({why}): python -m bench will skip it"
            + (" unless the commands above install it" if args.dry_run else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
