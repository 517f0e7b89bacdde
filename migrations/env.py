"""Alembic environment: migrates the gateway's tables on PostgreSQL (asyncpg) or SQLite (aiosqlite).

`gateway.db.migrate.upgrade_head` hands in an open connection (under its advisory lock) through
`config.attributes["connection"]`; run by the `alembic` command instead, this file opens its own.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import pool
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

import gateway.db.models  # noqa: F401  (registers the tables on Base.metadata)
from gateway.db.base import Base
from gateway.db.session import async_url, is_sqlite

target_metadata = Base.metadata


def _configured_url() -> str:
    url = context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no sqlalchemy.url: set it in the Alembic config or use `gateway migrate`")
    return async_url(url)


def _run_on(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_online() -> None:
    engine = create_async_engine(_configured_url(), poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run_on)
    finally:
        await engine.dispose()


def _run_offline() -> None:
    url = _configured_url()
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=is_sqlite(url),
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    _run_offline()
else:
    given = context.config.attributes.get("connection")
    if given is None:
        asyncio.run(_run_online())
    else:
        _run_on(given)
