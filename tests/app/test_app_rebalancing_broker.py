"""Rebalancing in a real worker group on the real broker: two workers under
``balanced`` placement hold 12 roles; a third joins and receives roles only
by handovers (a resignation and the successor's claim), none left vacant
longer than one stagger by the state topic's record timestamps, and
``GET /rebalance/`` shows the plans and every handover made; so does the
dashboard, opened before the third worker joins, without a reload.

Every wait polls a condition with a deadline; every worker is stopped by PID.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.app.test_app_harness import AppGroup, AppWorker, get_json
from tests.support.browser import Browser, chromium
from tests.support.rebalancing import vacancies

pytestmark = pytest.mark.integration

T = TypeVar("T")

ROLES = 12
PARTITIONS = 6
LEASE, RENEW, STAGGER = 3.0, 1.0, 1.0
INTERVAL = 1.5
APP = "tests.app.balanced_app"
START = 60.0
"""A worker's start-up, group join and first registrations, on a 2-core machine."""
SETTLE = 45.0
POLL = 0.2
MOVES_SHOWN = ("[...document.querySelectorAll('#moves li')].map(li => "
               "[li.dataset.role, li.dataset.from, li.dataset.to])")
PLANS_SHOWN = "[...document.querySelectorAll('#plans li')].map(li => li.dataset.worker)"


def _until(condition: Callable[[], T | None], within: float, what: str,
           workers: list[AppWorker], describe: Callable[[], str] | None = None) -> T:
    """`condition()`'s first truthy value; fail at once if one of `workers` exits.
    On a timeout the failure ends with `describe()`: the state the wait ended in."""
    deadline = time.monotonic() + within
    last: Any = None
    while True:
        for worker in workers:
            assert worker.alive(), f"worker {worker.port} exited:\n{worker.log_tail()}"
        try:
            last = condition()
        except OSError as exc:  # a web view not answering yet
            last = exc
        if last and not isinstance(last, Exception):
            return last
        if time.monotonic() > deadline:
            state = f"\n{describe()}" if describe is not None else ""
            raise AssertionError(f"{what}: not within {within} s (last: {last!r}){state}")
        time.sleep(POLL)


def _held(worker: AppWorker) -> set[str]:
    health = worker.health() or {"roles": {}}
    return {role for role, runner in health["roles"].items() if runner["leading"]}


def _split(workers: list[AppWorker]) -> dict[str, set[str]] | None:
    """Each worker's held roles, when every role is held by exactly one."""
    split = {w.member: _held(w) for w in workers}
    held = [role for roles in split.values() for role in roles]
    return split if len(held) == len(set(held)) == ROLES else None


def _vacancies_ms(group: AppGroup) -> list[int]:
    """Per role, the time from each lease tombstone to the role's next lease
    record, by the records' timestamps (committed records only)."""
    found, cleared = vacancies(group.read(group.state_topic))
    assert not cleared, f"roles left vacant at the end: {sorted(cleared)}"
    return [vacancy.ms for vacancy in found]


@contextlib.contextmanager
def balanced_group(bootstrap: str, folder: Path, *, roles: int, partitions: int,
                   lease: float, renew: float, stagger: float, interval: float
                   ) -> Iterator[AppGroup]:
    """A group of `APP`'s workers, each standing for `roles` roles under ``balanced``
    placement, on fresh topics; at the end every worker is stopped by PID, in
    parallel (each resigns its roles on SIGTERM, a few seconds each)."""
    group = AppGroup(bootstrap, folder, partitions=partitions, lease=lease, renew=renew,
                     stagger=stagger, extra_env={
                         "COORDINATION_PLACEMENT": "balanced",
                         "COORDINATION_REBALANCE_INTERVAL": str(interval),
                         "COORDINATION_TEST_ROLES": str(roles),
                         "COORDINATION_DEMO": ""})
    group.create_topics()
    try:
        yield group
    finally:
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(AppWorker.stop, group.workers))


