"""PostgreSQL stopped for 30 s under steady load, then restarted: serving goes on, no record lost or doubled."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from tests.faults.conftest import StackFactory
from tests.faults.load import SteadyLoad, served_ids, summary
from tests.faults.records import (
    peak_backlog,
    record_counts,
    report,
    sample_readiness,
    wait_for_records,
    watch_records,
)

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]

OUTAGE_S = 30.0
LEAD_S = 3.0  # load before the database goes away
RATE_PER_S = 50.0


async def test_postgres_outage_under_load_loses_and_doubles_nothing(
    fault_stack: StackFactory, record_property: Callable[[str, object], None]
) -> None:
    stack = fault_stack(gateways=2)
    team_id, key = stack.new_team("pg-outage")
    warmed = stack.warm(key)
    postgres = stack.stores.postgres
    load = SteadyLoad(stack.urls, key, RATE_PER_S)
    sampling_done, watching_done = asyncio.Event(), asyncio.Event()
    sampler = asyncio.create_task(sample_readiness(stack.urls, sampling_done))
    running = asyncio.create_task(load.run(LEAD_S + OUTAGE_S + 2))

    await asyncio.sleep(LEAD_S)
    await asyncio.to_thread(postgres.stop)
    await asyncio.sleep(OUTAGE_S)
    sampling_done.set()
    during_outage = await sampler
    await asyncio.to_thread(postgres.start)
    watcher = asyncio.create_task(watch_records(stack.database_url, team_id, watching_done))
    outcomes = await running
    served = served_ids(outcomes) | warmed
    records = await wait_for_records(stack.database_url, team_id, served)
    watching_done.set()
    drain = await watcher

    assert summary(outcomes) == {"200": len(outcomes)}  # keys from cache: every request served
    assert served - records.keys() == set()  # every served request has its record
    assert await record_counts(stack.database_url, team_id) == (len(records), len(records))
    assert len(records) <= stack.stores.upstream.stats()["total"]  # one record per upstream call at most
    backlog = peak_backlog(during_outage)
    assert backlog > 0  # the records really waited in the buffer
    last = during_outage[-len(stack.urls) :]  # readyz told: serving, degraded (the keys are cached)
    assert all(s.get("http_status") == 200 and "database" in s["degraded"] for s in last)
    report(
        record_property,
        "postgres_outage",
        {
            "outage_s": OUTAGE_S,
            "requests": len(outcomes),
            "served": len(served),
            "records": len(records),
            "peak_buffer_depth": backlog,
            "drain_s_after_restart": drain.seconds_until(len(served)),
            "records_per_s_catching_up": round(drain.catch_up_rate(len(records)) or 0),
            "finished_at": time.strftime("%H:%M:%S"),
        },
    )
