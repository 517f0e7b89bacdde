"""GATEWAY_DATABASE_READ_URL: usage reports read through it, on a role that may only read, while
maintenance and writes stay on GATEWAY_DATABASE_URL. There is no replica here: the read URL names
another database on the same server, holding other records, so a report shows which one it read."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from litestar.testing import TestClient
from sqlalchemy import text

from gateway.app import create_app
from gateway.cli import main
from gateway.db.migrate import upgrade_head_async
from gateway.db.session import create_engine, open_read_engine, report_sessions, session_factory
from gateway.metering.events import UsageEvent, UsageSource
from gateway.metering.storage.buffer import MemoryBuffer
from gateway.metering.storage.writer import UsageWriter
from gateway.settings import load_settings
from tests.integration.metering.conftest import _on_server, create_database, drop_database, pg_url
from tests.support.stores import POSTGRES_SERVER
from tests.unit.settings.test_environment import MINIMAL, write

pytestmark = pytest.mark.integration

PRIMARY = "gateway_test_partitions_primary"
REPLICA = "gateway_test_partitions_replica"
READER = "gateway_test_partitions_reader"


def event(team: str, number: int) -> UsageEvent:
    return UsageEvent(
        request_id=f"req_{team}_{number}",
        created_at=1_767_225_600.0 + number,
        team_id=team,
        key_id="key_a",
        model="gpt-4o",
        provider="openai-us",
        region="us-east",
        deployment="openai-us/gpt-4o",
        upstream_model="gpt-4o",
        endpoint="chat/completions",
        status=200,
        prompt_tokens=10,
        completion_tokens=1,
        usage_source=UsageSource.UPSTREAM,
        cost=Decimal("0.001"),
        uncached_cost=Decimal("0.001"),
        latency_ms=1.0,
    )


async def _prepare() -> None:
    for database, team, count in ((PRIMARY, "team_primary", 3), (REPLICA, "team_replica", 5)):
        await create_database(database)
        await upgrade_head_async(pg_url(database))
        engine = create_engine(pg_url(database))
        buffer = MemoryBuffer()
        for number in range(count):
            await buffer.append(event(team, number))
        await UsageWriter(buffer, session_factory(engine)).flush()
        await engine.dispose()
    await _on_server(f"DROP ROLE IF EXISTS {READER}")
    await _on_server(f"CREATE ROLE {READER} LOGIN")
    engine = create_engine(pg_url(REPLICA))
    async with engine.begin() as connection:
        await connection.execute(text(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {READER}"))
    await engine.dispose()


async def _clean_up() -> None:
    await drop_database(PRIMARY)
    await drop_database(REPLICA)  # its grants go with it
    await _on_server(f"DROP ROLE IF EXISTS {READER}")


@pytest.fixture
def databases() -> Iterator[None]:
    asyncio.run(_prepare())
    try:
        yield
    finally:
        asyncio.run(_clean_up())


def read_url() -> str:
    server = POSTGRES_SERVER.split("://", 1)[1].split("@")[-1]  # host:port, without the user
    return f"postgresql://{READER}@{server}/{REPLICA}"


def test_gateway_usage_reads_the_replica_and_upkeep_the_primary(
    databases: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GATEWAY_CONFIG", str(write(tmp_path, MINIMAL)))
    monkeypatch.setenv("GATEWAY_DATABASE_URL", pg_url(PRIMARY))
    monkeypatch.setenv("GATEWAY_DATABASE_READ_URL", read_url())

    assert main(["usage", "--group-by", "team", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    # the reader may not create tables: upkeep through the read URL would fail
    assert main(["usage", "partitions", "--ahead", "1"]) == 0
    upkeep = capsys.readouterr().out

    assert [(row["team_id"], row["requests"]) for row in rows] == [("team_replica", 5)]
    assert "month partitions: usage_records_" in upkeep


def test_the_running_gateway_reports_through_the_read_url_and_authenticates_on_the_primary(
    databases: None, tmp_path: Path
) -> None:
    settings = load_settings(
        {
            "GATEWAY_CONFIG": str(write(tmp_path, MINIMAL)),
            "GATEWAY_DATABASE_URL": pg_url(PRIMARY),
            "GATEWAY_DATABASE_READ_URL": read_url(),
            "GATEWAY_ADMIN_KEY": "admin-secret",
        }
    )
    admin = {"Authorization": "Bearer admin-secret"}
    with TestClient(app=create_app(settings)) as client:
        report = client.get("/admin/usage", params={"group_by": "team"}, headers=admin)
        events = client.get("/admin/usage/events", headers=admin)
        # a write goes to the primary: the reader's role could not insert it
        created = client.post("/admin/teams", headers=admin, json={"name": "written-on-the-primary"})

    assert report.status_code == 200, report.text
    assert [(row["team_id"], row["requests"]) for row in report.json()["data"]] == [("team_replica", 5)]
    assert {event["team_id"] for event in events.json()["data"]} == {"team_replica"}
    assert created.status_code == 201, created.text


async def test_the_read_engine_is_the_replicas_and_reports_use_it_when_services_hold_it() -> None:
    primary = create_engine("sqlite:///:memory:")
    assert open_read_engine(None, primary) is primary
    replica = open_read_engine("postgresql://reader@replica.invalid/gateway", primary)

    class Primary:
        sessions = session_factory(primary)

    class WithReplica(Primary):
        report_sessions = session_factory(replica)

    try:
        assert replica is not primary and replica.url.host == "replica.invalid"
        assert report_sessions(Primary()) is Primary.sessions
        assert report_sessions(WithReplica()) is WithReplica.report_sessions
    finally:
        await replica.dispose()
        await primary.dispose()
