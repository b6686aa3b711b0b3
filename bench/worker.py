"""One candidate process of a benchmark: krabka, etcd or ZooKeeper.

    python -m bench.worker --system krabka --role R --member M --bootstrap-servers B ...

Prints one JSON object a line, each with ``t`` (wall clock, float epoch ms,
the same clock the orchestrator and the other workers read):

    ready        clients are up, campaigning starts (ZooKeeper: with ``session``,
                 the session id in hex, as the server's ``cons`` lists it)
    session      etcd: the lease was granted (``sent``: when the grant was asked)
    renewed      etcd: a keep-alive was answered (``sent``: when it was sent; the
                 server renewed the lease in between)
    registered   this candidate is in the queue (roster / create revision / node)
    leading      it leads (krabka: the first lease record is committed; term mode:
                 its claim won the term, reported as ``term``)
    wrote        a write to the output topic was acknowledged (``seq``); krabka:
                 a guarded transaction committed, the first one of a tenure
                 in epoch mode with its first lease (``first``), reported
                 right after ``leading`` (term mode: its record,
                 stamped with the term, acknowledged); peers: a plain produce acked,
                 sent only after the recipe's own leadership check passed
    lost         it noticed the end of its leadership (``reason``)
    resigning    SIGUSR1 arrived, stamped in its handler (every system alike, before
                 a write in flight ends): it stops writing and resigns now
    resigned     the resignation returned
    pausing      SIGUSR2 armed the in-flight pause and its next write reached it:
                 the worker stops itself now (SIGSTOP), after the last leadership
                 check and before the record goes to the broker

SIGUSR1 resigns and exits; SIGUSR2 arms the in-flight pause (`InFlightPause`);
SIGTERM exits (krabka resigns first). While
leading it writes one record to ``--output`` every ``--interval`` seconds:
JSON with system, member, seq. krabka runs the library's `LeaderRunner` for
one tenure: a resignation stops the writes first, then resigns; ``lost`` is
printed the moment the tenure ends on its own, and the worker then exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Any


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "t": time.time() * 1000, **fields}), flush=True)


class InFlightPause:
    """The zombie-in-flight figure's pause: armed by SIGUSR2, taken once by the next
    write at the point each system's write calls `here()`, past its last check.

    The process stops itself, so the pause falls exactly between the check and
    the broker, which a SIGSTOP from outside cannot aim at.
    """

    def __init__(self) -> None:
        self.armed = False

    def arm(self) -> None:
        self.armed = True

    def here(self, seq: int) -> None:
        if self.armed:
            self.armed = False
            emit("pausing", seq=seq)
            os.kill(os.getpid(), signal.SIGSTOP)


class Worker:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.resign = asyncio.Event()
        self.asked_to_resign = False
        self.stop = asyncio.Event()
        self.in_flight = InFlightPause()
        self.seq = 0

    def record(self) -> bytes:
        self.seq += 1
        return json.dumps({"system": self.args.system, "member": self.args.member,
                           "seq": self.seq}).encode()

    def resign_now(self) -> None:
        """SIGUSR1's handler: the resignation is timed from here, in every system."""
        if not self.asked_to_resign:
            self.asked_to_resign = True
            emit("resigning", seq=self.seq)
        self.resign.set()

    async def pause(self) -> bool:
        """Sleep one write interval; True if a resign or stop arrived meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._either(), self.args.interval)
        return self.resign.is_set() or self.stop.is_set()

    async def _either(self) -> None:
        waits = [asyncio.ensure_future(self.resign.wait()),
                 asyncio.ensure_future(self.stop.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()


# --------------------------------------------------------------------------- krabka


async def run_krabka(w: Worker) -> None:
    """The library's `LeaderRunner` for one tenure: the worker exits when it ends."""
    from krabka import (
        FencedError,
        LeaderRunner,
        Leadership,
        LeadershipOptions,
        RunnerObserver,
        RunnerState,
        TenureStop,
        TermToken,
        describe_role_state,
    )
    from krabka.epoch.tenure import EpochLeadership
    from krabka.kafka import KafkaTransport

    a = w.args
    over = asyncio.Event()

    first_rode: list[int] = []  # the seq of the write the tenure's first lease carried

    async def first(txn: Any) -> None:
        """The tenure's first write, in the transaction of its first lease."""
        await txn.send(a.output, w.record(), key=a.member.encode(), partition=0)
        first_rode[:] = [w.seq]

    async def work(leadership: Leadership) -> None:
        """One guarded write per interval until the runner cancels this; in epoch
        mode the first one rode in the first lease's transaction."""
        if first_rode:
            await asyncio.sleep(a.interval)
        while True:
            try:
                async with leadership.transaction() as txn:
                    await txn.send(a.output, w.record(), key=a.member.encode(), partition=0)
            except FencedError:
                await asyncio.wait({leadership.done})  # the runner cancels this then
                return
            emit("wrote", seq=w.seq)
            await asyncio.sleep(a.interval)

    class Reporter(RunnerObserver):
        def __init__(self) -> None:
            self.runner: LeaderRunner | None = None
            self.noticed = False

        def elected(self, role: str, leadership: Leadership) -> None:
            token = leadership.token
            if isinstance(token, TermToken):
                emit("leading", term=token.term, tenure=leadership.tenure,
                     fence_deadline=leadership.fence_deadline)
            else:
                assert isinstance(leadership, EpochLeadership)  # an epoch token's tenure
                emit("leading", producer_id=token.producer_id,
                     producer_epoch=token.producer_epoch, tenure=leadership.tenure,
                     deadline=leadership.lease.deadline)
                if first_rode:
                    emit("wrote", seq=first_rode[0], first=True)
            leadership.done.add_done_callback(lambda _: self._ended(leadership))

        def _ended(self, leadership: Leadership) -> None:
            # Still LEADING: nobody asked for a hand-over, so the tenure ended
            # on its own; reported now, not after the runner's hand-over.
            if self.runner is not None and self.runner.state is RunnerState.LEADING:
                self._lost(str(leadership.err))

        def _lost(self, reason: str) -> None:
            if not self.noticed:
                self.noticed = True
                emit("lost", reason=reason, seq=w.seq)

        def lost(self, role: str, leadership: Leadership, stop: TenureStop) -> None:
            if stop.reason != "stopped":
                self._lost(stop.error or stop.reason)
                over.set()

    def pause_before_the_broker(transport: KafkaTransport) -> None:
        """Put `w.in_flight` where a data write leaves the library for the broker:
        term mode's `write_output` (after the tenure's last check), epoch mode's
        commit of a transaction that carries a data record."""
        if a.fencing == "term":
            write_output = transport.write_output

            async def paused_write(*args: Any, **kwargs: Any) -> int:
                w.in_flight.here(w.seq)
                return await write_output(*args, **kwargs)
            transport.write_output = paused_write  # type: ignore[method-assign]
            return
        begin = transport.begin_transaction

        async def paused_begin(*args: Any, **kwargs: Any) -> Any:
            txn = await begin(*args, **kwargs)
            send, commit = txn.send, txn.commit
            data = False

            async def sending(*s_args: Any, **s_kwargs: Any) -> None:
                nonlocal data
                data = True
                await send(*s_args, **s_kwargs)

            async def committing() -> None:
                if data:
                    w.in_flight.here(w.seq)
                await commit()
            txn.send, txn.commit = sending, committing  # type: ignore[method-assign]
            return txn
        transport.begin_transaction = paused_begin  # type: ignore[method-assign]

    reporter = Reporter()
    # The output is declared in both modes: term mode barriers it before the
    # tenure's first write; in epoch mode the standby reads its metadata ahead.
    outputs = (a.output,)
    async with KafkaTransport(a.bootstrap_servers, topic=a.state_topic,
                              terms_topic=a.terms_topic,
                              tail_wait_ms=a.tail_wait_ms) as transport:
        pause_before_the_broker(transport)
        runner = LeaderRunner(
            transport, a.role, a.member, work,
            options=LeadershipOptions(a.partitions, a.lease, a.renew, a.stagger,
                                      fencing=a.fencing, outputs=outputs),
            observer=reporter,
            first=first if a.fencing == "epoch" else None,
        )
        reporter.runner = runner
        emit("ready")
        running = runner.start()
        try:
            while not running.done() and runner.state is RunnerState.CAMPAIGNING:
                state = await describe_role_state(transport, a.role, a.partitions)
                if a.member in state.roster:
                    break
                await asyncio.wait([running], timeout=0.02)
            emit("registered")
            ending = [asyncio.ensure_future(event.wait()) for event in (w.resign, w.stop, over)]
            try:
                await asyncio.wait([running, *ending], return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in ending:
                    waiting.cancel()
            if running.done() or over.is_set():
                await runner.stop(deregister=False)  # one tenure per worker
            elif runner.state is RunnerState.LEADING:
                # The runner stops the function first, then resigns.
                await runner.stop(deregister=True)
                emit("resigned")
            else:
                await runner.stop(deregister=False)
        finally:
            await runner.stop(deregister=False)
            running.result()


# --------------------------------------------------------------------------- peers


async def plain_producer(bootstrap: str) -> Any:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                enable_idempotence=True, linger_ms=0)
    await producer.start()
    return producer


