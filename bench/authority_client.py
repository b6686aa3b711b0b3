"""One system's authority check, made from a process of its own (authority-check).

    python -m bench.authority_client --system krabka --question who-leads|token \\
        --role R --calls N --bootstrap-servers B --state-topic T --token PRODUCER_ID:EPOCH
    python -m bench.authority_client --system etcd --role R --calls N --etcd HOST:PORT ...
    python -m bench.authority_client --system zookeeper --role R --calls N --zookeeper H:P

A third party asking who leads, as `authority-check` times it: krabka's
`describe_role_state` (the role's partition of the state topic read to its
last stable offset: the latest lease and its deadline); etcd's
`Election.Leader` (one Range); ZooKeeper's children of the election path and
the lowest child (two round trips). Each call must find member ``a``
leading, or the process fails. krabka's other question, ``--question
token``: is the leader's token current (`describe_leadership`, one
DescribeTransactions, and `authoritative(token)`), which names no leader.

Every system's client runs in a process of its own: in one process the
clients slow one another down (etcd's gRPC client blocks the event loop
while it waits and runs threads of its own, kazoo runs its own threads),
which doubled every system's p50 (docs/benchmarks.md at ca89017, "The authority check,
each system alone"). The process makes ``--warmup`` calls and prints
``ready``; at each SIGUSR1 it makes ``--calls`` sequential calls and prints
``block`` (``n``: the block's number from 1, ``ms``: each call's time). The
bench stops it by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

Check = Callable[[], Awaitable[None]]


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "t": time.time() * 1000, **fields}), flush=True)


async def checker(args: argparse.Namespace) -> Check:
    """The call that asks `args.system` who leads `args.role`."""
    if args.system == "krabka":
        from krabka import FencingToken, describe_leadership, describe_role_state
        from krabka.kafka import KafkaTransport

        transport = KafkaTransport(args.bootstrap_servers, topic=args.state_topic)
        await transport.start()
        if args.question == "who-leads":
            async def who_leads() -> None:
                state = await describe_role_state(transport, args.role, args.partitions)
                if state.holder != "a" or state.lease is None \
                        or state.lease.deadline <= time.time() * 1000:
                    raise AssertionError(f"krabka: leader {state.lease}")
            return who_leads
        producer_id, epoch = (int(part) for part in args.token.split(":"))
        token = FencingToken(producer_id, epoch)

        async def krabka() -> None:
            status = await describe_leadership(transport, args.role)
            if not status.authoritative(token):
                raise AssertionError(f"krabka: {token} not authoritative: {status}")
        return krabka
    if args.system == "etcd":
        from bench.peers import EtcdElection

        reader = EtcdElection(args.etcd, f"/bench/{args.role}", args.lease, args.renew)

        async def etcd() -> None:
            found = reader.leader()
            if found is None or found[1] != b"a":
                raise AssertionError(f"etcd: leader {found}")
        return etcd
    from bench.peers import ZkElection

    zk = ZkElection(args.zookeeper, f"/bench/{args.role}", args.lease)
    zk.start()

    async def zookeeper() -> None:
        if zk.leader() != b"a":
            raise AssertionError("zookeeper: leader is not 'a'")
    return zookeeper


async def run(args: argparse.Namespace) -> None:
    check = await checker(args)
    blocks: asyncio.Queue[None] = asyncio.Queue()
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, blocks.put_nowait, None)
    for _ in range(args.warmup):
        await check()
    emit("ready")
    block = 0
    while True:
        await blocks.get()
        samples = []
        for _ in range(args.calls):
            t0 = time.perf_counter()
            await check()
            samples.append((time.perf_counter() - t0) * 1000)
        block += 1
        emit("block", n=block, ms=samples)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--system", choices=("krabka", "etcd", "zookeeper"), required=True)
    p.add_argument("--question", choices=("who-leads", "token"), default="who-leads",
                   help="krabka: who leads (the state topic) or is the token current "
                        "(DescribeTransactions); the peers answer who leads")
    p.add_argument("--role", required=True)
    p.add_argument("--partitions", type=int, default=4, help="krabka: the state topic's")
    p.add_argument("--calls", type=int, default=20, help="calls per block")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--bootstrap-servers", default="")
    p.add_argument("--state-topic", default="")
    p.add_argument("--token", default="", help="krabka: the leader's PRODUCER_ID:EPOCH")
    p.add_argument("--etcd", default="")
    p.add_argument("--zookeeper", default="")
    p.add_argument("--lease", type=float, default=3.0)
    p.add_argument("--renew", type=float, default=1.0)
    asyncio.run(run(p.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
