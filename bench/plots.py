"""PNG plots of a run's JSON: ``python -m bench.plots RESULTS.json OUTDIR``.

Empirical CDFs of the time figures (crash failover, overshoot, graceful
handover, authority check), zombie writes per trial (both zombie figures; term
mode's legend adds what `TermFilter` dropped), roles-scale curves and the
event latency against the worker's commit interval.
Needs matplotlib (the bench extra).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

COLORS = {"krabka": "tab:blue", "krabka-term": "tab:purple", "etcd": "tab:orange",
          "zookeeper": "tab:green", "aiokafka-raw": "tab:gray", "orjson": "tab:gray",
          "aiohttp-static": "tab:gray"}


def _ecdf(ax: Any, rows: list[dict[str, Any]], title: str, xlabel: str, *,
          log: bool = False) -> None:
    for row in rows:
        values = sorted(row.get("samples") or [])
        if not values:
            continue
        ys = [(i + 1) / len(values) for i in range(len(values))]
        ax.step(values, ys, where="post", color=COLORS.get(row["system"]),
                label=f"{row['system']} (p50 {row['p50']:.3g}, n={row['n']})")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of trials")
    if log:
        ax.set_xscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def plot_all(results: list[dict[str, Any]], folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def rows(figure: str, metric: str | None = None) -> list[dict[str, Any]]:
        return [r for r in results if r["figure"] == figure and r.get("metric") == metric
                and r.get("samples")]

    def save(fig: Any, name: str) -> None:
        path = folder / name
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    if rows("crash-failover"):
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
        _ecdf(left, rows("crash-failover"), "Crash failover (SIGKILL -> new leader)",
              "ms (krabka: to first committed write; peers: to 'became leader')")
        _ecdf(right, rows("deadline-overshoot"), "Overshoot past the old lease deadline",
              "ms")
        save(fig, "bench-crash-failover.png")
    if rows("graceful-handover"):
        fig, ax = plt.subplots(figsize=(7, 4))
        _ecdf(ax, rows("graceful-handover"), "Graceful handover (resign -> new leader)",
              "ms (log scale)", log=True)
        save(fig, "bench-graceful-handover.png")
    if rows("authority-check"):
        fig, ax = plt.subplots(figsize=(7, 4))
        _ecdf(ax, rows("authority-check"), "Authority check by a third party", "ms (log)",
              log=True)
        save(fig, "bench-authority-check.png")
    titles = {"zombie-writes": "SIGSTOP past the lease, SIGCONT",
              "zombie-in-flight": "paused between the last check and the broker"}
    for figure, title in titles.items():
        zombie = rows(figure, "accepted")
        if not zombie:
            continue
        dropped = {r["system"]: r["samples"] for r in rows(figure, "dropped")}
        fig, ax = plt.subplots(figsize=(7, 4))
        width = 0.8 / len(zombie)
        for k, row in enumerate(zombie):
            xs = [i + k * width for i in range(len(row["samples"]))]
            label = (f"{row['system']}: {sum(1 for v in row['samples'] if v)} of "
                     f"{row['n']} trials with zombie writes")
            if row["system"] in dropped:
                label += f", {sum(dropped[row['system']]):.0f} dropped by TermFilter"
            ax.bar(xs, row["samples"], width=width, color=COLORS.get(row["system"]),
                   label=label)
        ax.set_title(f"Zombie writes accepted per trial\n({title})", fontsize=10)
        ax.set_xlabel("trial")
        ax.set_ylabel("old leader's writes accepted")
        ax.legend(fontsize=8)
        save(fig, f"bench-{figure}.png")
    latency = [r for r in results if r["figure"] == "event-latency" and r.get("samples")]
    if latency:
        fig, ax = plt.subplots(figsize=(7, 4))
        for system in sorted({r["system"] for r in latency}):
            points = sorted((r["configuration"]["commit_interval_s"], r) for r in latency
                            if r["system"] == system)
            xs = [x for x, _ in points]
            for key, style in (("p50", "o-"), ("p99", "s--")):
                ax.plot(xs, [r[key] for _, r in points], style, color=COLORS.get(system),
                        label=f"{system} {key}")
        intervals = sorted({r["configuration"]["commit_interval_s"] for r in latency})
        ax.plot(intervals, [x * 1000 + 100 for x in intervals], ":", color="tab:red",
                label="target p99: interval + 100 ms")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("worker commit interval (s, COORDINATION_COMMIT_INTERVAL)")
        ax.set_ylabel("lease commit to record read (ms)")
        ax.set_title("Event latency against the commit interval\n(krabka: the elected event; "
                     "aiokafka-raw: the lease record itself)", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, "bench-event-latency.png")
    scale = [r for r in results if r["figure"] == "roles-scale" and r.get("samples")]
    if scale:
        by: dict[str, dict[int, dict[str, Any]]] = {}
        for row in scale:
            match = re.fullmatch(r"(.+)@(\d+)", row.get("metric") or "")
            if match:
                by.setdefault(match.group(1), {})[int(match.group(2))] = row
        fig, axes = plt.subplots(1, 3, figsize=(13, 4))
        for ax, metric, label in ((axes[0], "rss", "max RSS (MiB)"),
                                  (axes[1], "fds", "file descriptors"),
                                  (axes[2], "cpu", "CPU (% of one core)")):
            points = sorted(by.get(metric, {}).items())
            key = "max" if metric != "cpu" else "p50"
            ax.plot([n for n, _ in points], [r[key] for _, r in points], "o-")
            ax.set_xscale("log")
            ax.set_xlabel("roles held by one worker")
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
        lat = sorted(by.get("renewal-latency", {}).items())
        if lat:
            twin = axes[2].twinx()
            twin.plot([n for n, _ in lat], [r["p99"] for _, r in lat], "s--", color="tab:red",
                      label="renewal p99 (ms)")
            twin.set_ylabel("renewal latency p99 (ms)", color="tab:red")
        fig.suptitle("One worker holding N roles (lease 30 s, renew 10 s)")
        save(fig, "bench-roles-scale.png")
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    results = json.loads(Path(args[0]).read_text())
    for path in plot_all(results, Path(args[1])):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
