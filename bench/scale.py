"""roles-scale: one worker process holding N roles; roles-scale-group: a group
of worker processes standing for the same roles under ``balanced`` placement.

roles-scale: for each N (smallest first) a fresh `bench.scale_worker`
process acquires N roles on its own 16-partition state topic and holds them
for a window of several renewal periods. Measured from outside with psutil:
resident memory (max over the window), CPU (user + system over the window),
file descriptors (sampled every second) and sockets (at the window's end:
listing them reads every socket of the machine); from inside: the
acquisition time, every renewal's latency (`Leadership.on_renewed`) and
lateness (how late after it was due it was written). Growing N stops at the
first N that fails to acquire within its budget or loses roles; the record
says where it stopped and why (the file limit, the budget, a dead worker).

roles-scale-group: `GROUP_WORKERS` processes, each a candidate of every
role, so every role has one leader and two standbys. They are started, then
released at one instant (SIGUSR1), and the group's progress is the union of
the roles its members hold. Measured: the time until every role is held, the
split per member beside the split the hash alone prefers, renewal lateness
over a hold window, RSS, CPU and fds per process, roles lost.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from typing import Any

from bench import procs
from bench.context import Bench, now_ms, stop, wait
from bench.limits import process_file_limit, roles_allowed, system_limits
from bench.stats import Result
from krabka.defaults import (
    CHALLENGE_STAGGER,
    LEASE_DURATION,
    PARTITIONS,
    RENEW_INTERVAL,
)
from krabka.rules.evaluate import ordered_challengers

# The library's defaults: the scale run measures what a user gets out of the box.
LEASE, RENEW, STAGGER = LEASE_DURATION, RENEW_INTERVAL, CHALLENGE_STAGGER
GROUP_WORKERS = 3

# Acquisition budget: a floor, plus per role the larger of a fixed allowance
# (4 roles/s, well below every rate measured at 1 000 roles) and twice the
# per-role time of the largest N already measured, so a linear 10 000-role
# acquisition at the 1 000-role rate fits with room for a loaded machine.
BUDGET_FLOOR_S = 60.0
BUDGET_PER_ROLE_S = 0.25
BUDGET_SLACK = 2.0


def acquisition_budget(n: int, measured: dict[int, float]) -> float:
    """Seconds allowed to acquire `n` roles, given the acquisition times measured so far."""
    per_role = BUDGET_PER_ROLE_S
    if measured:
        largest = max(measured)
        per_role = max(per_role, BUDGET_SLACK * measured[largest] / largest)
    return BUDGET_FLOOR_S + n * per_role


def growth(measured: dict[int, float], reference: int = 1000) -> dict[str, Any] | None:
    """Acquisition time growth from `reference` roles (or the smallest N measured) to
    the largest N measured, against linear: ``vs_linear`` 1.0 is linear, above is worse."""
    if len(measured) < 2:
        return None
    start = reference if reference in measured else min(measured)
    end = max(measured)
    if end <= start or measured[start] <= 0:
        return None
    time_ratio = measured[end] / measured[start]
    roles_ratio = end / start
    return {"from_roles": start, "to_roles": end, "from_s": round(measured[start], 2),
            "to_s": round(measured[end], 2), "roles_ratio": round(roles_ratio, 2),
            "time_ratio": round(time_ratio, 2), "vs_linear": round(time_ratio / roles_ratio, 2)}


def _sample(process: Any, sockets: bool = False) -> dict[str, float]:
    sample = {"rss": process.memory_info().rss / 2**20, "fds": float(process.num_fds())}
    if sockets:
        sample["sockets"] = float(len(process.net_connections(kind="inet")))
    return sample


def _cpu_percent(before: Any, after: Any, wall: float) -> float:
    return ((after.user - before.user) + (after.system - before.system)) / wall * 100


def _file_limit_hit(failures: list[str], fds: float | None, nofile: int) -> bool:
    text = " ".join(failures)
    return ("Too many open files" in text or "Errno 24" in text
            or (fds is not None and fds >= nofile - 50))


def _progress(child: procs.Child) -> list[dict[str, Any]]:
    return [e for e in child.events if e.get("event") == "progress"]


def scale_system(loop: str) -> str:
    """The system name of roles-scale's rows on event loop `loop`."""
    return "krabka" if loop == "asyncio" else f"krabka-{loop}"


