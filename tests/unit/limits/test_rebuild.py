"""Counters rebuilt from the records: one query per counter at a time, a 503 when it cannot be had."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest

from gateway.errors import ServiceUnavailable
from gateway.limits.rebuild import SpendRebuilds
from gateway.limits.spend import Budget
from tests.unit.limits.conftest import NOV_3, Records

TEAM = Budget("team", "team_a", "2026-11", Decimal(1), "team_a")
KEY = Budget("key", "key_a", "2026-11", Decimal(1), "team_a")


class Seeds:
    def __init__(self) -> None:
        self.seeded: list[tuple[str, int]] = []

    async def __call__(self, counter: str, units: int) -> None:
        self.seeded.append((counter, units))


async def test_concurrent_rebuilds_of_one_counter_share_one_query() -> None:
    records, seeds = Records({("team", "team_a"): 7, ("key", "key_a"): 3}, delay_s=0.01), Seeds()
    rebuilds = SpendRebuilds(records, seeds)

    await asyncio.gather(*(rebuilds.rebuild([TEAM, KEY], NOV_3) for _ in range(20)))

    assert records.queries == 2
    assert sorted(seeds.seeded) == [(KEY.counter, 3), (TEAM.counter, 7)]


async def test_a_slow_rebuild_refuses_with_503_and_goes_on_for_the_next_request() -> None:
    records, seeds = Records({("team", "team_a"): 7}, delay_s=0.2), Seeds()
    rebuilds = SpendRebuilds(records, seeds, timeout_s=0.05)

    with pytest.raises(ServiceUnavailable) as raised:
        await rebuilds.rebuild([TEAM], NOV_3)

    assert raised.value.headers["retry-after"] == "1"
    await asyncio.sleep(0.25)
    assert seeds.seeded == [(TEAM.counter, 7)]


async def test_a_failed_rebuild_is_tried_again_by_the_next_request() -> None:
    records, seeds = Records(down=True), Seeds()
    rebuilds = SpendRebuilds(records, seeds)
    with pytest.raises(ServiceUnavailable):
        await rebuilds.rebuild([TEAM], NOV_3)

    records.down = False
    await rebuilds.rebuild([TEAM], NOV_3)

    assert (records.queries, seeds.seeded) == (2, [(TEAM.counter, 0)])
