"""The peers' election recipes, as their own client libraries run them.

etcd: the ``clientv3/concurrency`` Election on the ``etcd3`` client (gRPC,
``protobuf<4``). A session is a lease with the bench's TTL kept alive every
renew interval; campaigning puts ``<prefix>/<lease id hex>`` under the lease
if it does not exist, then waits for the deletion of every key under the
prefix with a lower create revision (watching the newest older one each time,
as ``waitDeletes`` does); the leader is the key with the lowest create
revision (``Election.Leader``: one Range with limit 1, sorted by create
revision); resign deletes the key. The session is *done*, as Go's
``Session.Done()``, when a keep-alive answers TTL <= 0 or the last answered
keep-alive + TTL lies in the past (checked every 500 ms, as clientv3's lease
deadline loop does).

ZooKeeper: the ephemeral-sequential recipe of kazoo's ``Election``/``Lock``
with kazoo primitives (so the bench sees "registered" and "leading" as they
happen): create ``<path>/n_`` ephemeral and sequential in a session of the
bench's timeout, lead when it is the lowest child, else watch the next lower
child's deletion; resign deletes the node. Leadership is lost when kazoo
reports the connection SUSPENDED or LOST (what kazoo's documentation and
Curator's LeaderSelector treat as losing leadership).

Both are synchronous (their clients are); the worker runs them in threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

# --------------------------------------------------------------------------- etcd


def _increment_last_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] + 1])


class EtcdElection:
    """One candidate of an etcd ``concurrency`` election."""

    def __init__(self, endpoint: str, prefix: str, ttl: float, renew: float) -> None:
        import etcd3

        host, port = endpoint.rsplit(":", 1)
        self.client = etcd3.client(host=host, port=int(port), timeout=10)
        self.prefix = prefix.rstrip("/") + "/"
        self.ttl = ttl
        self.renew = renew
        self.lease: Any = None
        self.key = ""
        self.revision = 0
        self.last_alive = 0.0
        self.done = threading.Event()
        self.reason = ""

    # The session.

    def open_session(self) -> None:
        self.lease = self.client.lease(max(1, round(self.ttl)))
        self.last_alive = time.monotonic()

    def keepalive_once(self) -> float:
        """One keep-alive round trip; the TTL the server answered (<= 0: expired)."""
        ttl = -1.0
        for response in self.client.refresh_lease(self.lease.id):
            ttl = float(response.TTL)
        if ttl > 0:
            self.last_alive = time.monotonic()
        else:
            self.end("the lease expired (keep-alive answered TTL <= 0)")
        return ttl

    def deadline_passed(self) -> bool:
        """clientv3's lease deadline: the last answered keep-alive + TTL."""
        if time.monotonic() > self.last_alive + self.ttl:
            self.end("no keep-alive answer within the TTL")
        return self.done.is_set()

    def end(self, reason: str) -> None:
        if not self.done.is_set():
            self.reason = reason
            self.done.set()

    # The election.

    def register(self, value: str) -> None:
        """Put this session's key if it is not there yet; remember its create revision."""
        client = self.client
        self.key = f"{self.prefix}{self.lease.id:x}"
        client.transaction(
            compare=[client.transactions.create(self.key) == 0],
            success=[client.transactions.put(self.key, value, self.lease)],
            failure=[client.transactions.get(self.key)],
        )
        _, meta = client.get(self.key)
        if meta is None:
            raise RuntimeError(f"etcd: {self.key} vanished right after the campaign put")
        self.revision = int(meta.create_revision)

    def wait_leading(self, stop: threading.Event) -> bool:
        """Block until every older key is deleted (waitDeletes); False if stopped."""
        while not stop.is_set() and not self.done.is_set():
            older = self._range(self.prefix, limit=1, newest_first=True,
                                max_create_revision=self.revision - 1)
            if not older:
                return True
            gone = threading.Event()
            older_key = bytes(older[0].key)

            def on_event(response: Any, gone: threading.Event = gone) -> None:
                events = getattr(response, "events", None)
                if events is None or any(type(e).__name__ == "DeleteEvent" for e in events):
                    gone.set()

            watch_id = self.client.add_watch_callback(older_key, on_event)
            try:
                # The key may have gone between the range and the watch.
                if self._range(older_key, limit=1, exact=True):
                    while not gone.wait(0.1):
                        if stop.is_set() or self.done.is_set():
                            return False
            finally:
                self.client.cancel_watch(watch_id)
        return False

    def resign(self) -> None:
        """Delete this candidate's key if it is still this session's (Election.Resign)."""
        client = self.client
        client.transaction(
            compare=[client.transactions.create(self.key) == self.revision],
            success=[client.transactions.delete(self.key)],
            failure=[],
        )

    def close(self) -> None:
        try:
            if self.lease is not None and not self.done.is_set():
                self.client.revoke_lease(self.lease.id)
        finally:
            self.client.close()

    # Reads.

    def leader(self) -> tuple[bytes, bytes] | None:
        """Election.Leader: the key with the lowest create revision, in one Range."""
        found = self._range(self.prefix, limit=1)
        return (bytes(found[0].key), bytes(found[0].value)) if found else None

    def _range(self, key: str | bytes, *, limit: int, newest_first: bool = False,
               max_create_revision: int = 0, exact: bool = False) -> list[Any]:
        from etcd3.etcdrpc import rpc_pb2

        raw = key.encode() if isinstance(key, str) else key
        request = rpc_pb2.RangeRequest(key=raw, limit=limit)
        if not exact:
            request.range_end = _increment_last_byte(raw)
            request.sort_target = rpc_pb2.RangeRequest.CREATE
            request.sort_order = (rpc_pb2.RangeRequest.DESCEND if newest_first
                                  else rpc_pb2.RangeRequest.ASCEND)
        if max_create_revision:
            request.max_create_revision = max_create_revision
        client = self.client
        response = client.kvstub.Range(request, client.timeout,
                                       credentials=client.call_credentials,
                                       metadata=client.metadata)
        return list(response.kvs)