async def roles_scale(bench: Bench) -> None:
    try:
        import psutil
    except ImportError:
        bench.skip_result("roles-scale", "krabka", "-", "psutil missing (the bench extra)")
        return
    for loop in bench.scale_loops:
        await _roles_scale_on(bench, loop, psutil)


async def _roles_scale_on(bench: Bench, loop: str, psutil: Any) -> None:
    """roles-scale's N, smallest first, each in a fresh worker on event loop `loop`."""
    system = scale_system(loop)
    limits = {**system_limits(), "bench_file_limit": bench.file_limit,
              "broker_nofile": [process_file_limit(pid) for pid in bench.kafka_pids] or None}
    limit_reason = f"not reached up to N={max(bench.scale_roles)} (the largest N tried)"
    acquire_s: dict[int, float] = {}
    for n in bench.scale_roles:
        topic = f"bench-scale-{bench.run_id}-{loop}-{n}"
        await bench.create_topic(topic, PARTITIONS, compact=True)
        child = procs.python(
            "bench.scale_worker", "--bootstrap-servers", bench.bootstrap, "--state-topic", topic,
            "--partitions", str(PARTITIONS), "--roles", str(n),
            "--prefix", f"bench.scale.{bench.run_id}.{loop}.{n}", "--lease", str(LEASE),
            "--renew", str(RENEW), "--stagger", str(STAGGER), "--hold", str(bench.scale_hold),
            "--admission", str(bench.scale_admission),
            "--admission-rate", str(bench.scale_admission_rate),
            "--concurrency", str(bench.scale_concurrency),
            "--settle-quiet", str(bench.scale_settle_quiet), "--loop", loop,
            name=f"scale-{loop}-{n}", log=bench.folder / "logs" / f"scale-{loop}-{n}.log")
        last: dict[str, float] | None = None
        try:
            process = psutil.Process(child.pid)
            baseline_event = await wait(child, "baseline", 120)
            base = _sample(process, sockets=True)
            nofile = baseline_event["nofile_raised"][0]
            if roles_allowed(nofile, base["fds"]) < n:
                print(f"  roles-scale N={n}: the worker's open-file limit {nofile} allows "
                      f"about {roles_allowed(nofile, base['fds'])} roles; expect it to stop "
                      "there", flush=True)
            budget = acquisition_budget(n, acquire_s)
            try:
                acquired = await wait(child, "acquired", budget)
            except TimeoutError:
                progress = _progress(child)
                last = _sample(process)
                limit_reason = (f"N={n}: not all roles acquired within {budget:.0f} s "
                                f"(last progress {progress[-1] if progress else None}; "
                                f"fds {last['fds']:.0f} of {nofile}); "
                                f"{broker_state(bench, psutil)}")[:1200]
                print(f"  roles-scale: {limit_reason}", flush=True)
                break
            acquire_s[n] = acquired["seconds"]
            settled = await wait(child, "settled", 120)
            after_settle = (await wait(child, "after-settle", bench.scale_settle_quiet + 60)
                            if bench.scale_settle_quiet > 0 else None)
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
            last = _sample(process, sockets=True)
            broker_fds = [p.num_fds() for p in broker]
            wall = t1 - t0
            cpu = _cpu_percent(cpu0, cpu1, wall)
            broker_cpu = sum(_cpu_percent(b0, b1, wall) for b0, b1 in
                             zip(broker_cpu0, (p.cpu_times() for p in broker), strict=True)
                             ) if broker else None
            rss = [s["rss"] for s in samples] + [last["rss"]]
            held = acquired["held"]
            config = bench.config(roles=n, held=held, lease_s=LEASE, renew_s=RENEW,
                                  stagger_s=STAGGER, partitions=PARTITIONS,
                                  hold_s=bench.scale_hold, nofile=baseline_event["nofile"],
                                  nofile_worker=baseline_event["nofile_raised"],
                                  limits=limits,
                                  acquire_s=round(acquired["seconds"], 2),
                                  acquire_budget_s=round(budget),
                                  acquire_progress=[[round(e["seconds"], 1), e["held"],
                                                     e["failed"]] for e in _progress(child)],
                                  acquire_failures=acquired["failed"],
                                  admission_s=bench.scale_admission or None,
                                  admission_rate=bench.scale_admission_rate or None,
                                  concurrency=bench.scale_concurrency,
                                  not_admitted=acquired.get("not_admitted", 0),
                                  admission_closings=acquired.get("admission_closings", 0),
                                  roles_lost_while_holding=done["ended"],
                                  baseline_rss_mib=round(base["rss"], 1),
                                  baseline_fds=base["fds"], baseline_sockets=base["sockets"],
                                  broker_fds=broker_fds or None,
                                  broker_cpu_percent=None if broker_cpu is None
                                  else round(broker_cpu, 1),
                                  gc_pauses_ms=done.get("gc"),
                                  gc_pauses_acquiring_ms=acquired.get("gc"),
                                  loop=loop, settle_pause_ms=settled.get("pause_ms"),
                                  settle_quiet_s=bench.scale_settle_quiet)
            per_role = {
                "rss_per_role_kib": (max(rss) - base["rss"]) * 1024 / max(held, 1),
                "fds_per_role": (last["fds"] - base["fds"]) / max(held, 1),
                "sockets_per_role": (last["sockets"] - base["sockets"]) / max(held, 1),
            }
            bench.add(Result("roles-scale", system, "s", [acquired["seconds"]], config,
                             metric=f"acquire@{n}"))
            bench.add(Result("roles-scale", system, "MiB", rss, config, metric=f"rss@{n}",
                             extra=per_role))
            bench.add(Result("roles-scale", system, "% of one core", [cpu], config,
                             metric=f"cpu@{n}"))
            bench.add(Result("roles-scale", system, "fds", [last["fds"]], config,
                             metric=f"fds@{n}", extra={"sockets": last["sockets"]}))
            bench.add(Result("roles-scale", system, "ms", done["latency_ms"], config,
                             metric=f"renewal-latency@{n}"))
            bench.add(Result("roles-scale", system, "ms", done["lateness_ms"], config,
                             metric=f"renewal-lateness@{n}"))
            if after_settle is not None:
                bench.add(Result("roles-scale", system, "ms", after_settle["lateness_ms"], config,
                                 metric=f"renewal-lateness-after-settle@{n}"))
            admitted = (f" (admission {bench.scale_admission} s"
                        + (f", {bench.scale_admission_rate}/s" if bench.scale_admission_rate
                           else "")
                        + f": {acquired['not_admitted']} "
                        f"not admitted, closed {acquired['admission_closings']} times)"
                        if bench.scale_admission else "")
            print(f"  roles-scale ({loop}) N={n}: held {held}{admitted} in "
                  f"{acquired['seconds']:.1f} s, settle {settled.get('pause_ms')} ms, "
                  f"RSS {max(rss):.0f} MiB ({per_role['rss_per_role_kib']:.0f} KiB/role), "
                  f"CPU {cpu:.1f} %, fds {last['fds']:.0f}, sockets {last['sockets']:.0f}, "
                  f"lost {done['ended']}{gc_summary(done.get('gc'))}", flush=True)
            if acquired["failed"] or done["ended"]:
                why = ("the file limit: " if _file_limit_hit(acquired["failures"], last["fds"],
                                                              nofile) else "")
                limit_reason = (f"N={n}: {why}{acquired['failed']} acquisitions failed "
                                f"({held} held, fds {last['fds']:.0f} of {nofile}), "
                                f"{done['ended']} roles lost while holding; first failures "
                                f"{acquired['failures'][:2]}"[:600]
                                + f"; {broker_state(bench, psutil)}")[:1200]
                break
        except procs.ChildError as exc:
            limit_reason = (f"N={n}: the worker died: {exc}"[:500]
                            + f"; {broker_state(bench, psutil)}")
            print(f"  roles-scale: {limit_reason}", flush=True)
            break
        finally:
            await stop(child)
    rate = growth(acquire_s)
    if rate is not None:
        print(f"  roles-scale ({loop}): acquisition from {rate['from_roles']} to "
              f"{rate['to_roles']} roles: {rate['from_s']} s to {rate['to_s']} s, "
              f"{rate['time_ratio']}x the time for {rate['roles_ratio']}x the roles "
              f"({rate['vs_linear']}x linear)", flush=True)
    for result in bench.results:
        if result.figure == "roles-scale" and result.system == system:
            result.configuration["limit"] = limit_reason
            result.configuration["acquisition_growth"] = rate


