"""Teams repository: create, read, page, update and soft-delete (which revokes the team's keys).

Also home of what the key repository shares with it: ids, UTC time and keyset pagination.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import TypeVar

from sqlalchemy import Select, and_, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import ApiKey, Team
from gateway.errors import Conflict, NotFound
from gateway.schemas.admin import TeamCreate, TeamUpdate, changes

Row = TypeVar("Row", Team, ApiKey)


def new_id(prefix: str) -> str:
    """`team_` / `key_` + 20 random hex characters."""
    return prefix + secrets.token_hex(10)


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; everything the gateway stores is UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


async def fetch_page(
    session: AsyncSession, query: Select[Row], model: type[Row], *, limit: int, cursor: str | None
) -> tuple[list[Row], str | None]:
    """One page in (created_at, id) order; the cursor is the id of the last row of the previous page."""
    if cursor is not None:
        anchor = await session.get(model, cursor)
        if anchor is None:
            raise NotFound("Unknown cursor: pass the next_cursor of a previous page.", param="cursor")
        query = query.where(
            or_(
                model.created_at > anchor.created_at,
                and_(model.created_at == anchor.created_at, model.id > anchor.id),
            )
        )
    rows = list((await session.scalars(query.order_by(model.created_at, model.id).limit(limit + 1))).all())
    if len(rows) > limit:
        return rows[:limit], rows[limit - 1].id
    return rows, None


async def create_team(session: AsyncSession, spec: TeamCreate) -> Team:
    await _check_name_free(session, spec.name)
    now = utcnow()
    team = Team(
        id=new_id("team_"),
        name=spec.name,
        allowed_models=spec.allowed_models,
        allowed_regions=spec.allowed_regions,
        monthly_budget_usd=spec.monthly_budget_usd,
        rpm_limit=spec.rpm_limit,
        tpm_limit=spec.tpm_limit,
        weight=spec.weight,
        created_at=now,
        updated_at=now,
    )
    session.add(team)
    await _flush_unique(session, spec.name)
    return team


async def get_team(session: AsyncSession, team_id: str, *, param: str | None = None) -> Team:
    """A live team; NotFound for an unknown or deleted one."""
    team = await session.get(Team, team_id)
    if team is None or team.deleted_at is not None:
        raise NotFound(f"No team with id {team_id!r}.", param=param)
    return team


async def find_team(session: AsyncSession, id_or_name: str) -> Team:
    """A live team by id or by name (the CLI accepts either)."""
    query = select(Team).where(or_(Team.id == id_or_name, Team.name == id_or_name), Team.deleted_at.is_(None))
    team = (await session.scalars(query)).first()
    if team is None:
        raise NotFound(f"No team with id or name {id_or_name!r}.")
    return team


async def reported_team_id(session: AsyncSession, id_or_name: str, *, param: str) -> str:
    """The id of the team a report filter names by id or by name, deleted teams too (their usage
    stays in the reports); NotFound naming `param` when no team has that id or name."""
    query = select(Team.id, Team.deleted_at).where(or_(Team.id == id_or_name, Team.name == id_or_name))
    found = sorted(
        await session.execute(query), key=lambda row: (row.id != id_or_name, row.deleted_at is not None)
    )
    if not found:
        raise NotFound(f"No team with id or name {id_or_name!r}.", param=param)
    return str(found[0].id)


async def team_names(session: AsyncSession, team_ids: set[str]) -> dict[str, str]:
    """Each team's name by id, deleted teams too, for a report that shows names."""
    if not team_ids:
        return {}
    rows = await session.execute(select(Team.id, Team.name).where(Team.id.in_(team_ids)))
    return {row.id: row.name for row in rows}


async def list_teams(
    session: AsyncSession, *, limit: int, cursor: str | None
) -> tuple[list[Team], str | None]:
    query = select(Team).where(Team.deleted_at.is_(None))
    return await fetch_page(session, query, Team, limit=limit, cursor=cursor)


async def update_team(session: AsyncSession, team_id: str, patch: TeamUpdate) -> Team:
    team = await get_team(session, team_id)
    fields = changes(patch)
    name = fields.get("name")
    if isinstance(name, str) and name != team.name:
        await _check_name_free(session, name)
    for field, value in fields.items():
        setattr(team, field, value)
    team.updated_at = utcnow()
    await _flush_unique(session, team.name)
    return team


async def delete_team(session: AsyncSession, team_id: str) -> tuple[Team, list[str]]:
    """Soft-delete a team and revoke its live keys; returns the team and the revoked keys' hashes.

    The row stays (usage records point at it) but gives up its name, so a new team may take it.
    """
    team = await get_team(session, team_id)
    now = utcnow()
    hashes = await live_key_hashes(session, team_id)
    team.deleted_at = now
    team.name = f"{team.name[:150]} (deleted {team.id})"
    team.updated_at = now
    await session.execute(
        update(ApiKey)
        .where(ApiKey.team_id == team_id, ApiKey.revoked_at.is_(None))
        .values(revoked_at=now, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    await session.flush()
    return team, hashes


async def live_key_hashes(session: AsyncSession, team_id: str) -> list[str]:
    """Hashes of a team's unrevoked keys: the cache entries a change to the team makes stale."""
    query = select(ApiKey.key_hash).where(ApiKey.team_id == team_id, ApiKey.revoked_at.is_(None))
    return list((await session.scalars(query)).all())


async def _check_name_free(session: AsyncSession, name: str) -> None:
    existing = (await session.scalars(select(Team).where(Team.name == name))).first()
    if existing is not None:
        raise Conflict(f"A team named {name!r} already exists: {existing.id}.", param="name")


async def _flush_unique(session: AsyncSession, name: str) -> None:
    """Flush; a concurrent insert of the same name surfaces as the same 409 as the early check."""
    try:
        await session.flush()
    except IntegrityError:
        raise Conflict(f"A team named {name!r} already exists.", param="name") from None
