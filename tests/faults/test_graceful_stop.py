"""SIGTERM under load loses nothing: the stopping gateway writes (or leaves in the stream) all it metered."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis

from tests.faults.conftest import FaultStack, StackFactory
from tests.faults.load import SteadyLoad, served_ids, summary
from tests.faults.records import (
    peak_backlog,
    record_counts,
    records_of,
    report,
    sample_readiness,
    wait_for_records,
)

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]

RATE_PER_S = 40.0


async def _wait_exit(stack: FaultStack, index: int) -> int:
    process = stack.gateways[index].process
    assert process is not None
    try:
        return await asyncio.to_thread(process.wait, 30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the gateway did not exit after SIGTERM:\n{stack.gateways[index].logs()[-3000:]}")


async def test_sigterm_drains_the_in_process_buffer_even_while_the_database_is_down(
    fault_stack: StackFactory, record_property: Callable[[str, object], None]
) -> None:
    """The embedded default (no Redis): what is buffered in memory must be written before exit."""
    stack = fault_stack(gateways=1, with_redis=False)
    team_id, key = stack.new_team("sigterm-memory")
    warmed = stack.warm(key)
    postgres = stack.stores.postgres
    sampling_done = asyncio.Event()
    sampler = asyncio.create_task(sample_readiness(stack.urls, sampling_done))
    running = asyncio.create_task(SteadyLoad(stack.urls, key, RATE_PER_S).run(8.0))

    await asyncio.sleep(2.0)
    await asyncio.to_thread(postgres.stop)  # the buffer now holds everything served
    await asyncio.sleep(3.0)
    sampling_done.set()
    backlog = peak_backlog(await sampler)
    stack.kill(stack.gateways[0], signal.SIGTERM)
    await asyncio.sleep(1.0)
    await asyncio.to_thread(postgres.start)  # comes back within the writer's 10 s drain
    exit_code = await _wait_exit(stack, 0)
    outcomes = await running

    served = served_ids(outcomes) | warmed
    records = await records_of(stack.database_url, team_id)  # no other writer: it is all there or lost
    assert exit_code in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has shut down
    assert backlog > 0
    assert served - records.keys() == set()
    assert await record_counts(stack.database_url, team_id) == (len(records), len(records))
    report(
        record_property,
        "sigterm_memory_buffer",
        {"served": len(served), "records": len(records), "buffered_at_sigterm": backlog, **summary(outcomes)},
    )


async def test_sigterm_of_one_of_two_gateways_leaves_nothing_pending(
    fault_stack: StackFactory, record_property: Callable[[str, object], None]
) -> None:
    stack = fault_stack(gateways=2)
    team_id, key = stack.new_team("sigterm-redis")
    warmed = stack.warm(key)
    stopping = stack.gateways[0]
    consumer = stack.consumer_of(stopping)
    running = asyncio.create_task(SteadyLoad(stack.urls, key, RATE_PER_S).run(6.0))

    await asyncio.sleep(3.0)
    stack.kill(stopping, signal.SIGTERM)
    exit_code = await _wait_exit(stack, 0)
    assert stack.redis_url is not None
    client = aioredis.Redis.from_url(stack.redis_url)
    try:  # what it read from the stream it wrote and acked before exiting
        consumers = {c["name"].decode(): c for c in await client.xinfo_consumers("gateway:usage", "writers")}
    finally:
        await client.aclose()
    outcomes = await running

    served = served_ids(outcomes) | warmed
    records = await wait_for_records(stack.database_url, team_id, served)
    assert exit_code in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has shut down
    assert consumers[consumer]["pending"] == 0
    assert served - records.keys() == set()
    assert await record_counts(stack.database_url, team_id) == (len(records), len(records))
    served_by_stopped = {o.request_id for o in outcomes if o.status == 200 and o.target == stopping.base_url}
    assert served_by_stopped  # the stopped gateway did serve part of the load
    report(
        record_property,
        "sigterm_redis_buffer",
        {"served": len(served), "served_by_stopped": len(served_by_stopped), **summary(outcomes)},
    )
