"""Test helpers shared by the auth, admin API and integration tests: real tables, real rows."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gateway.db import keys, teams
from gateway.db.base import Base
from gateway.db.models import ApiKey, Team
from gateway.schemas.admin import KeyCreate, TeamCreate


async def create_tables(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.drop_all)
        await conn.run_sync(Base.metadata.create_all)


@dataclass
class QueryCounter:
    """Counts the SQL statements an engine really sends (observes the engine; mocks nothing)."""

    statements: list[str] = field(default_factory=list)

    def attach(self, engine: AsyncEngine) -> QueryCounter:
        event.listen(engine.sync_engine, "before_cursor_execute", self._seen)
        return self

    def _seen(self, _conn: object, _cursor: object, statement: str, *_args: object) -> None:
        self.statements.append(statement)

    @property
    def key_lookups(self) -> int:
        return sum("FROM api_keys JOIN teams" in s for s in self.statements)


async def add_team(
    sessions: async_sessionmaker[AsyncSession], name: str = "research", **fields: object
) -> Team:
    async with sessions.begin() as session:
        return await teams.create_team(session, TeamCreate(name=name, **fields))  # type: ignore[arg-type]


async def add_key(
    sessions: async_sessionmaker[AsyncSession], team_id: str, name: str = "batch-runner", **fields: object
) -> tuple[ApiKey, str]:
    async with sessions.begin() as session:
        return await keys.create_key(session, KeyCreate(team_id=team_id, name=name, **fields))  # type: ignore[arg-type]
