"""The files repository with an object store (gateway.jobs.files.repository, `store=`): the bytes go to the
store and never to file_contents; a file kept in the database before the store was configured is
still read from there; a delete reaches the store; a store that fails takes the upload with it."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass, field

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gateway.db.models import FileContent, StoredFile
from gateway.db.session import session_factory
from gateway.errors import NotFound, ServiceUnavailable
from gateway.jobs.files import repository as files
from tests.unit.auth.records import add_team


@dataclass
class MemoryStore:
    """An object store in a dict, standing in for S3 at the FileStore seam."""

    objects: dict[str, bytes] = field(default_factory=dict)
    away: bool = False

    async def put(self, file_id: str, chunks: AsyncIterable[bytes]) -> None:
        self._check()
        self.objects[file_id] = b"".join([chunk async for chunk in chunks])

    async def get(self, file_id: str) -> bytes:
        self._check()
        if file_id not in self.objects:
            raise NotFound(f"No such File object: {file_id}", param="file_id")
        return self.objects[file_id]

    async def chunks(self, file_id: str) -> AsyncIterator[bytes]:
        yield await self.get(file_id)

    async def delete(self, file_id: str) -> None:
        self._check()
        self.objects.pop(file_id, None)

    async def aclose(self) -> None:
        pass

    def _check(self) -> None:
        if self.away:
            raise ServiceUnavailable("The file store is unavailable; try again later.")


@pytest.fixture
def sessions(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return session_factory(engine)


async def content_rows(sessions: async_sessionmaker[AsyncSession]) -> int:
    async with sessions() as session:
        return int(await session.scalar(select(func.count()).select_from(FileContent)) or 0)


async def test_with_a_store_the_bytes_are_an_object_and_no_content_row(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    team = await add_team(sessions)
    store = MemoryStore()
    async with sessions.begin() as session:
        stored = await files.store_file(session, team.id, files.BATCH_INPUT, "in.jsonl", b"abc", store=store)

    assert store.objects == {stored.id: b"abc"}
    assert await content_rows(sessions) == 0
    async with sessions() as session:
        assert await files.file_bytes(session, team.id, stored.id, store=store) == b"abc"
        assert (await files.get_file(session, team.id, stored.id)).bytes == 3
        with pytest.raises(NotFound):  # another team's file is absent, wherever its bytes are
            await files.file_bytes(session, "another-team", stored.id, store=store)


async def test_a_file_kept_in_the_database_is_read_from_there_once_a_store_is_configured(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    team = await add_team(sessions)
    async with sessions.begin() as session:
        stored = await files.store_file(session, team.id, files.BATCH_INPUT, "old.jsonl", b"before")
    store = MemoryStore()

    async with sessions() as session:
        assert await files.file_bytes(session, team.id, stored.id, store=store) == b"before"
    async with sessions.begin() as session:
        await files.delete_file(session, team.id, stored.id, store=store)
    assert await content_rows(sessions) == 0


async def test_a_delete_removes_the_object(sessions: async_sessionmaker[AsyncSession]) -> None:
    team = await add_team(sessions)
    store = MemoryStore()
    async with sessions.begin() as session:
        stored = await files.store_file(session, team.id, files.BATCH_INPUT, "in.jsonl", b"abc", store=store)
    async with sessions.begin() as session:
        await files.delete_file(session, team.id, stored.id, store=store)

    assert store.objects == {}
    async with sessions() as session:
        with pytest.raises(NotFound):
            await files.file_bytes(session, team.id, stored.id, store=store)


async def test_a_store_that_fails_leaves_no_file_behind(sessions: async_sessionmaker[AsyncSession]) -> None:
    team = await add_team(sessions)
    store = MemoryStore(away=True)
    with pytest.raises(ServiceUnavailable):
        async with sessions.begin() as session:
            await files.store_file(session, team.id, files.BATCH_INPUT, "in.jsonl", b"abc", store=store)

    async with sessions() as session:
        assert await session.scalar(select(func.count()).select_from(StoredFile)) == 0


async def test_a_delete_the_store_refuses_keeps_the_file(sessions: async_sessionmaker[AsyncSession]) -> None:
    team = await add_team(sessions)
    store = MemoryStore()
    async with sessions.begin() as session:
        stored = await files.store_file(session, team.id, files.BATCH_INPUT, "in.jsonl", b"abc", store=store)
    store.away = True
    with pytest.raises(ServiceUnavailable):
        async with sessions.begin() as session:
            await files.delete_file(session, team.id, stored.id, store=store)

    store.away = False
    async with sessions() as session:
        assert await files.file_bytes(session, team.id, stored.id, store=store) == b"abc"
