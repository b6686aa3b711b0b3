"""`make run`: the main job, run in the foreground until Ctrl-C or SIGTERM.

Today it starts the local Kafka broker and prints how to reach it; the worker
group with the demo role and the web view joins it with the Faust application.
The broker runs in its own process group, so a terminal's Ctrl-C reaches this
script only, and the script stops the broker by PID on the way out.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KAFKA = [sys.executable, str(ROOT / "deploy" / "kafka" / "kafka.py")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kafka-dir", default=str(ROOT / ".cache" / "kafka" / "local"))
    parser.add_argument("--kafka-port", default="9092")
    args = parser.parse_args()

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())

    started = subprocess.run(
        [*KAFKA, "up", "--dir", args.kafka_dir, "--port", args.kafka_port],
        stdout=subprocess.PIPE, text=True, check=False,
    )
    if started.returncode != 0:
        print("the local Kafka broker did not start; see the log named above", file=sys.stderr)
        return started.returncode
    bootstrap = started.stdout.strip().splitlines()[-1]
    try:
        print(f"Kafka is up: bootstrap servers {bootstrap}")
        print(f"  status:           make kafka-status KAFKA_DIR={args.kafka_dir}")
        print("Press Ctrl-C to stop.")
        stop.wait()
    finally:
        print("stopping the local Kafka broker ...")
        subprocess.run([*KAFKA, "down", "--dir", args.kafka_dir], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
