"""``python -m bench FIGURE... [--quick] [--trials N] [--json PATH]``."""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench import procs
from bench.context import DURABILITY, FENCING_SYSTEMS, SYSTEMS, Bench, Timing
from bench.fold import WORKLOADS
from bench.limits import raise_file_limit
from bench.plots import DOCS_FOLDER
from bench.scale_worker import LOOPS
from bench.services import (
    Etcd,
    Kafka,
    Ports,
    ZooKeeper,
    etcd_missing,
    etcd_version,
    zookeeper_missing,
    zookeeper_version,
)
from bench.stats import table
from krabka.defaults import RENEW_INTERVAL

# The whole Faust worker's figures (bench.worker_figures).
WORKER_FIGURES = ("worker-fold", "worker-recovery", "event-latency", "webview-latency")
# Figures in the priority order; `all` runs them in this order, except that
# graceful-handover runs first of the figures that use the servers, so its cold rounds
# are the first handovers the fresh servers see. The scale figures run last: at their
# largest N they may exhaust the broker's resources.
FIGURES = ("codec", "graceful-handover", "authority-check", "crash-failover", "zombie-writes",
           "zombie-in-flight", "fold-throughput", "term-authority-check", *WORKER_FIGURES,
           "metrics-series", "roles-scale", "roles-scale-group")
# The election figures that run krabka once per fencing mode (--fencing).
BY_FENCING = {"graceful-handover", "crash-failover", "zombie-writes", "zombie-in-flight"}
# Which servers each figure needs.
SCALE = {"roles-scale", "roles-scale-group"}
NEEDS_KAFKA = {"authority-check", "fold-throughput", "term-authority-check", *WORKER_FIGURES,
               *SCALE, *BY_FENCING}
WITH_PEERS = {"authority-check", *BY_FENCING}