def gc_summary(pauses: dict[str, list[float]] | None) -> str:
    """The worker's full collections in the hold window, as the summary line says them."""
    if not pauses:
        return ""
    count, longest, total = pauses["2"]
    young = sum(pauses[generation][2] for generation in ("0", "1"))
    return (f", GC in the hold: {count:.0f} full collections (longest {longest:.0f} ms, "
            f"{total:.0f} ms in all), younger ones {young:.0f} ms")


def preferred_split(roles: list[str], members: list[str]) -> dict[str, int]:
    """How many of `roles` the balanced hash puts first for each member, all registered."""
    first = Counter(ordered_challengers(members, None, role=role, placement="balanced")[0]
                    for role in roles)
    return {member: first[member] for member in members}


async def roles_scale_group(bench: Bench) -> None:
    try:
        import psutil
    except ImportError:
        bench.skip_result("roles-scale-group", "krabka", "-", "psutil missing (the bench extra)")
        return
    n = bench.group_roles
    members = [f"group-{k}" for k in range(1, GROUP_WORKERS + 1)]
    topic = f"bench-group-{bench.run_id}-{n}"
    prefix = f"bench.group.{bench.run_id}.{n}"
    await bench.create_topic(topic, PARTITIONS, compact=True)
    children = [procs.python(
        "bench.scale_worker", "--group", "--member", member, "--placement", "balanced",
        "--bootstrap-servers", bench.bootstrap, "--state-topic", topic,
        "--partitions", str(PARTITIONS), "--roles", str(n), "--prefix", prefix,
        "--lease", str(LEASE), "--renew", str(RENEW), "--stagger", str(STAGGER),
        "--progress-every", "1", "--start-rate", str(bench.group_start_rate),
        name=f"group-{member}",
        log=bench.folder / "logs" / f"group-{member}.log") for member in members]
    try:
        processes = [psutil.Process(child.pid) for child in children]
        baselines = [await wait(child, "baseline", 120) for child in children]
        for child in children:
            await wait(child, "ready", 30)
        base = [_sample(p, sockets=True) for p in processes]
        released = now_ms()
        for child in children:
            child.signal(signal.SIGUSR1)
        budget = BUDGET_FLOOR_S + n * BUDGET_PER_ROLE_S + (
            n / bench.group_start_rate if bench.group_start_rate > 0 else 0.0)
        covered = await _until_all_held(children, n, budget)
        if covered < n:
            print(f"  roles-scale-group: {covered} of {n} roles held after {budget:.0f} s",
                  flush=True)
        for child in children:
            child.signal(signal.SIGUSR1)
        holding = [await wait(child, "holding", 30) for child in children]
        cpu0, t0 = [p.cpu_times() for p in processes], time.monotonic()
        samples: list[list[dict[str, float]]] = [[] for _ in processes]
        while time.monotonic() - t0 < bench.scale_hold:
            for k, process in enumerate(processes):
                samples[k].append(_sample(process))
            await asyncio.sleep(1.0)
        for child in children:
            child.signal(signal.SIGUSR1)
        done = [await wait(child, "renewals", 60) for child in children]
        wall = time.monotonic() - t0
        cpu = [_cpu_percent(c0, p.cpu_times(), wall) for c0, p in zip(cpu0, processes,
                                                                     strict=True)]
        last = [_sample(p, sockets=True) for p in processes]
        broker_fds = [p.num_fds() for p in _broker_processes(bench, psutil)] or None
    except procs.ChildError as exc:
        reason = f"a member died: {exc}"[:500]
        print(f"  roles-scale-group: {reason}", flush=True)
        bench.skip_result("roles-scale-group", "krabka", "-", reason)
        return
    finally:
        await stop(*children)
    outcome = group_outcome(members, done, n, released, min(h["t"] for h in holding))
    split = outcome["split"]
    all_held_s = outcome["acquire_s"]
    roles = [f"{prefix}.{i:05d}" for i in range(n)]
    config = bench.config(
        roles=n, members=members, placement="balanced", start_rate=bench.group_start_rate,
        lease_s=LEASE, renew_s=RENEW, stagger_s=STAGGER, partitions=PARTITIONS,
        hold_s=bench.scale_hold,
        acquire_budget_s=round(budget), held_at_hold_start=[h["held"] for h in holding],
        preferred_split=preferred_split(roles, members), **outcome,
        acquire_failures=sum(d["failed"] for d in done),
        failures=[f for d in done for f in d["failures"]][:5],
        nofile_worker=[b["nofile_raised"] for b in baselines],
        limits={**system_limits(), "bench_file_limit": bench.file_limit,
                "broker_nofile": [process_file_limit(pid) for pid in bench.kafka_pids] or None},
        baseline_rss_mib=[round(b["rss"], 1) for b in base],
        baseline_fds=[b["fds"] for b in base], broker_fds=broker_fds)
    if all_held_s is not None:
        bench.add(Result("roles-scale-group", "krabka", "s", [all_held_s], config,
                         metric="acquire"))
    bench.add(Result("roles-scale-group", "krabka", "ms",
                     [x for d in done for x in d["lateness_ms"]], config,
                     metric="renewal-lateness"))
    bench.add(Result("roles-scale-group", "krabka", "ms",
                     [x for d in done for x in d["latency_ms"]], config,
                     metric="renewal-latency"))
    for k, member in enumerate(members):
        rss = [s["rss"] for s in samples[k]] + [last[k]["rss"]]
        bench.add(Result("roles-scale-group", "krabka", "roles", [float(split[member])],
                         config, metric=f"held@{member}"))
        bench.add(Result("roles-scale-group", "krabka", "MiB", rss, config,
                         metric=f"rss@{member}"))
        bench.add(Result("roles-scale-group", "krabka", "% of one core", [cpu[k]], config,
                         metric=f"cpu@{member}"))
        bench.add(Result("roles-scale-group", "krabka", "fds", [last[k]["fds"]], config,
                         metric=f"fds@{member}", extra={"sockets": last[k]["sockets"]}))
        bench.add(Result("roles-scale-group", "krabka", "ms", done[k]["lateness_ms"], config,
                         metric=f"renewal-lateness@{member}"))
    print(f"  roles-scale-group N={n}: all held in "
          f"{'-' if all_held_s is None else f'{all_held_s:.1f} s'}; split {split} "
          f"(hash prefers {config['preferred_split']}); unheld at the end "
          f"{outcome['roles_unheld_at_end']}, superseded but not yet told "
          f"{outcome['stale_at_end']}, tenures "
          f"superseded {outcome['tenures_superseded']}, ended while holding "
          f"{outcome['tenures_ended_while_holding']}; RSS "
          f"{[round(max(s['rss'] for s in samples[k] + [last[k]])) for k in range(len(members))]}"
          f" MiB, CPU {[round(c, 1) for c in cpu]} %, fds {[x['fds'] for x in last]}",
          flush=True)


