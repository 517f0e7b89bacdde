"""The scheduler per provider: replicas chosen, unlimited providers never queued, caps per replica."""

from __future__ import annotations

import asyncio
from collections import Counter

from gateway.routing.directives import Priority
from gateway.scheduling.scheduler import Scheduler
from gateway.scheduling.ticket import Ticket
from gateway.settings import Capacity, Catalog
from tests.support.catalogs import catalog, deployment, model, provider

URLS = ("http://a:8000/v1", "http://b:8000/v1", "http://c:8000/v1")


def replicated(capacity: Capacity | None) -> Catalog:
    """One provider of three replicas serving `llama`, each replica capped at `capacity`."""
    vllm = provider("vllm", region="eu", base_urls=URLS, capacity=capacity)
    return catalog(vllm, models=[model("llama", deployment(vllm, "llama"))])


TICKET = Ticket("team", 1.0, Priority.INTERACTIVE, 10, 20)


async def test_an_unlimited_provider_spreads_requests_without_a_key() -> None:
    config = replicated(None)
    scheduler = Scheduler(config)
    grants = [await scheduler.enter(config.providers[0], None, TICKET) for _ in range(30)]
    assert Counter(g.base_url for g in grants) == dict.fromkeys(URLS, 10)
    for grant in grants:
        grant.release()
    assert all(r.in_flight == 0 for r in scheduler.providers["vllm"].unlimited)


async def test_a_key_sticks_to_one_replica_while_the_load_allows() -> None:
    config = replicated(Capacity(max_concurrency=100))
    scheduler = Scheduler(config)
    grants = [await scheduler.enter(config.providers[0], "shared-prefix", TICKET) for _ in range(3)]
    assert len({g.base_url for g in grants}) == 1
    for grant in grants:
        grant.release()


async def test_each_replica_has_its_own_cap() -> None:
    config = replicated(Capacity(max_concurrency=2))
    scheduler = Scheduler(config)
    provider = config.providers[0]
    grants = [await scheduler.enter(provider, None, TICKET) for _ in range(6)]
    assert Counter(g.base_url for g in grants) == dict.fromkeys(URLS, 2)
    waiting = asyncio.create_task(scheduler.enter(provider, None, TICKET))
    await asyncio.sleep(0.01)
    assert not waiting.done() and scheduler.providers["vllm"].queued() == 1
    # It waits at the replica it was given on arrival, for a permit there.
    (queued_at,) = [g.url for g in scheduler.providers["vllm"].gates if g.queue]
    freed = next(g for g in grants if g.base_url == queued_at)
    grants.remove(freed)
    freed.release()
    grant = await asyncio.wait_for(waiting, 1.0)
    assert grant.base_url == queued_at
    for g in [*grants, grant]:
        g.release()
    await scheduler.aclose()
