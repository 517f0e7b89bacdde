"""The store of Responses on PostgreSQL: a kept Response is readable at once and after the writer
has moved it (by a process that never held it); only its team reads or deletes it; the retention
purge takes what is past it; a delete before the write leaves nothing written; with Redis another
process reads it before it is written."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.db.models import StoredResponse
from gateway.db.session import session_factory
from gateway.redis.client import redis_client
from gateway.responses_store.store import ResponseStore
from tests.integration.metering.conftest import drop_database, fresh_pg_engine
from tests.support.servers import PrivateRedis
from tests.unit.responses_store.records import DAY, NOW, Clock, record

pytestmark = pytest.mark.integration

DATABASE = "gateway_test_stored_responses"


@pytest.fixture
async def engine() -> AsyncIterator[AsyncEngine]:
    engine = await fresh_pg_engine(DATABASE)
    yield engine
    await engine.dispose()
    await drop_database(DATABASE)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def a_store(engine: AsyncEngine, clock: Clock, redis_url: str | None = None) -> ResponseStore:
    """A store as one gateway process has it (its own cache)."""
    redis = redis_client(redis_url) if redis_url else None
    return ResponseStore(session_factory(engine), redis, retention_days=30, clock=clock)


async def rows(engine: AsyncEngine) -> int:
    async with session_factory(engine)() as session:
        return int(await session.scalar(select(func.count()).select_from(StoredResponse)) or 0)


async def test_a_kept_response_is_read_at_once_then_from_the_database(
    engine: AsyncEngine, clock: Clock
) -> None:
    store = a_store(engine, clock)
    kept = record("team_a", "resp_1")
    store.keep(kept)
    assert await rows(engine) == 0  # not written yet: the cache answers
    assert await store.get("team_a", "resp_1") == kept
    await store.flush()
    assert await rows(engine) == 1
    elsewhere = a_store(engine, clock)  # another process: nothing cached
    assert await elsewhere.get("team_a", "resp_1") == kept


async def test_only_its_team_reads_or_deletes_it(engine: AsyncEngine, clock: Clock) -> None:
    store = a_store(engine, clock)
    store.keep(record("team_a", "resp_1"))
    await store.flush()
    for process in (store, a_store(engine, clock)):
        assert await process.get("team_b", "resp_1") is None
        assert await process.delete("team_b", "resp_1") is False
    assert await store.get("team_a", "resp_1") is not None
    assert await store.delete("team_a", "resp_1") is True
    assert await store.get("team_a", "resp_1") is None
    assert await a_store(engine, clock).get("team_a", "resp_1") is None
    assert await store.delete("team_a", "resp_1") is False
    assert await rows(engine) == 0


async def test_a_delete_before_the_write_leaves_nothing_written(engine: AsyncEngine, clock: Clock) -> None:
    store = a_store(engine, clock)
    store.keep(record("team_a", "resp_1"))
    store.keep(record("team_a", "resp_2"))
    assert await store.delete("team_a", "resp_1") is True
    await store.flush()
    async with session_factory(engine)() as session:
        assert (await session.scalars(select(StoredResponse.response_id))).all() == ["resp_2"]


async def test_the_purge_takes_what_is_past_the_retention(engine: AsyncEngine, clock: Clock) -> None:
    store = a_store(engine, clock)
    for n in range(5):  # 40, 35, 30 (minus a second), 20 and 0 days old
        age = (40, 35, 30, 20, 0)[n] * DAY + (1 if n == 2 else 0)
        store.keep(record("team_a", f"resp_{n}", created_at=NOW - age))
    await store.flush()
    # past the retention and not yet purged: already not served
    assert await a_store(engine, clock).get("team_a", "resp_0") is None
    assert await store.purge() == 3
    async with session_factory(engine)() as session:
        left = sorted((await session.scalars(select(StoredResponse.response_id))).all())
    assert left == ["resp_3", "resp_4"]
    assert await store.get("team_a", "resp_1") is None  # gone from the cache too
    clock.now += 11 * DAY
    assert await store.purge() == 1  # resp_3 is 31 days old now
    assert await store.purge() == 0


async def test_a_chain_is_walked_back_to_its_start(engine: AsyncEngine, clock: Clock) -> None:
    store = a_store(engine, clock)
    store.keep(record("team_a", "resp_1"))
    store.keep(record("team_a", "resp_2", previous="resp_1"))
    store.keep(record("team_a", "resp_3", previous="resp_2"))
    await store.flush()
    elsewhere = a_store(engine, clock)
    last = await elsewhere.get("team_a", "resp_3")
    assert last is not None
    chain = await elsewhere.chain(last)
    assert not isinstance(chain, str)
    assert [r.response_id for r in chain] == ["resp_1", "resp_2", "resp_3"]
    await store.delete("team_a", "resp_2")
    assert await elsewhere.chain(last) == "resp_2"  # the id that is gone


@pytest.fixture(scope="module")
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis(appendonly=False).start()
    yield server
    server.stop()


async def test_with_redis_another_process_reads_it_before_it_is_written(
    engine: AsyncEngine, clock: Clock, private_redis: PrivateRedis
) -> None:
    here, there = a_store(engine, clock, private_redis.url(0)), a_store(engine, clock, private_redis.url(0))
    kept = record("team_a", "resp_1")
    here.keep(kept)
    await here.share(kept)
    assert await rows(engine) == 0
    assert await there.get("team_a", "resp_1") == kept
    assert await there.get("team_b", "resp_1") is None
    assert await there.delete("team_a", "resp_1") is True  # the copy goes too
    assert await a_store(engine, clock, private_redis.url(0)).get("team_a", "resp_1") is None


async def test_with_redis_a_delete_elsewhere_holds_here_before_and_after_the_write(
    engine: AsyncEngine, clock: Clock, private_redis: PrivateRedis
) -> None:
    here, there = a_store(engine, clock, private_redis.url(1)), a_store(engine, clock, private_redis.url(1))
    for n in (1, 2):
        kept = record("team_a", f"resp_{n}")
        here.keep(kept)
        await here.share(kept)
    # resp_1 is deleted at another process before this one writes it: its delete finds no row
    assert await there.delete("team_a", "resp_1") is True
    assert await here.get("team_a", "resp_1") is None  # this process's cache and batch drop it
    await here.flush()
    async with session_factory(engine)() as session:
        assert (await session.scalars(select(StoredResponse.response_id))).all() == ["resp_2"]

    # resp_3 is deleted at the other process while this one still holds it unwritten, and not read
    # here meanwhile: the writer's check after its commit finds the tombstone and deletes the row
    # (the other's delete could not see it yet)
    here.keep(record("team_a", "resp_3"))
    await there.delete("team_a", "resp_3")
    await here.flush()
    async with session_factory(engine)() as session:
        assert (await session.scalars(select(StoredResponse.response_id))).all() == ["resp_2"]


async def test_a_long_chain_is_read_back_in_one_query_up_to_the_retention(
    engine: AsyncEngine, clock: Clock
) -> None:
    store = a_store(engine, clock)
    for n in range(1, 201):  # resp_1 is past the retention, the others within it
        age = 31 * DAY if n == 1 else 0.0
        previous = f"resp_{n - 1}" if n > 1 else None
        store.keep(record("team_a", f"resp_{n}", created_at=NOW - age, previous=previous))
    await store.flush()
    store.keep(record("team_a", "resp_201", previous="resp_200"))  # cached, not written yet
    last = await store.get("team_a", "resp_201")
    assert last is not None
    assert await store.chain(last) == "resp_1"  # the first is gone: the conversation cannot be rebuilt
    async with session_factory(engine).begin() as session:  # resp_2 starts the conversation now
        await session.execute(
            update(StoredResponse)
            .where(StoredResponse.response_id == "resp_2")
            .values(previous_response_id=None)
        )
    chain = await a_store(engine, clock).chain(record("team_a", "resp_201", previous="resp_200"))
    assert not isinstance(chain, str)
    assert [r.response_id for r in chain] == [f"resp_{n}" for n in range(2, 202)]
