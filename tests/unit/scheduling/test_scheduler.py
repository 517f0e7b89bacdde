"""The scheduler per provider: replicas chosen (by key, by prompt prefix, a failing one passed over),
unlimited providers never queued, caps per replica."""

from __future__ import annotations

import asyncio
from collections import Counter

import msgspec

from gateway.providers.base import Endpoint
from gateway.proxy.request import parse_request
from gateway.routing.directives import Priority
from gateway.routing.prefix import prompt_prefix
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


def prefixed(system: str, question: str, team: str = "team", replica: str | None = None) -> Ticket:
    """A ticket as the proxy builds it for a chat request without a cache key."""
    body = {
        "model": "m",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
    }
    parsed = parse_request(msgspec.json.encode(body), Endpoint.CHAT, 100)
    leading = prompt_prefix(team, parsed.typed, 8192)
    return Ticket(
        team, 1.0, Priority.INTERACTIVE, 10, 20, leading.shared, leading.shared_tokens, leading, replica
    )


HANDBOOKS = [f"Handbook {n}. " + "Extract every field of the invoice. " * 150 for n in range(9)]


async def test_keyless_requests_sharing_a_prefix_meet_on_one_replica() -> None:
    config = replicated(None)
    scheduler, vllm = Scheduler(config), config.providers[0]
    seen: dict[int, set[str]] = {n: set() for n in range(len(HANDBOOKS))}
    for i in range(90):
        grant = await scheduler.enter(vllm, None, prefixed(HANDBOOKS[i % 9], f"Invoice {i}"))
        seen[i % 9].add(grant.base_url)
        grant.release()
    assert all(len(urls) == 1 for urls in seen.values()), seen
    assert len(set().union(*seen.values())) > 1


async def test_another_teams_prefix_is_placed_on_its_own() -> None:
    config = replicated(None)
    vllm = config.providers[0]
    placed = {}
    for team in ("team-a", "team-b", "team-c", "team-d", "team-e"):
        grant = await Scheduler(config).enter(vllm, None, prefixed(HANDBOOKS[0], "Invoice", team))
        placed[team] = grant.base_url
    assert len(set(placed.values())) > 1  # one prompt, teams apart: not one replica for all


async def test_a_failed_replica_is_passed_over_until_it_serves_again() -> None:
    config = replicated(None)
    scheduler, vllm = Scheduler(config), config.providers[0]
    home = (await scheduler.enter(vllm, "shared-prefix", TICKET)).base_url
    scheduler.replica_failed(vllm, home)
    moved = (await scheduler.enter(vllm, "shared-prefix", TICKET)).base_url
    assert moved != home
    conversation = prefixed(HANDBOOKS[0], "q", replica=home)
    assert (await scheduler.enter(vllm, None, conversation)).base_url != home
    scheduler.replica_succeeded(vllm, home)
    assert (await scheduler.enter(vllm, "shared-prefix", TICKET)).base_url == home
    assert (await scheduler.enter(vllm, None, conversation)).base_url == home


async def first_dispatched_of_long_then_short(aging_passes: int) -> str:
    """One slot, held; a long prompt queues, then a short one; which goes when the slot frees."""
    one = provider("vllm", region="eu", base_url=URLS[0], capacity=Capacity(max_concurrency=1))
    config = catalog(one, models=[model("llama", deployment(one, "llama"))])
    settings = msgspec.structs.replace(config.scheduling, length_aging_passes=aging_passes)
    scheduler = Scheduler(msgspec.structs.replace(config, scheduling=settings))
    held = await scheduler.enter(one, None, TICKET)
    long = asyncio.create_task(
        scheduler.enter(one, None, Ticket("team", 1.0, Priority.BATCH, 20_000, 20_100))
    )
    await asyncio.sleep(0.01)
    short = asyncio.create_task(scheduler.enter(one, None, Ticket("team", 1.0, Priority.BATCH, 100, 200)))
    await asyncio.sleep(0.01)
    held.release()
    done, pending = await asyncio.wait({long, short}, return_when=asyncio.FIRST_COMPLETED)
    first = "long" if long in done else "short"
    for task in pending:
        task.cancel()
    for task in done:
        task.result().release()
    return first


async def test_the_length_aging_setting_reaches_each_replica_queue() -> None:
    assert await first_dispatched_of_long_then_short(32) == "short"  # by length bucket
    assert await first_dispatched_of_long_then_short(0) == "long"  # 0: arrival order


class CountingBank:
    """A shared bank that grants everything and counts what it was asked (a stand-in at the seam
    between the gates and Redis)."""

    def __init__(self) -> None:
        self.acquired = 0
        self.poll_s = 1.0

    async def acquire(self, replica: str, tokens: int, caps: object, waiting: int) -> bool:
        self.acquired += 1
        return True

    def release(self, replica: str, tokens: int) -> None:
        pass

    def watch(self, replica: str, wake: object) -> None:
        pass


async def test_only_static_caps_are_counted_in_the_shared_bank() -> None:
    """A replica sized from its own metrics alone has nothing to split across processes: no round
    trip to the bank stands between a freed slot and its next request."""
    for capacity, asked in ((Capacity(load_metrics=True), 0), (Capacity(max_concurrency=100), 3)):
        config = replicated(capacity)
        bank = CountingBank()
        scheduler = Scheduler(config, bank=bank)  # type: ignore[arg-type]
        grants = [await scheduler.enter(config.providers[0], None, TICKET) for _ in range(3)]
        for grant in grants:
            grant.release()
        assert bank.acquired == asked
