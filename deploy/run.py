"""`make run`: the main job, run in the foreground until Ctrl-C or SIGTERM.

Starts the local Kafka broker, creates the topics, and runs three Faust
workers of the application (`app.main`) hosting the demo role, which writes
fenced records. The first worker's dashboard is on http://127.0.0.1:6066/.

The broker and each worker run in their own process group, so a terminal's
Ctrl-C reaches this script only. On Ctrl-C or SIGTERM the script stops the
workers first (SIGTERM: each resigns its roles, bounded to a few seconds;
SIGKILL after a grace period), then the broker, each by PID.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

# A script of the checkout: its defaults are the checkout's library's, not
# those of whatever version is installed.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from coordination.defaults import PARTITIONS

ROOT = Path(__file__).resolve().parent.parent
KAFKA = [sys.executable, str(ROOT / "deploy" / "kafka" / "kafka.py")]
TOPICS = [sys.executable, str(ROOT / "deploy" / "topics.py")]
WORKER_STOP_GRACE = 20.0
READY_TIMEOUT = 180.0


def _say(message: str) -> None:
    print(message, flush=True)


def _worker_env(bootstrap: str, port: int, data: Path, partitions: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "COORDINATION_PARTITIONS": str(partitions),
        "COORDINATION_WEB_PORT": str(port),
        "COORDINATION_WEB_HOST": "127.0.0.1",
        "COORDINATION_WEB_BIND": "127.0.0.1",
        "COORDINATION_DATA_DIR": str(data),
        "COORDINATION_DEMO": "1",
        "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
    })
    # A short lease makes a demo failover visible in seconds (overridable).
    env.setdefault("COORDINATION_LEASE_DURATION", "10")
    env.setdefault("COORDINATION_RENEW_INTERVAL", "3")
    env.setdefault("COORDINATION_CHALLENGE_STAGGER", "2")
    return env


def _start_worker(bootstrap: str, port: int, folder: Path, partitions: int
                  ) -> subprocess.Popen[bytes]:
    data = folder / f"worker-{port}"
    data.mkdir(parents=True, exist_ok=True)
    log = (folder / f"worker-{port}.log").open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "faust", "-A", "app.main", "worker", "-l", "info"],
        cwd=ROOT, env=_worker_env(bootstrap, port, data, partitions),
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: Ctrl-C does not reach it
    )


def _stop_workers(workers: list[subprocess.Popen[bytes]]) -> None:
    for worker in workers:
        if worker.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, signal.SIGTERM)
    deadline = time.monotonic() + WORKER_STOP_GRACE
    for worker in workers:
        try:
            worker.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _say(f"worker pid {worker.pid} did not stop in {WORKER_STOP_GRACE:g} s; killing it")
            worker.kill()
            worker.wait()


def _dashboard_ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "roles/", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kafka-dir", default=str(ROOT / ".cache" / "kafka" / "local"))
    parser.add_argument("--kafka-port", default="9092")
    parser.add_argument("--run-dir", default=str(ROOT / ".cache" / "run"),
                        help="workers' data directories and logs")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--web-port", type=int, default=6066, help="the first worker's port")
    parser.add_argument("--partitions", type=int,
                        default=int(os.environ.get("COORDINATION_PARTITIONS", PARTITIONS)))
    args = parser.parse_args()

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())

    started = subprocess.run(
        [*KAFKA, "up", "--dir", args.kafka_dir, "--port", args.kafka_port],
        stdout=subprocess.PIPE, text=True, check=False,
    )
    if started.returncode != 0:
        _say("the local Kafka broker did not start; see the log named above")
        return started.returncode
    bootstrap = started.stdout.strip().splitlines()[-1]
    workers: list[subprocess.Popen[bytes]] = []
    try:
        _say(f"Kafka is up: bootstrap servers {bootstrap}")
        topics = subprocess.run(
            [*TOPICS, "--bootstrap-servers", bootstrap, "--partitions", str(args.partitions),
             "--demo"], check=False)
        if topics.returncode != 0:
            _say("the topics could not be created (see above)")
            return topics.returncode
        folder = Path(args.run_dir)
        folder.mkdir(parents=True, exist_ok=True)
        ports = [args.web_port + i for i in range(args.workers)]
        for port in ports:
            workers.append(_start_worker(bootstrap, port, folder, args.partitions))
        _say(f"started {len(workers)} workers (pids {', '.join(str(w.pid) for w in workers)}); "
             f"logs in {folder}")
        url = f"http://127.0.0.1:{ports[0]}/"
        deadline = time.monotonic() + READY_TIMEOUT
        while not stop.is_set() and not _dashboard_ready(url):
            if time.monotonic() > deadline or workers[0].poll() is not None:
                _say(f"the first worker did not serve {url}; see {folder}")
                return 1
            stop.wait(0.5)
        if not stop.is_set():
            _say(f"Dashboard: {url}")
            _say("Press Ctrl-C to stop (workers resign their roles first, then the broker).")
        while not stop.wait(1.0):
            for port, worker in zip(ports, workers, strict=True):
                if worker.returncode is None and worker.poll() is not None:
                    _say(f"worker on port {port} exited with {worker.returncode}; see "
                         f"{folder / f'worker-{port}.log'}")
    finally:
        if workers:
            _say("stopping the workers (each resigns its roles) ...")
            _stop_workers(workers)
        _say("stopping the local Kafka broker ...")
        subprocess.run([*KAFKA, "down", "--dir", args.kafka_dir], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