def figure_runner(name: str) -> Callable[[Bench], Awaitable[None]]:
    from bench import figures, fold, metrics_series, scale, term_authority, worker_figures

    return {
        "codec": figures.codec,
        "authority-check": figures.authority_check,
        "graceful-handover": figures.graceful_handover,
        "crash-failover": figures.crash_failover,
        "zombie-writes": figures.zombie_writes,
        "zombie-in-flight": figures.zombie_in_flight,
        "roles-scale": scale.roles_scale,
        "roles-scale-group": scale.roles_scale_group,
        "fold-throughput": fold.fold_throughput,
        "term-authority-check": term_authority.term_authority_check,
        "worker-fold": worker_figures.worker_fold,
        "worker-recovery": worker_figures.worker_recovery,
        "event-latency": worker_figures.event_latency,
        "webview-latency": worker_figures.webview_latency,
        "metrics-series": metrics_series.metrics_series,
    }[name]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="krabka-coordination side by side with etcd and ZooKeeper elections.")
    p.add_argument("figures", nargs="+", choices=(*FIGURES, "all"), metavar="FIGURE",
                   help=f"one or more of: {', '.join(FIGURES)}, or all")
    p.add_argument("--quick", action="store_true",
                   help="few trials and small sizes (all --quick: under 10 minutes)")
    p.add_argument("--trials", type=int, default=None,
                   help="trials per figure and system (default 30; 3 with --quick)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed graceful-handover trials per system before the timed ones, "
                        "so the servers' JIT-compiled code is what is measured (default 60; "
                        "0 with --quick); their times are kept apart in the results")
    p.add_argument("--cold", type=int, default=10,
                   help="graceful-handover: its first N rounds of the invocation (warm-up "
                        "or timed) are also reported apart as graceful-handover:cold; "
                        "graceful-handover runs first of the server figures (default 10)")
    p.add_argument("--durability", choices=tuple(DURABILITY), default="default",
                   help="what reaches the disk: " + "; ".join(
                       f"{name}: {what}" for name, what in DURABILITY.items()))
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help="comma-separated subset of krabka,etcd,zookeeper")
    p.add_argument("--fencing", default=",".join(FENCING_SYSTEMS),
                   help="krabka's fencing modes in graceful-handover, crash-failover, "
                        "zombie-writes and zombie-in-flight: comma-separated subset of "
                        "epoch,term (default both; term mode's rows are system krabka-term); "
                        "the other figures are epoch mode's")
    p.add_argument("--bootstrap-servers", default=None,
                   help="use this Kafka instead of starting one (e.g. the test suite's)")
    p.add_argument("--kafka-port", type=int, default=Ports.kafka)
    p.add_argument("--etcd-port", type=int, default=Ports.etcd)
    p.add_argument("--etcd-peer-port", type=int, default=Ports.etcd_peer)
    p.add_argument("--zookeeper-port", type=int, default=Ports.zookeeper)
    p.add_argument("--lease", type=float, default=3.0)
    p.add_argument("--renew", type=float, default=1.0)
    p.add_argument("--stagger", type=float, default=0.5)
    p.add_argument("--write-interval", type=float, default=0.1,
                   help="seconds between a leader's writes to the output topic")
    p.add_argument("--tail-wait-ms", type=int, default=200,
                   help="KafkaTransport tail_wait_ms of the krabka candidates")
    p.add_argument("--scale-roles", default=None,
                   help="comma-separated N for roles-scale (default 100,1000,4000,10000; "
                        "--quick 100,1000)")
    p.add_argument("--scale-hold", type=float, default=None,
                   help="seconds each roles-scale N, and the roles-scale-group roles, are "
                        "held (default 40; --quick 12)")
    p.add_argument("--scale-admission", type=float, default=0.0,
                   help="roles-scale: the worker holds its campaigns while a renewal took "
                        "longer than this many seconds (krabka.scale.admission; 0: off)")
    p.add_argument("--scale-admission-rate", type=float, default=0.0,
                   help="roles-scale, with --scale-admission: the admission's cap in roles a "
                        "second (0: none)")
    p.add_argument("--scale-concurrency", type=int, default=64,
                   help="roles-scale: campaigns in flight at once (the worker application "
                        "has no such cap: give N to campaign for every role at once)")
    p.add_argument("--scale-loop", default="asyncio",
                   help="roles-scale: comma-separated event loops of the worker, asyncio "
                        "and/or uvloop, each a system of its own (asyncio: krabka; uvloop: "
                        "krabka-uvloop)")
    p.add_argument("--scale-settle-quiet", type=float, default=None,
                   help="roles-scale: seconds from the worker's heap settle to its hold "
                        "window, whose renewals are timed apart (default: one renew "
                        "interval, 10 s; --quick 0)")
    p.add_argument("--group-roles", type=int, default=None,
                   help="roles of roles-scale-group, on a group of three workers "
                        "(default 3000; --quick 300)")
    p.add_argument("--group-start-rate", type=float, default=0.0,
                   help="roles-scale-group: each worker starts this many candidates a second "
                        "(default 0: all at once, as the worker application does)")
    p.add_argument("--worker-records", type=int, default=None,
                   help="state records worker-fold folds (default 100000; --quick 10000)")
    p.add_argument("--fold-workloads", default="contiguous,interleaved",
                   help="fold-throughput and worker-fold: comma-separated subset of "
                        "contiguous (each role's records back to back, no transactions) and "
                        "interleaved (roles in round-robin, every record its own "
                        "transaction) (default both)")
    p.add_argument("--recovery-roles", type=int, default=None,
                   help="roles worker-recovery recovers (default 10000; --quick 1000)")
    p.add_argument("--commit-intervals", default=None,
                   help="comma-separated commit intervals (s) of event-latency "
                        "(default 0.1,0.2,1.0; --quick 0.2,1.0)")
    p.add_argument("--term-roles", default=None,
                   help="comma-separated role counts of term-authority-check "
                        "(default 10,1000,10000; --quick 10,1000)")
    p.add_argument("--term-claims", type=int, default=None,
                   help="claims of one role in term-authority-check (default 100000; "
                        "--quick 10000)")
    p.add_argument("--series-roles", type=int, default=None,
                   help="roles metrics-series stands for (default 10000; --quick 1000)")
    p.add_argument("--plots", type=Path, nargs="?", const=DOCS_FOLDER, default=None,
                   help="write PNG plots into this folder, replacing the plots of an earlier "
                        f"run there (alone: {DOCS_FOLDER}/, the plots docs/benchmarks.md shows)")
    p.add_argument("--keep", action="store_true", help="keep the run's temporary folder")
    return p


def machine() -> dict[str, str]:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem_kib = next(int(line.split()[1]) for line in
                       Path("/proc/meminfo").read_text().splitlines()
                       if line.startswith("MemTotal"))
        memory = f"{mem_kib / 1024 / 1024:.1f} GiB"
    except (OSError, StopIteration, ValueError):
        memory = "?"
    return {"nproc": str(os.cpu_count()), "memory": memory, "cpu": model,
            "python": platform.python_version(), "kernel": platform.release()}


TMPFS = Path("/dev/shm")
"""Where --durability peers-tmpfs keeps the peers' data."""


