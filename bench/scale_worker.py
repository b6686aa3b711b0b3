"""One worker process holding N roles (the roles-scale figure).

    python -m bench.scale_worker --bootstrap-servers B --state-topic T --roles N ...

Raises its RLIMIT_NOFILE soft limit to the hard limit, opens one
`KafkaTransport` (one transactional producer per held role; the registration
producer, the tail consumer, the reader and the admin client are shared),
acquires N roles (``--concurrency`` at a time), then holds them for
``--hold`` seconds while they renew, timing every renewal. JSON lines:
``baseline`` (transport started, nothing held), ``progress``, ``acquired``,
``holding``, ``renewals`` (latency and lateness samples, roles still held).
Lateness is how long after it was due a renewal was written: the previous
grant plus the tenure's jittered interval (`coordination.tenure.renewal_delay_ms`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

from coordination import Leadership, Lease, acquire_leadership
from coordination.defaults import PARTITIONS
from coordination.kafka import KafkaTransport
from coordination.tenure import renewal_delay_ms


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "t": time.time() * 1000, **fields}), flush=True)


async def run(args: argparse.Namespace) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    async with KafkaTransport(args.bootstrap_servers, topic=args.state_topic) as transport:
        await transport.check_topic(args.partitions, args.lease)
        holding = False
        latencies: list[float] = []
        lateness: list[float] = []
        renew_ms = round(args.renew * 1000)

        def timer(role: str) -> Callable[[Lease, float], None]:
            """A renewal observer: latency, and lateness against the instant the
            renewal was due (the previous grant plus the jittered interval)."""
            previous: list[int] = []
            count = [0]

            def renewed(lease: Lease, latency: float) -> None:
                if holding:
                    latencies.append(latency * 1000)
                    if previous:
                        due = previous[0] + renewal_delay_ms(role, args.member, count[0],
                                                             renew_ms)
                        lateness.append(float(lease.granted_at - due))
                previous[:] = [lease.granted_at]
                count[0] += 1

            return renewed

        emit("baseline", nofile=[soft, hard])
        await asyncio.sleep(1.0)
        gate = asyncio.Semaphore(args.concurrency)
        held: list[Leadership] = []
        failures: list[str] = []
        started = time.monotonic()

        async def take(i: int) -> None:
            async with gate:
                try:
                    leadership = await acquire_leadership(
                        transport, f"{args.prefix}.{i:05d}", args.member,
                        partitions=args.partitions, lease_duration=args.lease,
                        renew_interval=args.renew, challenge_stagger=args.stagger)
                    leadership.on_renewed = timer(leadership.role)
                    held.append(leadership)
                except Exception as exc:
                    failures.append(repr(exc)[:300])
                done = len(held) + len(failures)
                if done % max(1, args.roles // 10) == 0:
                    emit("progress", done=done, held=len(held), failed=len(failures),
                         seconds=time.monotonic() - started)

        await asyncio.gather(*(take(i) for i in range(args.roles)))
        emit("acquired", held=len(held), failed=len(failures), failures=failures[:5],
             seconds=time.monotonic() - started)
        holding = True
        emit("holding")
        await asyncio.sleep(args.hold)
        holding = False
        alive = sum(1 for leadership in held if not leadership.done.done())
        errors = [repr(leadership.err)[:200] for leadership in held
                  if leadership.done.done()][:5]
        emit("renewals", latency_ms=latencies, lateness_ms=lateness, alive=alive,
             ended=len(held) - alive, errors=errors)
        await asyncio.sleep(3600)  # the orchestrator stops this process by PID


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap-servers", required=True)
    p.add_argument("--state-topic", required=True)
    p.add_argument("--partitions", type=int, default=PARTITIONS)
    p.add_argument("--roles", type=int, required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--member", default="scale-worker")
    p.add_argument("--lease", type=float, default=30.0)
    p.add_argument("--renew", type=float, default=10.0)
    p.add_argument("--stagger", type=float, default=5.0)
    p.add_argument("--hold", type=float, default=40.0)
    p.add_argument("--concurrency", type=int, default=64)
    asyncio.run(run(p.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
