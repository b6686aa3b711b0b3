"""One member of a rebalancing group, as a process of its own.

    python -m tests.kafka.rebalance_member --bootstrap-servers B --topic STATE \\
        --member M --roles N --live-file F [--partitions P] [--stagger S] \\
        [--interval I] [--settle SETTLE]

It is one member of a `tests.support.rebalancing.Group`: the library's
`LeaderRunner` for each of N roles (``role-000`` ...) under ``balanced``
placement, lease 30 s / renew 10 s, on one `KafkaTransport`, and a
`Rebalancer` over them that plans from the roles'
states (a read-only `watch_roles` from the topic's beginning) and from the
live members named in ``--live-file`` (a JSON list, read again at every
plan: the test says who runs, as a worker's group membership would).

It prints ``ready`` once its transport has started and starts its runners
at SIGUSR1, so a test can start the members of a group at one instant.
Every stdout line is a JSON event: ``ready``; ``started``; ``held`` every half second
(``roles``: the indices of the roles it leads); ``moved`` for each handover
its rebalancer made (``role``, ``to``, ``t_ms``); ``done`` after SIGTERM has
stopped every runner (each leader resigns, registrations are kept).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from coordination import LeadershipOptions
from coordination.clock import SystemClock
from coordination.kafka import KafkaTransport
from tests.support.rebalancing import Group


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "t_ms": time.time() * 1000, **fields}), flush=True)


def role_name(i: int) -> str:
    return f"role-{i:03d}"


async def run(args: argparse.Namespace) -> None:
    options = LeadershipOptions(partitions=args.partitions, lease_duration=30,
                                renew_interval=10, challenge_stagger=args.stagger,
                                placement="balanced")
    stopping, go = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    loop.add_signal_handler(signal.SIGUSR1, go.set)
    live_file = Path(args.live_file)
    group = Group([role_name(i) for i in range(args.roles)], options, SystemClock(),
                  args.interval, args.settle)
    async with KafkaTransport(args.bootstrap_servers, topic=args.topic) as transport:
        emit("ready")
        await go.wait()
        group.watch(transport)
        group.join(args.member, transport, live=lambda: json.loads(live_file.read_text()))
        emit("started")
        runners, rebalancer = group.runners[args.member], group.rebalancers[args.member]
        reported: set[tuple[str, int]] = set()  # `moves` keeps only the latest
        while not stopping.is_set():
            emit("held", roles=sorted(int(role[5:]) for role, runner in runners.items()
                                      if runner.leading))
            for move in rebalancer.moves:
                if (move.role, move.at_ms) not in reported:
                    reported.add((move.role, move.at_ms))
                    emit("moved", role=move.role, to=move.taker, at_ms=move.at_ms)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), 0.5)
        await group.stop_rebalancing()
        await asyncio.gather(*(runner.stop(deregister=False)
                               for runner in group.every_runner()))
        emit("done")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap-servers", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--member", required=True)
    p.add_argument("--roles", type=int, required=True)
    p.add_argument("--live-file", required=True)
    p.add_argument("--partitions", type=int, default=16)
    p.add_argument("--stagger", type=float, default=1.5)
    p.add_argument("--interval", type=float, default=1.5)
    p.add_argument("--settle", type=float, default=None)
    asyncio.run(run(p.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
