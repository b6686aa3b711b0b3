"""roles-scale: one worker process holding N roles, renewing every 10 s.

For each N (smallest first) a fresh `bench.scale_worker` process acquires N
roles on its own 16-partition state topic and holds them for a window of
several renewal periods. Measured from outside with psutil: resident memory
(max over the window), CPU (user + system over the window), file
descriptors and sockets; from inside: every renewal's latency
(`Leadership.on_renewed`) and lateness (how late after granted_at + renew
it was written). Growing N stops
at the first N that fails to acquire within the time allowed or loses roles.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench import procs
from bench.context import Bench, stop, wait
from bench.stats import Result
from coordination.defaults import (
    CHALLENGE_STAGGER,
    LEASE_DURATION,
    PARTITIONS,
    RENEW_INTERVAL,
)

# The library's defaults: the scale run measures what a user gets out of the box.
LEASE, RENEW, STAGGER = LEASE_DURATION, RENEW_INTERVAL, CHALLENGE_STAGGER


def _sample(process: Any) -> dict[str, float]:
    return {"rss": process.memory_info().rss / 2**20, "fds": process.num_fds(),
            "sockets": len(process.net_connections(kind="inet"))}


async def roles_scale(bench: Bench) -> None:
    try:
        import psutil
    except ImportError:
        bench.skip_result("roles-scale", "krabka", "-", "psutil missing (the bench extra)")
        return
    limit_reason = f"not reached up to N={max(bench.scale_roles)} (the largest N tried)"
    for n in bench.scale_roles:
        topic = f"bench-scale-{bench.run_id}-{n}"
        await bench.create_topic(topic, PARTITIONS, compact=True)
        child = procs.python(
            "bench.scale_worker", "--bootstrap-servers", bench.bootstrap, "--state-topic", topic,
            "--partitions", str(PARTITIONS), "--roles", str(n),
            "--prefix", f"bench.scale.{bench.run_id}.{n}", "--lease", str(LEASE),
            "--renew", str(RENEW), "--stagger", str(STAGGER), "--hold", str(bench.scale_hold),
            name=f"scale-{n}", log=bench.folder / "logs" / f"scale-{n}.log")
        try:
            process = psutil.Process(child.pid)
            baseline_event = await wait(child, "baseline", 120)
            base = _sample(process)
            budget = min(60 + n * 0.25, 600.0)
            try:
                acquired = await wait(child, "acquired", budget)
            except TimeoutError:
                progress = [e for e in child.events if e.get("event") == "progress"]
                limit_reason = (f"N={n}: not all roles acquired within {budget:.0f} s "
                                f"(last progress {progress[-1] if progress else None})")
                print(f"  roles-scale: {limit_reason}", flush=True)
                break
            await wait(child, "holding", 30)
            cpu0, t0 = process.cpu_times(), time.monotonic()
            broker = _broker_processes(bench, psutil)
            broker_cpu0 = [p.cpu_times() for p in broker]
            samples: list[dict[str, float]] = []
            while time.monotonic() - t0 < bench.scale_hold:
                samples.append(_sample(process))
                await asyncio.sleep(1.0)
            done = await wait(child, "renewals", bench.scale_hold + 60)
            cpu1, t1 = process.cpu_times(), time.monotonic()
            wall = t1 - t0
            cpu = ((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)) / wall * 100
            broker_cpu = sum((b1.user - b0.user) + (b1.system - b0.system) for b0, b1 in
                             zip(broker_cpu0, (p.cpu_times() for p in broker), strict=True)
                             ) / wall * 100 if broker else None
            rss = [s["rss"] for s in samples]
            last = samples[-1]
            held = acquired["held"]
            config = bench.config(roles=n, held=held, lease_s=LEASE, renew_s=RENEW,
                                  stagger_s=STAGGER, partitions=PARTITIONS,
                                  hold_s=bench.scale_hold, nofile=baseline_event["nofile"],
                                  acquire_s=round(acquired["seconds"], 2),
                                  acquire_failures=acquired["failed"],
                                  roles_lost_while_holding=done["ended"],
                                  baseline_rss_mib=round(base["rss"], 1),
                                  baseline_fds=base["fds"], baseline_sockets=base["sockets"],
                                  broker_cpu_percent=None if broker_cpu is None
                                  else round(broker_cpu, 1))
            per_role = {
                "rss_per_role_kib": (max(rss) - base["rss"]) * 1024 / max(held, 1),
                "fds_per_role": (last["fds"] - base["fds"]) / max(held, 1),
                "sockets_per_role": (last["sockets"] - base["sockets"]) / max(held, 1),
            }
            bench.add(Result("roles-scale", "krabka", "MiB", rss, config, metric=f"rss@{n}",
                             extra=per_role))
            bench.add(Result("roles-scale", "krabka", "% of one core", [cpu], config,
                             metric=f"cpu@{n}"))
            bench.add(Result("roles-scale", "krabka", "fds", [last["fds"]], config,
                             metric=f"fds@{n}", extra={"sockets": last["sockets"]}))
            bench.add(Result("roles-scale", "krabka", "ms", done["latency_ms"], config,
                             metric=f"renewal-latency@{n}"))
            bench.add(Result("roles-scale", "krabka", "ms", done["lateness_ms"], config,
                             metric=f"renewal-lateness@{n}"))
            print(f"  roles-scale N={n}: held {held} in {acquired['seconds']:.1f} s, "
                  f"RSS {max(rss):.0f} MiB ({per_role['rss_per_role_kib']:.0f} KiB/role), "
                  f"CPU {cpu:.1f} %, fds {last['fds']:.0f}, sockets {last['sockets']:.0f}, "
                  f"lost {done['ended']}", flush=True)
            if acquired["failed"] or done["ended"]:
                limit_reason = (f"N={n}: {acquired['failed']} acquisitions failed, "
                                f"{done['ended']} roles lost while holding")
                break
        except procs.ChildError as exc:
            limit_reason = f"N={n}: the worker died: {exc}"[:500]
            print(f"  roles-scale: {limit_reason}", flush=True)
            break
        finally:
            await stop(child)
    bench.scale_limit = limit_reason
    for result in bench.results:
        if result.figure == "roles-scale":
            result.configuration["limit"] = limit_reason


def _broker_processes(bench: Bench, psutil: Any) -> list[Any]:
    found = []
    for pid in getattr(bench, "kafka_pids", []):
        try:
            found.append(psutil.Process(pid))
        except psutil.Error:
            continue
    return found
