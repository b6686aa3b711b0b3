"""The election figures' rows, from the events their candidate processes print: every
system's time ends at the new leader's "leading" (its first write is a row of its own),
the first rounds of a handover are reported apart, and every system has an overshoot
past the deadline it enforces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import figures
from bench.context import Bench, Timing
from bench.services import ZkSession, parse_cons
from bench.worker import Worker


class Candidate:
    """A candidate process that has printed `events` (each ``(name, t, fields)``)."""

    def __init__(self, *events: tuple[str, float, dict[str, Any]]) -> None:
        self.events = [{"event": name, "t": t, **fields} for name, t, fields in events]
        self.signals: list[int] = []
        self.killed = False

    def find(self, event: str, **match: Any) -> dict[str, Any] | None:
        for seen in self.events:
            if seen["event"] == event and all(seen.get(k) == v for k, v in match.items()):
                return seen
        return None

    def wait_for(self, event: str, timeout: float, **match: Any) -> dict[str, Any]:
        found = self.find(event, **match)
        if found is None:
            raise TimeoutError(event)
        return found

    def signal(self, signum: int) -> None:
        self.signals.append(signum)

    def kill(self) -> None:
        self.killed = True

    def stop(self, timeout: float = 10.0) -> None:
        pass


def _bench(tmp_path: Path, **more: Any) -> Bench:
    bench = Bench(tmp_path, 2, True, Timing(3.0, 0.0, 0.5),
                  systems=["krabka", "etcd", "zookeeper"], **more)

    async def no_topic(*args: Any, **kwargs: Any) -> None:
        return None
    bench.create_topic = no_topic  # type: ignore[method-assign]
    return bench


def _rows(bench: Bench) -> dict[tuple[str, str, str | None], list[float]]:
    return {(r.figure, r.system, r.metric): r.samples for r in bench.results}


async def test_a_handover_ends_at_leading_for_every_system_and_its_first_write_is_a_row(
        tmp_path: Path) -> None:
    bench = _bench(tmp_path, warmup=1, cold=2)

    async def pair(system: str, role: str, output: str, **_: Any) -> tuple[Any, Any]:
        old = Candidate(("resigning", 100.0, {}), ("resigned", 103.0, {}))
        new = Candidate(("leading", 112.0, {}), ("wrote", 120.0, {"seq": 1}))
        return old, new
    bench.pair = pair  # type: ignore[method-assign]
    await figures.graceful_handover(bench)
    rows = _rows(bench)
    for system in ("krabka", "etcd", "zookeeper"):
        assert rows[("graceful-handover", system, None)] == [12.0, 12.0]
        assert rows[("graceful-handover", system, "first-write")] == [20.0, 20.0]
        # The warm-up round and the first timed one: the invocation's first two.
        assert rows[("graceful-handover", system, "cold")] == [12.0, 12.0]
    cold = next(r for r in bench.results if r.metric == "cold")
    assert cold.extra["first_write_ms"] == [20.0, 20.0]
    assert cold.configuration["figures_run_before"] == []
    first = next(r for r in bench.results if r.metric is None)
    assert first.extra["warmup_ms"] == [12.0]
    assert first.configuration["end"] == figures.LEADING


async def test_a_crash_is_timed_to_leading_and_each_system_overshoots_its_own_deadline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench(tmp_path)
    monkeypatch.setattr(figures, "now_ms", lambda: 1000.0)

    async def lease_deadline(bench: Bench, role: str, member: str) -> int:
        return 3990

    async def session_expiry(bench: Bench, session: str) -> float:
        assert session == "0x1f"
        return 3995.0
    monkeypatch.setattr(figures, "_last_krabka_deadline", lease_deadline)
    monkeypatch.setattr(figures, "_zookeeper_expiry", session_expiry)
    leaders: dict[str, Candidate] = {}

    async def pair(system: str, role: str, output: str, **_: Any) -> tuple[Any, Any]:
        leaders[system] = Candidate(
            ("ready", 0.0, {"session": "0x1f"}),
            ("session", 2.0, {"sent": 0.0, "ttl": 3}),
            ("renewed", 982.0, {"sent": 980.0, "ttl": 3}),
            ("renewed", 1500.0, {"sent": 1499.0, "ttl": 3}))  # answered after the crash
        return leaders[system], Candidate(("leading", 4000.0, {}), ("wrote", 4010.0, {}))
    bench.pair = pair  # type: ignore[method-assign]
    await figures.crash_failover(bench)
    rows = _rows(bench)
    for system in ("krabka", "etcd", "zookeeper"):
        assert rows[("crash-failover", system, None)] == [3000.0, 3000.0]
        assert rows[("crash-failover", system, "first-write")] == [3010.0, 3010.0]
        # Stopped before it is killed, so nothing it does after counts.
        assert leaders[system].signals[0] == figures.signal.SIGSTOP
        assert leaders[system].killed
    assert rows[("deadline-overshoot", "krabka", None)] == [10.0, 10.0]
    assert rows[("deadline-overshoot", "etcd", None)] == [19.0, 19.0]  # 4000 - (981 + 3000)
    assert rows[("deadline-overshoot", "zookeeper", None)] == [5.0, 5.0]


def test_etcd_s_deadline_is_the_last_renewal_answered_before_the_crash_plus_the_ttl() -> None:
    events = [{"event": "session", "t": 2.0, "sent": 0.0, "ttl": 3},
              {"event": "leading", "t": 50.0}]
    assert figures.etcd_lease_deadline(events, 100.0) == 3001.0
    assert figures.etcd_lease_deadline(events, 1.0) is None


def test_zookeeper_s_sessions_are_read_from_cons_and_expire_on_the_next_tick() -> None:
    answer = (" /127.0.0.1:50964[0](queued=0,recved=1,sent=0)\n"
              " /127.0.0.1:50950[1](queued=0,recved=4,sent=4,sid=0x1000025e6fd0000,lop=PING,"
              "est=1796631360743,to=3000,lcxid=0x0,lzxid=0x1,lresp=2486419,llat=0,minlat=0,"
              "avglat=3,maxlat=11)\n")
    sessions = parse_cons(answer)
    assert sessions == {"0x1000025e6fd0000": ZkSession("0x1000025e6fd0000", 2486419, 3000)}
    # 2 486 419 + 3 000 = 2 489 419, filed at the next multiple of the 200 ms tick.
    assert sessions["0x1000025e6fd0000"].expiry(200) == 2489600
    assert ZkSession("0x1", 1000, 3000).expiry(200) == 4200


def test_a_resignation_is_stamped_once_when_its_signal_arrives(
        capsys: pytest.CaptureFixture[str]) -> None:
    import argparse
    import json

    w = Worker(argparse.Namespace())
    w.seq = 4
    w.resign_now()
    w.resign_now()
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["event"], e["seq"]) for e in lines] == [("resigning", 4)]
    assert w.resign.is_set()