@pytest.fixture
def group(kafka_bootstrap: str, tmp_path: Path) -> Iterator[AppGroup]:
    with balanced_group(kafka_bootstrap, tmp_path, roles=ROLES, partitions=PARTITIONS,
                        lease=LEASE, renew=RENEW, stagger=STAGGER, interval=INTERVAL) as group:
        yield group


def _settled(workers: list[AppWorker], asked: AppWorker) -> dict[str, Any] | None:
    """`asked`'s ``GET /rebalance/`` once every worker's last plan counts all of
    `workers` live, none of them still standing up, and plans no handover, and
    every role is held once."""
    status, body = get_json(f"{asked.url}/rebalance/", timeout=3)
    if status != 200 or body["unavailable"] or len(body["workers"]) != len(workers):
        return None
    for worker in body["workers"]:
        plan = worker["plan"]
        if (plan is None or len(plan["members"]) != len(workers) or plan["moves"]
                or plan["standing"]):
            return None
    return body if _split(workers) else None


async def test_a_joining_worker_receives_roles_by_handover_and_the_plan_is_shown(group):
    started = time.monotonic()
    first = [group.start(app_module=APP), group.start(app_module=APP)]
    await asyncio.to_thread(_until, lambda: _settled(first, first[0]), START,
                            "the first two holding every role, their plans settled", first)
    before = _split(first)
    assert before is not None
    async with contextlib.AsyncExitStack() as stack:
        browser = None
        if chromium() is not None:  # the dashboard too, where Debian's chromium is installed
            browser = await stack.enter_async_context(Browser())
            await browser.open(first[0].url + "/")
            await _shown(browser, PLANS_SHOWN, lambda plans: len(plans) == 2, "two plans")
        third = group.start(app_module=APP)
        workers = [*first, third]
        joined = time.monotonic()

        def received() -> dict[str, Any] | None:
            body = _settled(workers, first[0])
            return body if body and any(m["to"] == third.member for m in body["moves"]) \
                else None

        shown = await asyncio.to_thread(_until, received, SETTLE,
                                        "the third worker given roles, every plan settled",
                                        workers)
        if browser is not None:
            moves = [[m["role"], m["from"], m["to"]] for m in reversed(shown["moves"])]
            await _shown(browser, MOVES_SHOWN, lambda shown: shown == moves,
                         "the handovers on the dashboard, newest first")
            assert sorted(await browser.evaluate(PLANS_SHOWN)) == sorted(w.member
                                                                         for w in workers)
    after = _split(workers)
    assert after is not None
    handed = [move for move in shown["moves"] if move["to"] == third.member]
    # The third worker holds exactly the roles handed to it: it took none otherwise.
    assert after[third.member] == {move["role"] for move in handed}
    assert len(after[third.member]) <= -(-ROLES // 3)  # never past its fair share
    for move in handed:
        assert move["role"] in before[move["from"]]
        assert "over the fair share" in move["reason"]
        assert move["at"] > 0
    assert all(w["enabled"] and w["interval"] == INTERVAL for w in shown["workers"])
    gaps = await asyncio.to_thread(_vacancies_ms, group)
    assert len(gaps) >= len(shown["moves"])  # every handover: a tombstone, then a new lease
    assert max(gaps) <= STAGGER * 1000, gaps
    print(f"\nsplit of two {sorted(len(r) for r in before.values())}, of three "
          f"{sorted(len(r) for r in after.values())}; {len(shown['moves'])} handovers "
          f"({len(handed)} to the third), longest vacancy {max(gaps)} ms; two settled in "
          f"{joined - started:.1f} s, three {time.monotonic() - joined:.1f} s after the "
          f"third started; dashboard checked: {browser is not None}")


async def _shown(browser: Browser, expression: str, check: Callable[[Any], bool],
                 what: str, within: float = 15) -> Any:
    deadline = time.monotonic() + within
    while True:
        value = await browser.evaluate(expression)
        if check(value):
            return value
        assert time.monotonic() < deadline, f"{what}: still {value!r} after {within} s"
        await asyncio.sleep(POLL)
