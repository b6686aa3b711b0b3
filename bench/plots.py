"""PNG plots of a run's JSON: ``python -m bench.plots RESULTS.json [OUTDIR]``.

Empirical CDFs of the time figures (crash failover, overshoot, graceful
handover, authority check), zombie writes per trial (both zombie figures; term
mode's legend adds what `TermFilter` dropped), roles-scale curves against N,
the roles-scale-group split and the event latency against the worker's
commit interval.
Needs matplotlib (the bench extra).

A folder holds one run's plots: writing a run's plots removes the plots an
earlier run left there (every ``bench-*.png``), so the plots of
docs/benchmarks.md, in `DOCS_FOLDER`, are always the run its table shows.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

COLORS = {"krabka": "tab:blue", "krabka-term": "tab:purple", "etcd": "tab:orange",
          "zookeeper": "tab:green", "aiokafka-raw": "tab:gray", "orjson": "tab:gray",
          "aiohttp-static": "tab:gray"}

DOCS_FOLDER = Path("docs/bench")
"""Where the plots of the run docs/benchmarks.md shows live (``--plots`` alone)."""

PLOT_GLOB = "bench-*.png"
"""The names of every plot this module writes, and so of the plots a run replaces."""


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
    for stale in folder.glob(PLOT_GLOB):
        stale.unlink()
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
        _ecdf(left, rows("crash-failover"), "Crash failover (SIGSTOP + SIGKILL -> new leader)",
              "ms, to the new leader's 'leading'")
        _ecdf(right, rows("deadline-overshoot"),
              "Overshoot past the deadline each system enforces", "ms, to 'leading'")
        save(fig, "bench-crash-failover.png")
    if rows("graceful-handover"):
        fig, ax = plt.subplots(figsize=(7, 4))
        _ecdf(ax, rows("graceful-handover"), "Graceful handover (resign -> new leader)",
              "ms, to the new leader's 'leading' (log scale)", log=True)
        save(fig, "bench-graceful-handover.png")
    if rows("authority-check"):
        fig, ax = plt.subplots(figsize=(7, 4))
        _ecdf(ax, rows("authority-check"), "Who leads, asked by a third party", "ms (log)",
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
    for system in sorted({r["system"] for r in scale}):
        # One plot per event loop: krabka is asyncio's, krabka-uvloop uvloop's.
        loop = system.removeprefix("krabka").removeprefix("-")
        save(_roles_scale(plt, [r for r in scale if r["system"] == system]),
             f"bench-roles-scale{'-' + loop if loop else ''}.png")
    group = [r for r in results if r["figure"] == "roles-scale-group"]
    if any(r.get("metric", "").startswith("held@") for r in group):
        save(_roles_scale_group(plt, group), "bench-roles-scale-group.png")
    return written


def _by_n(rows: list[dict[str, Any]]) -> dict[str, dict[int, dict[str, Any]]]:
    """The rows of a ``metric@N`` figure by metric, then N."""
    by: dict[str, dict[int, dict[str, Any]]] = {}
    for row in rows:
        match = re.fullmatch(r"(.+)@(\d+)", row.get("metric") or "")
        if match:
            by.setdefault(match.group(1), {})[int(match.group(2))] = row
    return by


def _roles_scale(plt: Any, rows: list[dict[str, Any]]) -> Any:
    """Acquisition time (with a linear line through 1 000 roles), RSS, renewal
    lateness p50/p99, fds and CPU against N; the limit that stopped N, if any."""
    by = _by_n(rows)
    fig, axes = plt.subplots(2, 3, figsize=(14, 8))
    # The acquisition time is in every row's configuration (also in runs older
    # than the acquire@N rows).
    acquire = sorted((n, r["configuration"]["acquire_s"]) for n, r in by.get("rss", {}).items()
                     if r["configuration"].get("acquire_s") is not None)
    ax = axes[0][0]
    if acquire:
        ax.plot([n for n, _ in acquire], [t for _, t in acquire], "o-", label="measured")
        # Through 1 000 roles, as the growth figure; else through the smallest N.
        through = 1000 if 1000 in dict(acquire) else acquire[0][0]
        reference = dict(acquire)[through]
        ns = [n for n, _ in acquire]
        ax.plot(ns, [reference * n / through for n in ns], "--", color="tab:gray",
                label=f"linear through {through:,}".replace(",", " "))
        ax.legend(fontsize=8)
    ax.set_ylabel("acquisition time (s)")
    for ax, metric, label, key in ((axes[0][1], "rss", "max RSS (MiB)", "max"),
                                   (axes[1][0], "fds", "file descriptors", "max"),
                                   (axes[1][1], "cpu", "CPU while holding (% of one core)",
                                    "p50")):
        points = sorted(by.get(metric, {}).items())
        ax.plot([n for n, _ in points], [r[key] for _, r in points], "o-")
        ax.set_ylabel(label)
    ax = axes[0][2]
    lateness = sorted(by.get("renewal-lateness", {}).items())
    for key, style in (("p50", "o-"), ("p99", "s--")):
        ax.plot([n for n, _ in lateness], [r[key] for _, r in lateness], style,
                label=f"lateness {key}")
    ax.axhline(1000, color="tab:red", alpha=0.4, label="1 s")
    ax.set_ylabel("renewal lateness (ms)")
    ax.legend(fontsize=8)
    for ax in (*axes[0], *axes[1][:2]):
        ax.set_xscale("log")
        ax.set_xlabel("roles held by one worker")
        ax.grid(alpha=0.3)
    config = rows[0]["configuration"]
    notes = [f"limit: {config.get('limit', '?')}"]
    rate = config.get("acquisition_growth")
    if rate:
        notes.append(f"acquisition {rate['from_roles']} -> {rate['to_roles']} roles: "
                     f"{rate['time_ratio']}x the time for {rate['roles_ratio']}x the roles "
                     f"({rate['vs_linear']}x linear)")
    notes.append(f"worker open-file limit {config.get('nofile_worker', config.get('nofile'))}")
    axes[1][2].axis("off")
    axes[1][2].text(0, 1, "\n\n".join(textwrap.fill(n, 48) for n in notes), va="top",
                    fontsize=8)
    fig.suptitle(f"One worker holding N roles (lease {config.get('lease_s')} s, "
                 f"renew {config.get('renew_s')} s, event loop {config.get('loop', 'asyncio')})")
    return fig


def _roles_scale_group(plt: Any, rows: list[dict[str, Any]]) -> Any:
    """Roles held per member beside the hash's preferred split, and a table of
    each member's RSS, CPU, fds and renewal lateness."""
    metric = {r.get("metric"): r for r in rows}
    config = next(r["configuration"] for r in rows)
    members = config["members"]
    fig, (bars, table) = plt.subplots(1, 2, figsize=(12, 4),
                                      gridspec_kw={"width_ratios": [1, 1.4]})
    xs = range(len(members))
    held = [config["split"][m] for m in members]
    bars.bar([x - 0.2 for x in xs], held, width=0.4, label="held")
    bars.bar([x + 0.2 for x in xs], [config["preferred_split"][m] for m in members],
             width=0.4, color="tab:gray", label="the hash prefers")
    bars.axhline(config["roles"] / len(members), color="tab:red", alpha=0.4,
                 label="even split")
    bars.set_xticks(list(xs), members)
    bars.set_ylabel("roles")
    bars.legend(fontsize=8)
    acquire = config.get("acquire_s")
    held_in = ("not all held within the budget" if acquire is None
               else f"all held in {acquire:.1f} s")
    bars.set_title(f"{config['roles']} roles, {len(members)} workers, balanced: {held_in}, "
                   f"{config['roles_lost_while_holding']} lost while holding, "
                   f"{config.get('roles_unheld_at_end', 0)} unheld at the end", fontsize=9)

    def cell(name: str, key: str, fmt: str) -> str:
        row = metric.get(name)
        return "-" if row is None or row.get(key) is None else format(row[key], fmt)

    body = [[m, str(config["split"][m]), cell(f"rss@{m}", "max", ".0f"),
             cell(f"cpu@{m}", "p50", ".1f"), cell(f"fds@{m}", "max", ".0f"),
             cell(f"renewal-lateness@{m}", "p50", ".0f"),
             cell(f"renewal-lateness@{m}", "p99", ".0f")] for m in members]
    table.axis("off")
    cells = table.table(cellText=body, colLabels=["member", "held", "RSS MiB", "CPU %", "fds",
                                                  "lateness\np50 ms", "lateness\np99 ms"],
                        loc="center")
    cells.auto_set_font_size(False)
    cells.set_fontsize(9)
    cells.scale(1, 2.2)
    fig.suptitle(f"A group of three workers (lease {config['lease_s']} s, "
                 f"renew {config['renew_s']} s, hold {config['hold_s']:.0f} s)")
    return fig


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2):
        print(__doc__, file=sys.stderr)
        return 2
    results = json.loads(Path(args[0]).read_text())
    for path in plot_all(results, Path(args[1]) if len(args) == 2 else DOCS_FOLDER):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