def group_outcome(members: list[str], reports: list[dict[str, Any]], n: int,
                  released_ms: float, hold_ms: float) -> dict[str, Any]:
    """What the members' final reports say together.

    A role's holder at the end is the member with its highest live tenure
    (`Leadership.tenure` strictly increases): a lower one was superseded and
    has not noticed yet, which a tenure learns at its next renewal, so two
    members can both believe they hold a role for up to a renew interval
    (`stale_at_end`). `acquire_s`: from the release until the last of the
    holders' tenures began (None unless every role has a holder). A tenure
    that ended counts as `superseded` when another member holds its role at
    the end; one that ended while holding counts whatever came after it.
    """
    best: dict[int, tuple[int, int, float]] = {}  # role -> (tenure, member index, began)
    live = 0
    for k, report in enumerate(reports):
        for i, began, tenure in report["held"]:
            live += 1
            if i not in best or tenure > best[i][0]:
                best[i] = (tenure, k, began)
    holder = {i: k for i, (_, k, _) in best.items()}
    superseded = sum(1 for k, report in enumerate(reports) for i, *_ in report["ended"]
                     if holder.get(i, k) != k)
    return {
        "split": {m: sum(1 for k in holder.values() if k == j) for j, m in enumerate(members)},
        "acquire_s": (round((max(b for _, _, b in best.values()) - released_ms) / 1000, 2)
                      if len(best) == n else None),
        "roles_unheld_at_end": n - len(best),
        "stale_at_end": live - len(best),
        "tenures_superseded": superseded,
        "tenures_ended_while_holding": sum(1 for report in reports
                                           for _, _, at, _ in report["ended"] if at >= hold_ms),
        "roles_lost_while_holding": sum(1 for report in reports
                                        for i, _, at, _ in report["ended"]
                                        if at >= hold_ms and i not in holder),
        "end_reasons": Counter(why.split("(")[0] for report in reports
                               for *_, why in report["ended"]).most_common(3),
    }