def etcd_leader_reader(endpoint: str, prefix: str) -> Callable[[], Any]:
    """A third party's "who leads" read for an etcd election: one Range."""
    election = EtcdElection(endpoint, prefix, ttl=3, renew=1)
    return election.leader


# --------------------------------------------------------------------------- ZooKeeper


def _sequence(name: str) -> int:
    return int(name.rsplit("_", 1)[-1])


class ZkElection:
    """One candidate of the ephemeral-sequential election (kazoo's Election recipe)."""

    def __init__(self, endpoint: str, path: str, session_timeout: float,
                 on_lost: Callable[[str], None] | None = None) -> None:
        from kazoo.client import KazooClient
        from kazoo.protocol.states import KazooState

        self._states = KazooState
        self.client = KazooClient(hosts=endpoint, timeout=session_timeout)
        self.path = path.rstrip("/")
        self.node = ""
        self.lost = threading.Event()
        self.reason = ""
        self._on_lost = on_lost

    def start(self) -> None:
        self.client.add_listener(self._state)
        self.client.start(timeout=15)
        self.client.ensure_path(self.path)

    def _state(self, state: Any) -> None:
        if state in (self._states.SUSPENDED, self._states.LOST) and not self.lost.is_set():
            self.reason = f"the ZooKeeper session is {state}"
            self.lost.set()
            if self._on_lost is not None:
                self._on_lost(self.reason)

    def register(self, value: str) -> None:
        self.node = self.client.create(f"{self.path}/n_", value.encode(), ephemeral=True,
                                       sequence=True)

    def wait_leading(self, stop: threading.Event) -> bool:
        mine = self.node.rsplit("/", 1)[-1]
        while not stop.is_set() and not self.lost.is_set():
            children = sorted(self.client.get_children(self.path), key=_sequence)
            if mine not in children:
                raise RuntimeError(f"ZooKeeper: our node {self.node} is gone")
            index = children.index(mine)
            if index == 0:
                return True
            gone = threading.Event()
            if self.client.exists(f"{self.path}/{children[index - 1]}",
                                  watch=lambda _event, gone=gone: gone.set()):
                while not gone.wait(0.1):
                    if stop.is_set() or self.lost.is_set():
                        return False
        return False

    def resign(self) -> None:
        self.client.delete(self.node)

    def close(self) -> None:
        try:
            self.client.stop()
        finally:
            self.client.close()

    def leader(self) -> bytes | None:
        """A third party's "who leads": the children, then the lowest child's data."""
        children = self.client.get_children(self.path)
        if not children:
            return None
        data, _stat = self.client.get(f"{self.path}/{min(children, key=_sequence)}")
        return bytes(data)