async def run(args: argparse.Namespace, folder: Path, peer_folder: Path) -> Bench:
    """Run the figures in `folder`; the peers keep their data in `peer_folder`."""
    wanted = [f for f in FIGURES if f in args.figures or "all" in args.figures]
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise SystemExit(f"unknown systems {sorted(unknown)}")
    fencings = [f.strip() for f in args.fencing.split(",") if f.strip()]
    if not fencings or set(fencings) - set(FENCING_SYSTEMS):
        raise SystemExit(f"--fencing must name one or more of {', '.join(FENCING_SYSTEMS)}, "
                         f"got {args.fencing!r}")
    trials = args.trials or (3 if args.quick else 30)
    bench = Bench(folder, trials, args.quick, Timing(args.lease, args.renew, args.stagger),
                  systems=[])
    bench.warmup = args.warmup if args.warmup is not None else (0 if args.quick else 60)
    if bench.warmup < 0:
        raise SystemExit(f"--warmup must not be negative, got {bench.warmup}")
    if args.cold < 0:
        raise SystemExit(f"--cold must not be negative, got {args.cold}")
    bench.cold = args.cold
    bench.durability = args.durability
    bench.fresh_servers = not args.bootstrap_servers
    bench.fencings = [f for f in FENCING_SYSTEMS if f in fencings]
    bench.write_interval = args.write_interval
    bench.tail_wait_ms = args.tail_wait_ms
    bench.scale_roles = ([int(n) for n in args.scale_roles.split(",")] if args.scale_roles
                         else [100, 1000] if args.quick else [100, 1000, 4000, 10000])
    bench.scale_hold = args.scale_hold or (12.0 if args.quick else 40.0)
    if args.scale_admission < 0:
        raise SystemExit(f"--scale-admission must not be negative, got {args.scale_admission}")
    bench.scale_admission = args.scale_admission
    if args.scale_admission_rate < 0 or args.scale_concurrency < 1:
        raise SystemExit("--scale-admission-rate must not be negative and --scale-concurrency "
                         "must be at least 1")
    bench.scale_admission_rate = args.scale_admission_rate
    bench.scale_concurrency = args.scale_concurrency
    bench.scale_loops = [loop.strip() for loop in args.scale_loop.split(",") if loop.strip()]
    if not bench.scale_loops or set(bench.scale_loops) - set(LOOPS):
        raise SystemExit(f"--scale-loop must name one or more of {', '.join(LOOPS)}, "
                         f"got {args.scale_loop!r}")
    bench.scale_settle_quiet = (args.scale_settle_quiet if args.scale_settle_quiet is not None
                                else 0.0 if args.quick else RENEW_INTERVAL)
    if bench.scale_settle_quiet < 0:
        raise SystemExit("--scale-settle-quiet must not be negative")
    bench.group_roles = args.group_roles or (300 if args.quick else 3000)
    bench.group_start_rate = args.group_start_rate
    if SCALE & set(wanted):
        # Before any server starts: the broker and the workers inherit the limit.
        bench.file_limit = raise_file_limit(max(
            max(bench.scale_roles) if "roles-scale" in wanted else 0,
            bench.group_roles if "roles-scale-group" in wanted else 0))
        print(f"bench: open-file limit {bench.file_limit}", flush=True)
    bench.term_roles = ([int(n) for n in args.term_roles.split(",")] if args.term_roles
                        else [10, 1000] if args.quick else [10, 1000, 10000])
    bench.term_claims = args.term_claims or (10_000 if args.quick else 100_000)
    if min(bench.term_roles) < 1 or bench.term_claims < 2:
        raise SystemExit("--term-roles must be at least 1 and --term-claims at least 2")
    bench.series_roles = args.series_roles or (1000 if args.quick else 10_000)
    if bench.series_roles < 2:
        raise SystemExit("--series-roles must be at least 2")
    bench.worker_records = args.worker_records
    bench.fold_workloads = args.fold_workloads.split(",")
    if unknown := set(bench.fold_workloads) - set(WORKLOADS):
        raise SystemExit(f"--fold-workloads: unknown {', '.join(sorted(unknown))}")
    bench.recovery_roles = args.recovery_roles
    bench.commit_intervals = ([float(x) for x in args.commit_intervals.split(",")]
                              if args.commit_intervals else None)
    import aiokafka

    bench.versions = {"kafka": "4.4.0", "aiokafka": aiokafka.__version__,
                      "python": platform.python_version()}
    needs_kafka = bool(NEEDS_KAFKA & set(wanted))
    needs_peers = bool(WITH_PEERS & set(wanted))
    servers: list[Kafka | Etcd | ZooKeeper] = []
    try:
        if "krabka" in systems:
            bench.systems.append("krabka")
        if needs_kafka:
            if args.bootstrap_servers:
                bench.bootstrap = args.bootstrap_servers
                print(f"bench: using Kafka at {bench.bootstrap}", flush=True)
            else:
                kafka = Kafka(folder / "kafka", args.kafka_port)
                servers.append(kafka)
                print(f"bench: starting Kafka on 127.0.0.1:{args.kafka_port} ...", flush=True)
                bench.bootstrap = kafka.start()
                bench.kafka_pids = kafka.pids()
            fsync = bench.durability == "kafka-fsync"
            await bench.create_topic(bench.state_topic, bench.partitions, compact=True,
                                     fsync=fsync)
            if "term" in bench.fencings and BY_FENCING & set(wanted):
                await bench.create_topic(bench.terms_topic, bench.partitions, compact=True,
                                         fsync=fsync)
        for peer, missing, start in (
            ("etcd", etcd_missing, lambda: Etcd(peer_folder / "etcd", args.etcd_port,
                                                args.etcd_peer_port)),
            ("zookeeper", zookeeper_missing, lambda: ZooKeeper(peer_folder / "zookeeper",
                                                              args.zookeeper_port)),
        ):
            if peer not in systems or not needs_peers:
                continue
            reason = missing()
            if reason is not None:
                bench.skipped[peer] = reason
                print(f"bench: SKIPPING {peer}: {reason}", file=sys.stderr, flush=True)
                continue
            server = start()
            servers.append(server)
            print(f"bench: starting {peer} ...", flush=True)
            endpoint = server.start()
            if peer == "etcd":
                bench.etcd = endpoint
                bench.versions["etcd"] = etcd_version()
            else:
                assert isinstance(server, ZooKeeper)
                bench.zookeeper = endpoint
                bench.zookeeper_tick_ms = server.tick_ms
                bench.versions["zookeeper"] = zookeeper_version()
            bench.systems.append(peer)
        for name in wanted:
            systems_of = bench.contenders() if name in BY_FENCING else bench.systems
            print(f"bench: figure {name} ({bench.trials} trials; systems "
                  f"{','.join(systems_of)})", flush=True)
            started = time.monotonic()
            try:
                await figure_runner(name)(bench)
            except Exception as exc:
                # A full run lasts half an hour or more: one broken figure must
                # not lose the figures measured before it.
                traceback.print_exc()
                bench.failed[name] = repr(exc)
                print(f"bench: figure {name} FAILED after {time.monotonic() - started:.0f} s: "
                      f"{exc!r}", file=sys.stderr, flush=True)
                continue
            finally:
                bench.ran.append(name)
            print(f"bench: figure {name} took {time.monotonic() - started:.0f} s", flush=True)
    finally:
        procs.stop_all()
        for running in reversed(servers):
            running.stop()
    return bench


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.durability == "peers-tmpfs" and not TMPFS.is_dir():
        raise SystemExit(f"--durability peers-tmpfs needs {TMPFS} (a tmpfs)")
    folder = Path(tempfile.mkdtemp(prefix="krabka-bench-"))
    peer_folder = (Path(tempfile.mkdtemp(prefix="krabka-bench-peers-", dir=TMPFS))
                   if args.durability == "peers-tmpfs" else folder)
    atexit.register(procs.stop_all)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    # The machine may be shared: the load around the run goes with its results.
    load_before = os.getloadavg()
    try:
        bench = asyncio.run(run(args, folder, peer_folder))
    finally:
        procs.stop_all()
        for kept in dict.fromkeys((folder, peer_folder)):
            if not args.keep:
                shutil.rmtree(kept, ignore_errors=True)
            else:
                print(f"bench: kept {kept}", file=sys.stderr)
    elapsed = time.monotonic() - started
    load_after = os.getloadavg()
    print()
    print(table(bench.results))
    if bench.skipped:
        print()
        for peer, reason in bench.skipped.items():
            print(f"!!! {peer} was NOT measured: {reason}")
    for name, error in bench.failed.items():
        print(f"!!! figure {name} FAILED: {error}")
    if args.json is not None:
        document = [r.to_json() for r in bench.results]
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=1) + "\n")
        meta = args.json.with_suffix(".meta.json")
        meta.write_text(json.dumps({
            "command": "python -m bench " + " ".join(sys.argv[1:] if argv is None else argv),
            "machine": machine(), "skipped": bench.skipped, "failed": bench.failed,
            "seconds": round(elapsed),
            "trials": bench.trials, "versions": bench.versions, "fencing": bench.fencings,
            "durability": {"setting": bench.durability,
                           "what": DURABILITY[bench.durability]},
            "load_average": {"before": [round(x, 2) for x in load_before],
                             "after": [round(x, 2) for x in load_after],
                             "what": "1, 5 and 15 minute load averages (os.getloadavg)"}},
            indent=1) + "\n")
        print(f"bench: wrote {args.json} and {meta}")
    if args.plots is not None:
        from bench.plots import plot_all

        for path in plot_all([r.to_json() for r in bench.results], args.plots):
            print(f"bench: plot {path}")
    print(f"bench: {elapsed:.0f} s; load average before {load_before[0]:.2f}, "
          f"after {load_after[0]:.2f}")
    return 1 if bench.failed else 0
