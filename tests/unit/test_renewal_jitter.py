"""Renewals are jittered inside a bounded window: roles acquired together
renew spread over the last fifth of the renew interval, never later than one
interval after the previous renewal, on a schedule a ManualClock replays
exactly."""

from __future__ import annotations

import itertools
from collections import defaultdict

from krabka.tenure import RENEW_JITTER, renewal_delay_ms
from tests.support.sim import Cluster, quiesce

ROLES = 100
LEASE_S, RENEW_S, STAGGER_S = 30.0, 10.0, 5.0
RENEW_MS = round(RENEW_S * 1000)
WINDOW_MS = round(RENEW_JITTER * RENEW_MS)


async def run_until(cluster: Cluster, end_ms: int) -> None:
    """Move the clock from one sleeper's instant to the next, up to `end_ms`,
    so every renewal is written at exactly the instant it was due."""
    clock = cluster.clock
    while True:
        await quiesce()
        wake = clock.next_wake_ms
        if wake is None or wake > end_ms:
            return
        clock.advance_ms(max(wake - clock.now_ms(), 0))


async def renewals_of_roles_acquired_at_one_instant(renewals: int
                                                    ) -> tuple[int, dict[str, list[int]]]:
    """The acquisition instant, and each role's lease grants (its first lease,
    then every renewal) over `renewals` renew intervals."""
    cluster = Cluster(partitions=16)
    tasks = [cluster.candidate("a", role=f"role-{i:03d}", lease_duration=LEASE_S,
                               renew_interval=RENEW_S, challenge_stagger=STAGGER_S)
             for i in range(ROLES)]
    await quiesce()
    acquired_at = cluster.clock.now_ms()
    assert all(task.done() for task in tasks), "acquired without the clock moving"
    grants: dict[str, list[int]] = defaultdict(list)
    held = [task.result() for task in tasks]
    for leadership in held:
        grants[leadership.role].append(leadership.lease.granted_at)
        leadership.on_renewed = (
            lambda lease, _latency, role=leadership.role: grants[role].append(lease.granted_at))
    await run_until(cluster, acquired_at + renewals * RENEW_MS)
    for leadership in held:
        assert not leadership.done.done()
        await leadership.resign()
    return acquired_at, grants


async def test_roles_acquired_at_one_instant_renew_spread_over_the_window():
    acquired_at, grants = await renewals_of_roles_acquired_at_one_instant(5)
    assert all(times[0] == acquired_at for times in grants.values())
    first = sorted(times[1] - acquired_at for times in grants.values())
    assert first[0] >= RENEW_MS - WINDOW_MS
    assert first[-1] <= RENEW_MS
    assert first[-1] - first[0] >= 0.9 * WINDOW_MS  # the whole window is used
    assert len(set(first)) >= 0.9 * ROLES          # hardly two roles at one instant
    tenth = WINDOW_MS // 10
    busiest = max(sum(1 for t in first if start <= t < start + tenth)
                  for start in range(RENEW_MS - WINDOW_MS, RENEW_MS, tenth))
    assert busiest <= 0.2 * ROLES  # no tenth of the window holds a fifth of the roles


async def test_no_renewal_comes_later_than_one_renew_interval_after_the_previous():
    _, grants = await renewals_of_roles_acquired_at_one_instant(5)
    gaps = [later - earlier for times in grants.values()
            for earlier, later in itertools.pairwise(times)]
    assert len(gaps) >= 4 * ROLES
    assert all(RENEW_MS - WINDOW_MS <= gap <= RENEW_MS for gap in gaps)


async def test_the_schedule_is_the_same_every_run():
    _, one = await renewals_of_roles_acquired_at_one_instant(3)
    _, other = await renewals_of_roles_acquired_at_one_instant(3)
    assert [times[1:] for times in one.values()] == [times[1:] for times in other.values()]


def test_the_delay_stays_in_the_window_and_varies_by_role_member_and_renewal():
    delays = {(role, member, count): renewal_delay_ms(role, member, count, RENEW_MS)
              for role in ("billing", "ledger", "r" * 200) for member in ("a", "b")
              for count in range(500)}
    assert all(RENEW_MS - WINDOW_MS <= d <= RENEW_MS for d in delays.values())
    assert len(set(delays.values())) >= 0.7 * (WINDOW_MS + 1)  # most of the window's instants
    sequences = {(role, member): [delays[(role, member, count)] for count in range(500)]
                 for role, member, _ in delays}
    assert len({tuple(sequence) for sequence in sequences.values()}) == len(sequences)
    assert renewal_delay_ms("billing", "a", 7, RENEW_MS) == delays[("billing", "a", 7)]
