"""Benchmarks of krabka-coordination side by side with etcd and ZooKeeper elections.

``python -m bench FIGURE... [--quick] [--trials N] [--json PATH] [--plots DIR]``
starts its own Kafka broker (``deploy/kafka/kafka.py``), etcd and ZooKeeper on
loopback in a temporary folder (peers from the Debian packages ``etcd-server``
and ``zookeeper``; skipped, loudly, when absent), runs the figures with the
same lease / TTL / session timeout for every system (3 s, renew 1 s, stagger
0.5 s), alternating systems trial by trial, prints a table with the ratio
ours/peer and stops every process it started by PID, also on failure. The
election figures run krabka once per fencing mode (``--fencing epoch,term``;
term mode's rows are system ``krabka-term``).

Modules: `cli` (entry point), `context` (shared run state and workers),
`figures` (codec, authority-check, graceful-handover, crash-failover and
deadline-overshoot, zombie-writes, zombie-in-flight), `scale` + `scale_worker` (roles-scale,
roles-scale-group), `limits` (the open-file limit and what else can stop a scale run),
`fold` (fold-throughput), `term_authority` (term-authority-check),
`worker_figures` + `app_worker` + `static_web` (the whole Faust worker:
worker-fold, worker-recovery, event-latency, webview-latency),
`worker` (one candidate process of any system), `authority_client` (one
system's authority checks, from a process of its own),
`peers` (the etcd and ZooKeeper election recipes), `services` (the servers),
`procs` (child processes), `stats` (summaries, JSON, table), `plots` (PNG).
Results and how to read them: ``docs/benchmarks.md``.
"""
