"""Who may name a stored Response: the checker against a migrated SQLite database (the owner rows
the usage writer makes) and a shared fakeredis, as two processes would see it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.migrate import upgrade_head_async
from gateway.db.models import ResponseOwner
from gateway.db.session import create_engine, session_factory
from gateway.errors import InvalidRequest, UnknownResponse
from gateway.metering.events import UsageEvent
from gateway.metering.storage.buffer import MemoryBuffer
from gateway.metering.storage.writer import UsageWriter
from gateway.responses_store.owners import ResponseOwners, named_ids
from gateway.settings import Provider, ProviderKind
from tests.unit.providers.calls import provider

NATIVE = provider(ProviderKind.OPENAI, responses_api="native")
TRANSLATED = provider(ProviderKind.OPENAI, responses_api="chat")


@pytest.fixture
async def sqlite_sessions(tmp_path: Path) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    url = f"sqlite:///{tmp_path / 'gateway.db'}"
    await upgrade_head_async(url)
    engine = create_engine(url)
    yield session_factory(engine)
    await engine.dispose()


def record(number: int, team: str, response_id: str | None) -> UsageEvent:
    """The usage record of a request of `team` whose upstream returned Response `response_id`."""
    return UsageEvent(
        request_id=f"req_{number}",
        created_at=1_767_225_600.0 + number,
        team_id=team,
        key_id=f"key_{team}",
        model="gpt",
        provider="openai-us",
        region="us-east",
        deployment="openai-us/gpt",
        upstream_model="gpt-upstream",
        endpoint="responses",
        status=200,
        response_id=response_id,
    )


@pytest.fixture
async def shared_redis() -> AsyncIterator[Redis]:
    server = fakeredis.FakeServer()
    client = fakeredis.aioredis.FakeRedis(server=server)
    yield client
    await client.aclose()


async def refused(
    owners: ResponseOwners, team: str, body: dict[str, Any], on: Provider = NATIVE
) -> str | None:
    """The refused parameter, or None if the request may go upstream."""
    try:
        await owners.check(on, team, body)
    except UnknownResponse as exc:
        return f"{exc.status} {exc.type} {exc.param}"
    return None


PREVIOUS = "404 invalid_request_error previous_response_id"


async def test_an_id_is_its_creators_at_once_in_every_process_sharing_redis(
    sqlite_sessions: async_sessionmaker[AsyncSession], shared_redis: Redis
) -> None:
    here, there = ResponseOwners(sqlite_sessions, shared_redis), ResponseOwners(sqlite_sessions, shared_redis)
    follow_up = {"model": "gpt", "input": "go on", "previous_response_id": "resp_1"}

    assert await refused(here, "team_a", follow_up) == PREVIOUS  # nobody's yet
    await here.remember("team_a", "resp_1")
    for owners in (here, there):
        assert await refused(owners, "team_a", follow_up) is None
        assert await refused(owners, "team_b", follow_up) == PREVIOUS
    # a translated provider keeps nothing: its adapter refuses the field itself
    assert await refused(there, "team_b", follow_up, on=TRANSLATED) is None


async def test_without_a_cache_the_written_owner_rows_answer(
    sqlite_sessions: async_sessionmaker[AsyncSession],
) -> None:
    buffer = MemoryBuffer()
    for number, (team, response_id) in enumerate(
        (("team_a", "resp_a"), ("team_b", "resp_b"), ("team_b", "resp_a"))
    ):
        await buffer.append(record(number, team, response_id))
    await buffer.append(record(3, "team_a", None))  # a record without a Response
    await UsageWriter(buffer, sqlite_sessions).flush()

    fresh = ResponseOwners(sqlite_sessions, None)  # another process, no Redis: the database answers
    assert await refused(fresh, "team_a", {"previous_response_id": "resp_a"}) is None
    assert await refused(fresh, "team_b", {"previous_response_id": "resp_a"}) == PREVIOUS
    assert await refused(fresh, "team_b", {"previous_response_id": "resp_b"}) is None
    async with sqlite_sessions() as session:  # one row an id: the first team recorded keeps it
        assert await session.scalar(select(func.count()).select_from(ResponseOwner)) == 2


async def test_redis_away_falls_back_to_the_database(
    sqlite_sessions: async_sessionmaker[AsyncSession],
) -> None:
    class Away:
        async def get(self, *_: object) -> None:
            raise RedisConnectionError("gone")

        async def set(self, *_: object, **__: object) -> None:
            raise RedisConnectionError("gone")

    owners = ResponseOwners(sqlite_sessions, Away())  # type: ignore[arg-type]
    await owners.remember("team_a", "resp_seen_here")  # kept in the process all the same
    assert await refused(owners, "team_a", {"previous_response_id": "resp_seen_here"}) is None
    buffer = MemoryBuffer()
    await buffer.append(record(1, "team_a", "resp_written"))
    await UsageWriter(buffer, sqlite_sessions).flush()
    assert await refused(owners, "team_a", {"previous_response_id": "resp_written"}) is None


@pytest.mark.parametrize("conversation", ["conv_1", {"id": "conv_1"}])
async def test_no_conversation_is_a_teams_own(
    sqlite_sessions: async_sessionmaker[AsyncSession], conversation: object
) -> None:
    owners = ResponseOwners(sqlite_sessions, None)
    assert (
        await refused(owners, "team_a", {"conversation": conversation})
        == "404 invalid_request_error conversation"
    )


def test_the_ids_a_body_names() -> None:
    body = {"previous_response_id": "resp_1", "conversation": {"id": "conv_1"}}
    assert named_ids(body) == [("previous_response_id", "resp_1"), ("conversation", "conv_1")]
    assert named_ids({"input": "hi"}) == []
    with pytest.raises(InvalidRequest):
        named_ids({"conversation": {"id": 7}})
