"""The stored_responses table: the Responses the gateway keeps for their team.

Every statement names the team: a row is read, deleted or listed only by the team that created it.
Rows are written in batches by the store's writer (gateway.responses_store.store), never on the
request path, idempotently (a row already there stays as it is), and purged past the retention.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Table, and_, delete, literal, select, tuple_
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import StoredResponse

_STORED: Table = StoredResponse.__table__  # type: ignore[assignment]
MAX_RESPONSE_ID = 255  # the column's width: a longer id is never stored (so never found)


async def insert_stored(session: AsyncSession, rows: list[dict[str, object]]) -> None:
    """Add `rows` (the table's columns by name) in the session's transaction."""
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    insert = (postgresql if dialect == "postgresql" else sqlite).insert(_STORED).on_conflict_do_nothing()
    await session.execute(insert, rows)


async def stored_response(session: AsyncSession, team_id: str, response_id: str) -> StoredResponse | None:
    """The team's stored Response `response_id`, or None (another team's is None too)."""
    if len(response_id) > MAX_RESPONSE_ID:
        return None
    return await session.scalar(
        select(StoredResponse).where(
            StoredResponse.team_id == team_id, StoredResponse.response_id == response_id
        )
    )


async def stored_chain(
    session: AsyncSession, team_id: str, response_id: str, limit: int
) -> list[StoredResponse]:
    """The team's stored Response `response_id` and those it continues, newest first, as far back
    as the rows go (at most `limit`): one recursive query, however long the conversation."""
    if len(response_id) > MAX_RESPONSE_ID:
        return []
    start = (
        select(_STORED.c.response_id, _STORED.c.previous_response_id, literal(0).label("depth"))
        .where(_STORED.c.team_id == team_id, _STORED.c.response_id == response_id)
        .cte("chain", recursive=True)
    )
    earlier = select(_STORED.c.response_id, _STORED.c.previous_response_id, start.c.depth + 1).join(
        start,
        and_(_STORED.c.team_id == team_id, _STORED.c.response_id == start.c.previous_response_id),
    )
    chain = start.union_all(earlier.where(start.c.depth < limit - 1))
    rows = await session.scalars(
        select(StoredResponse)
        .join(
            chain, and_(StoredResponse.team_id == team_id, StoredResponse.response_id == chain.c.response_id)
        )
        .order_by(chain.c.depth)
    )
    return list(rows)


async def delete_stored(session: AsyncSession, team_id: str, response_id: str) -> bool:
    """Delete the team's stored Response; whether there was one."""
    if len(response_id) > MAX_RESPONSE_ID:
        return False
    result = await session.execute(
        delete(_STORED).where(_STORED.c.team_id == team_id, _STORED.c.response_id == response_id)
    )
    return bool(getattr(result, "rowcount", 0))


async def purge_stored(session: AsyncSession, before: datetime, limit: int) -> int:
    """Delete up to `limit` Responses created before `before`, oldest first (a range of the
    created_at index: cheap however large the table); how many went."""
    oldest = (
        select(_STORED.c.team_id, _STORED.c.response_id)
        .where(_STORED.c.created_at < before)
        .order_by(_STORED.c.created_at)
        .limit(limit)
    )
    keys = [(row.team_id, row.response_id) for row in await session.execute(oldest)]
    if not keys:
        return 0
    await session.execute(delete(_STORED).where(tuple_(_STORED.c.team_id, _STORED.c.response_id).in_(keys)))
    return len(keys)
