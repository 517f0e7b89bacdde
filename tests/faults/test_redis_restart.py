"""A Redis restart under load: serving goes on, pins hold, metering spools locally meanwhile.

Redis runs with append-only persistence and is stopped with SIGTERM (it flushes the file), so the
stream, its consumer group and the pins come back with it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import httpx
import pytest

from tests.faults.conftest import FaultStack, StackFactory
from tests.faults.load import CHAT_BODY, Outcome, SteadyLoad, served_ids, summary
from tests.faults.records import record_counts, report, sample_readiness, wait_for_records

pytestmark = [pytest.mark.faults, pytest.mark.timeout(150)]

BATCH = "redis-restart-batch"
DOWN_S = 5.0


def _pin_batch(stack: FaultStack, key: str) -> tuple[str, str]:
    """(request id, provider) of the batch's first request, which pins it."""
    response = httpx.post(
        f"{stack.urls[0]}/v1/chat/completions",
        json=CHAT_BODY,
        headers={"authorization": f"Bearer {key}", "x-gateway-batch": BATCH},
    )
    warnings = [line for line in stack.gateways[1].logs().splitlines() if '"level":"warning"' in line]
    assert response.status_code == 200, (response.text, warnings[-10:])
    return response.headers["x-request-id"], response.headers["x-gateway-provider"]


def _during(outcomes: Sequence[Outcome], window: tuple[float, float]) -> list[Outcome]:
    return [o for o in outcomes if window[0] <= o.sent_at <= window[1]]


async def test_a_redis_restart_keeps_the_service_up_and_every_record(
    fault_stack: StackFactory, record_property: Callable[[str, object], None]
) -> None:
    stack = fault_stack(gateways=2)
    team_id, key = stack.new_team("redis-restart")
    warmed = stack.warm(key)
    first_id, pinned_provider = _pin_batch(stack, key)
    plain = SteadyLoad(stack.urls, key, rate_per_s=30)
    batched = SteadyLoad(stack.urls, key, rate_per_s=10, headers={"x-gateway-batch": BATCH})
    sampling_done = asyncio.Event()
    sampler = asyncio.create_task(sample_readiness(stack.urls, sampling_done))
    load_started = time.monotonic()
    running = asyncio.gather(plain.run(12.0), batched.run(12.0))

    await asyncio.sleep(3.0)
    await asyncio.to_thread(stack.stores.redis.stop)
    down = (time.monotonic() - load_started, 0.0)
    await asyncio.sleep(DOWN_S)
    await asyncio.to_thread(stack.stores.redis.start)
    window = (down[0], time.monotonic() - load_started)
    plain_outcomes, batched_outcomes = await running
    sampling_done.set()
    readiness = await sampler

    outcomes = plain_outcomes + batched_outcomes
    served = served_ids(outcomes) | warmed | {first_id}
    records = await wait_for_records(stack.database_url, team_id, served)
    assert served - records.keys() == set()
    assert await record_counts(stack.database_url, team_id) == (len(records), len(records))
    assert any(o.status == 200 for o in _during(plain_outcomes, window))  # the service stayed up
    assert {o.provider for o in batched_outcomes if o.status == 200} == {pinned_provider}  # never split
    assert _pin_after_restart(stack, key) == pinned_provider  # the pin came back with Redis
    assert any("usage_buffer_spooling" in g.logs() for g in stack.gateways)  # the spool was used
    unready = [s for s in readiness if str(s.get("redis", "")).startswith("unreachable")]
    assert unready and all(s["http_status"] == 200 and "redis" in s["degraded"] for s in unready)
    report(
        record_property,
        "redis_restart",
        {
            "down_s": DOWN_S,
            "served": len(served),
            "records": len(records),
            "plain_during_outage": summary(_during(plain_outcomes, window)),
            "batched_during_outage": summary(_during(batched_outcomes, window)),
            "degraded_reported": sorted({d for s in unready for d in s.get("degraded", [])}),
        },
    )


def _pin_after_restart(stack: FaultStack, key: str) -> str:
    response = httpx.get(
        f"{stack.urls[1]}/v1/gateway/batches/{BATCH}", headers={"authorization": f"Bearer {key}"}
    )
    warnings = [line for line in stack.gateways[1].logs().splitlines() if '"level":"warning"' in line]
    assert response.status_code == 200, (response.text, warnings[-10:])
    provider: str = response.json()["provider"]
    return provider