async def lead_with_plain_writes(w: Worker, producer: Any, still_leader: Any) -> bool:
    """Write while `still_leader()` holds; True when a resign was asked, False when lost."""
    a = w.args
    while True:
        if not still_leader():
            return False
        w.in_flight.here(w.seq + 1)
        await producer.send_and_wait(a.output, w.record(), key=a.member.encode(), partition=0)
        emit("wrote", seq=w.seq)
        if await w.pause():
            return True


async def run_etcd(w: Worker) -> None:
    from bench.peers import EtcdElection

    a = w.args
    election = EtcdElection(a.etcd, f"/bench/{a.role}", ttl=a.lease, renew=a.renew)
    producer = await plain_producer(a.bootstrap_servers)
    stop_thread = threading.Event()
    lost_task: asyncio.Task[None] | None = None
    keeper: asyncio.Future[Any] | None = None
    try:
        sent = time.time() * 1000
        await asyncio.to_thread(election.open_session)
        emit("session", sent=sent, ttl=election.lease.ttl)
        emit("ready")

        async def keepalive() -> None:
            while not election.done.is_set():
                await asyncio.sleep(a.renew)
                with contextlib.suppress(Exception):
                    sent = time.time() * 1000
                    ttl = await asyncio.to_thread(election.keepalive_once)
                    if ttl > 0:
                        emit("renewed", ttl=ttl, sent=sent)

        async def deadline_loop() -> None:
            # clientv3's lease deadline loop: a 500 ms ticker, not an event.
            while not election.deadline_passed():  # noqa: ASYNC110
                await asyncio.sleep(0.5)

        keeper = asyncio.ensure_future(asyncio.gather(keepalive(), deadline_loop()))
        await asyncio.to_thread(election.register, a.member)
        emit("registered", revision=election.revision)
        campaign = asyncio.ensure_future(asyncio.to_thread(election.wait_leading, stop_thread))
        stopping = asyncio.ensure_future(w.stop.wait())
        await asyncio.wait([campaign, stopping], return_when=asyncio.FIRST_COMPLETED)
        if not campaign.done() or not campaign.result():
            stop_thread.set()
            return
        stopping.cancel()
        emit("leading", revision=election.revision)

        async def noticed() -> None:
            await asyncio.to_thread(election.done.wait)
            emit("lost", reason=election.reason, seq=w.seq)

        lost_task = asyncio.ensure_future(noticed())
        resigned = await lead_with_plain_writes(w, producer, lambda: not election.done.is_set())
        if resigned:
            await asyncio.to_thread(election.resign)
            emit("resigned")
        else:
            await lost_task
    finally:
        stop_thread.set()
        election.done.set()
        for task in (lost_task, keeper):
            if task is not None:
                task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.to_thread(election.close)
        await producer.stop()


