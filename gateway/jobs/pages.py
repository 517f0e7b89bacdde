"""Pages of a team's files and jobs as OpenAI lists them: in creation order, resumed `after` an id."""

from __future__ import annotations

from typing import TypeVar

from sqlalchemy import Select, and_, or_
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import BatchJob, StoredFile
from gateway.errors import NotFound

Row = TypeVar("Row", StoredFile, BatchJob)


async def page_after(
    session: AsyncSession,
    query: Select[Row],
    model: type[Row],
    *,
    limit: int,
    after: str | None,
    newest_first: bool,
) -> tuple[list[Row], bool]:
    """Up to `limit` rows of `query` (already scoped to one team) and whether more follow.

    Keyset order on (created_at, id): a page never repeats or skips a row when others are created
    meanwhile. `after` must be a row `query` itself returns, so another team's id is no anchor.
    """
    if after is not None:
        anchor = (await session.scalars(query.where(model.id == after))).first()
        if anchor is None:
            raise NotFound(f"No object with id {after!r} to list after.", param="after")
        if newest_first:
            query = query.where(
                or_(
                    model.created_at < anchor.created_at,
                    and_(model.created_at == anchor.created_at, model.id < anchor.id),
                )
            )
        else:
            query = query.where(
                or_(
                    model.created_at > anchor.created_at,
                    and_(model.created_at == anchor.created_at, model.id > anchor.id),
                )
            )
    if newest_first:
        query = query.order_by(model.created_at.desc(), model.id.desc())
    else:
        query = query.order_by(model.created_at, model.id)
    rows = list((await session.scalars(query.limit(limit + 1))).all())
    return rows[:limit], len(rows) > limit
