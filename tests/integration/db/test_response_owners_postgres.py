"""The owners of response ids on PostgreSQL: written by the usage writer's COPY in the transaction
of their records, on its first path and on the one that skips records already stored (a
redelivered batch), once an id and for the first team recorded."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.db.models import ResponseOwner, UsageRecord
from gateway.db.session import session_factory
from gateway.metering.storage.buffer import MemoryBuffer
from gateway.metering.storage.writer import UsageWriter
from tests.integration.metering.conftest import drop_database, fresh_pg_engine
from tests.unit.responses_store.test_owners import record

pytestmark = pytest.mark.integration

DATABASE = "gateway_test_response_owners"


@pytest.fixture
async def engine() -> AsyncIterator[AsyncEngine]:
    engine = await fresh_pg_engine(DATABASE)
    yield engine
    await engine.dispose()
    await drop_database(DATABASE)


async def write(engine: AsyncEngine, *events: object) -> None:
    buffer = MemoryBuffer()
    for event in events:
        await buffer.append(event)  # type: ignore[arg-type]
    await UsageWriter(buffer, session_factory(engine)).flush()


async def test_owner_rows_come_with_their_records_and_once(engine: AsyncEngine) -> None:
    first = [record(1, "team_a", "resp_a"), record(2, "team_b", "resp_b"), record(3, "team_a", None)]
    await write(engine, *first)
    # redelivered, beside a new record naming an id already owned: the duplicate-skipping path
    await write(engine, *first, record(4, "team_b", "resp_a"), record(5, "team_b", "resp_c"))

    async with session_factory(engine)() as session:
        owners = (await session.execute(select(ResponseOwner.response_id, ResponseOwner.team_id))).all()
        records = (await session.scalars(select(UsageRecord.request_id))).all()
    assert sorted(owners) == [("resp_a", "team_a"), ("resp_b", "team_b"), ("resp_c", "team_b")]
    assert len(records) == 5