async def _until_all_held(children: list[procs.Child], n: int, budget: float) -> int:
    """How many roles the members hold together, once that is all `n` or at `budget`."""
    deadline = time.monotonic() + budget
    while True:
        held: set[int] = set()
        for child in children:
            if not child.alive():
                raise procs.ChildError(f"{child.name} (pid {child.pid}) exited with "
                                       f"{child.process.returncode}; {child.tail()}")
            progress = _progress(child)
            held.update(progress[-1]["held_ids"] if progress else ())
        if len(held) >= n or time.monotonic() > deadline:
            return len(held)
        await asyncio.sleep(0.5)


BROKER_TROUBLE = ("Too many open files", "OutOfMemoryError", "FATAL", "Shutdown broker",
                  "Stopped the log directory", "offline")
"""What a broker's log says when a scale run stopped it (matched case-sensitively)."""


def broker_state(bench: Bench, psutil: Any) -> str:
    """Whether the bench's brokers still run, and the first lines of trouble in their logs.

    A scale run that stops may have stopped the broker, and the run's folder
    (the broker's log with it) is deleted without ``--keep``: the reason goes
    into the results instead."""
    if not bench.kafka_pids:
        return "broker not started by the bench"
    alive = [pid for pid in bench.kafka_pids if psutil.pid_exists(pid)]
    said: list[str] = []
    for log in sorted((bench.folder / "kafka").glob("node-*/server.log")):
        with log.open(errors="replace") as lines:
            said += [line.strip()[:300] for line in lines
                     if any(word in line for word in BROKER_TROUBLE)][:3]
    state = (f"broker running (pid {alive})" if len(alive) == len(bench.kafka_pids)
             else f"broker exited (running: {alive} of {bench.kafka_pids})")
    return state + (f"; its log: {' | '.join(said)}" if said else "; nothing of note in its log")


def _broker_processes(bench: Bench, psutil: Any) -> list[Any]:
    found = []
    for pid in bench.kafka_pids:
        try:
            found.append(psutil.Process(pid))
        except psutil.Error:
            continue
    return found
