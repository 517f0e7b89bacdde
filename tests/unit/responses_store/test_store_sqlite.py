"""The store of Responses on the embedded default, SQLite: written by the writer, read by a process
that never held it, per team only, deleted, purged past the retention."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.db.migrate import upgrade_head_async
from gateway.db.session import create_engine, session_factory
from gateway.responses_store.store import ResponseStore
from tests.unit.responses_store.records import DAY, NOW, Clock, record


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    url = f"sqlite:///{tmp_path / 'gateway.db'}"
    await upgrade_head_async(url)
    engine = create_engine(url)
    yield engine
    await engine.dispose()


async def test_the_store_on_sqlite(engine: AsyncEngine) -> None:
    clock = Clock()
    store = ResponseStore(session_factory(engine), None, retention_days=30, clock=clock)
    store.keep(record("team_a", "resp_old", created_at=NOW - 31 * DAY))
    store.keep(record("team_a", "resp_1"))
    store.keep(record("team_a", "resp_2", previous="resp_1"))
    await store.flush()

    elsewhere = ResponseStore(session_factory(engine), None, retention_days=30, clock=clock)
    last = await elsewhere.get("team_a", "resp_2")
    assert last == record("team_a", "resp_2", previous="resp_1")
    chain = await elsewhere.chain(last)
    assert not isinstance(chain, str) and [r.response_id for r in chain] == ["resp_1", "resp_2"]
    assert await elsewhere.get("team_b", "resp_2") is None
    assert await elsewhere.delete("team_b", "resp_2") is False

    assert await elsewhere.purge() == 1
    assert await elsewhere.delete("team_a", "resp_2") is True
    assert (
        await ResponseStore(session_factory(engine), None, retention_days=30, clock=clock).get(
            "team_a", "resp_2"
        )
        is None
    )
