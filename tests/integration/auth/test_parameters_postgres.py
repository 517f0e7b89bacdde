"""Bad parameters and a failing statement against the real PostgreSQL, which refuses NUL in text."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import asyncpg
import msgspec
import pytest
import structlog
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError

from gateway.api.front import error_replies
from gateway.db.models import Team
from gateway.db.session import create_engine, database_error
from tests.support.stores import POSTGRES_ADMIN_URL, postgres_url
from tests.unit.api.bad_parameters import ADMIN_KEY, MARKER, Gateway, Lines, gateway, misanswered

pytestmark = pytest.mark.integration

DATABASE_URL = postgres_url("gateway_test_parameters")


@pytest.fixture
async def database_url() -> str:
    conn = await asyncpg.connect(POSTGRES_ADMIN_URL)
    try:
        await conn.execute('DROP DATABASE IF EXISTS "gateway_test_parameters" WITH (FORCE)')
        await conn.execute('CREATE DATABASE "gateway_test_parameters"')
    finally:
        await conn.close()
    return DATABASE_URL


@pytest.fixture
async def gw(database_url: str) -> AsyncIterator[Gateway]:
    async with gateway(database_url) as running:
        yield running


async def test_every_bad_parameter_is_a_400_naming_it(gw: Gateway) -> None:
    assert await misanswered(gw) == []


async def test_a_refused_statement_keeps_its_values_out_of_the_error_text(
    gw: Gateway, database_url: str
) -> None:
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            with pytest.raises(DBAPIError) as caught:
                await conn.execute(select(Team).where(Team.name == f"{MARKER}\x00"))
    finally:
        await engine.dispose()
    assert MARKER not in str(caught.value)
    assert database_error(caught.value) == "CharacterNotInRepertoireError (SQLSTATE 22021)"


async def test_a_database_error_is_logged_without_the_statements_values(
    gw: Gateway, database_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    lines = Lines()
    processors = [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    monkeypatch.setattr(error_replies, "log", structlog.wrap_logger(lines, processors=processors))
    engine = create_engine(database_url)
    async with engine.begin() as conn:  # the report's query now fails in the database
        await conn.execute(text("DROP TABLE usage_records"))
        await conn.execute(text("DROP TABLE usage_daily"))
    await engine.dispose()
    with caplog.at_level(logging.DEBUG):
        response = await gw.client.get(
            "/admin/usage", params={"model": MARKER}, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
        )

    assert response.status_code == 500
    (line,) = [msgspec.json.decode(raw) for raw in lines.lines if "internal_error" in raw]
    assert line["database_error"] == "UndefinedTableError (SQLSTATE 42P01)"
    assert MARKER not in "".join(lines.lines)
    assert MARKER not in caplog.text