async def run_zookeeper(w: Worker) -> None:
    from bench.peers import ZkElection

    a = w.args
    loop = asyncio.get_running_loop()
    lost = asyncio.Event()

    def on_lost(reason: str) -> None:
        loop.call_soon_threadsafe(lost.set)

    election = ZkElection(a.zookeeper, f"/bench/{a.role}", a.lease, on_lost)
    producer = await plain_producer(a.bootstrap_servers)
    stop_thread = threading.Event()
    try:
        await asyncio.to_thread(election.start)
        emit("ready", session=f"{election.client.client_id[0]:#x}")
        await asyncio.to_thread(election.register, a.member)
        emit("registered", node=election.node)
        campaign = asyncio.ensure_future(asyncio.to_thread(election.wait_leading, stop_thread))
        stopping = asyncio.ensure_future(w.stop.wait())
        await asyncio.wait([campaign, stopping], return_when=asyncio.FIRST_COMPLETED)
        if not campaign.done() or not campaign.result():
            stop_thread.set()
            return
        stopping.cancel()
        emit("leading", node=election.node)
        resigned = await lead_with_plain_writes(w, producer, lambda: not election.lost.is_set())
        if resigned:
            await asyncio.to_thread(election.resign)
            emit("resigned")
        else:
            await lost.wait()
            emit("lost", reason=election.reason, seq=w.seq)
    finally:
        stop_thread.set()
        with contextlib.suppress(Exception):
            await asyncio.to_thread(election.close)
        await producer.stop()


async def main_async(args: argparse.Namespace) -> int:
    w = Worker(args)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, w.resign_now)
    loop.add_signal_handler(signal.SIGUSR2, w.in_flight.arm)
    loop.add_signal_handler(signal.SIGTERM, w.stop.set)
    loop.add_signal_handler(signal.SIGINT, w.stop.set)
    runner = {"krabka": run_krabka, "etcd": run_etcd, "zookeeper": run_zookeeper}[args.system]
    await runner(w)
    emit("exit")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--system", choices=("krabka", "etcd", "zookeeper"), required=True)
    p.add_argument("--role", required=True)
    p.add_argument("--member", required=True)
    p.add_argument("--bootstrap-servers", required=True)
    p.add_argument("--state-topic", required=True)
    p.add_argument("--fencing", choices=("epoch", "term"), default="epoch",
                   help="krabka's fencing mode (docs/term-mode.md)")
    p.add_argument("--terms-topic", default="__coordination_terms",
                   help="krabka's terms topic (term mode)")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--output", required=True)
    p.add_argument("--lease", type=float, default=3.0)
    p.add_argument("--renew", type=float, default=1.0)
    p.add_argument("--stagger", type=float, default=0.5)
    p.add_argument("--interval", type=float, default=0.1)
    p.add_argument("--tail-wait-ms", type=int, default=200)
    p.add_argument("--etcd", default="127.0.0.1:52379")
    p.add_argument("--zookeeper", default="127.0.0.1:52181")
    p.add_argument("--log-level", default="WARNING")
    return p


def main() -> int:
    args = parser().parse_args()
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
