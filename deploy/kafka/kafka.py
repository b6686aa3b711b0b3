#!/usr/bin/env python3
"""Local Apache Kafka brokers (KRaft, combined broker+controller) from Maven jars.

These machines have no Docker, so development and the test suite run Kafka from
the jars `deploy/kafka/fetch-jars.sh` copies out of Maven Central into
`.cache/kafka/<version>/jars`: `java -cp '<jars>/*' kafka.Kafka server.properties`,
one JVM per node, each in its own process group (a terminal's Ctrl-C does not
reach it; `down` stops it).

    kafka.py up     --dir DIR [--port 9092] [--nodes 1|3] [--controller-port P]
                    [--host 127.0.0.1] [--transaction-version N] [--heap 512m]
                    [--secure [--user NAME ...]] [--timeout 90]
    kafka.py down   --dir DIR [--timeout 30]
    kafka.py status --dir DIR                       (exit 0 all up, 3 otherwise)
    kafka.py kill   --dir DIR --node N [--signal KILL|TERM|STOP|CONT]
    kafka.py start-node --dir DIR --node N [--timeout 90]
    kafka.py features --dir DIR                     (finalized feature levels)

Layout of DIR: `cluster.json` (written once the storage is formatted),
`node-N/server.properties`, `node-N/data` (log.dirs), `node-N/server.log`
(the JVM's stdout and stderr, appended across restarts) and `node-N/pid`.
Node N (1-based) serves clients on port+N-1 and its controller on
controller-port+N-1 (controller-port defaults to port+100).
Clients reach the brokers at --host (listened on and advertised; default
127.0.0.1, e.g. a veth address that a network namespace can reach); the
controllers always listen on 127.0.0.1.
`up` prints the bootstrap servers as its last stdout line once every node
answers a real Kafka request (Metadata listing every node as an unfenced broker).

`up --secure` formats a secured cluster instead: clients reach a SASL_SSL
listener (TLS with a certificate made at format time by the JDK's `keytool`,
SCRAM-SHA-512 users created at format time: `admin`, a super user, and each
`--user NAME`), and Kafka's StandardAuthorizer refuses what no ACL allows.
The controllers stay on plaintext loopback; their principal (ANONYMOUS) is a
super user, as the brokers' requests to them need. DIR/secure holds the CA
(`ca.pem` for clients), the keystores, one `NAME.password` file per user and
`client.env`, the admin's client settings as KAFKA_* variable lines, which
`up` also prints before the bootstrap line.

This file is the entry point; the modules beside it do the work: `cli`
(the commands), `cluster` (the layout in DIR), `storage` (server.properties
and the format), `security` (`--secure`), `process` (the JVMs), `probe`
(the readiness probes, through aiokafka's client and the checkout's
`krabka.kafka`; so run it with the project's virtualenv, .venv/bin/python)
and `errors`.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run by path (`python deploy/kafka/kafka.py`): its modules are `deploy.kafka.*`
# of this checkout.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from deploy.kafka.cli import main

if __name__ == "__main__":
    sys.exit(main())
