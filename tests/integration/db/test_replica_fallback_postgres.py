"""A read replica that goes away: usage reports go on from the primary (answered 200), `/readyz`
says ready with `read_replica` degraded, the episode is logged once, and the replica is read again
once it is back and its cool-down is over.

The replica is a PostgreSQL server of its own (tests/support/servers.PrivatePostgres), stopped in
the middle of the test; the primary is a database on the session's server. Each holds records of
another team, so a report shows which one it read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.db.migrate import upgrade_head_async
from gateway.db.session import ReplicaSessions, create_engine, session_factory
from gateway.metering.reports.usage import UsageQuery, usage_report
from gateway.metering.storage.buffer import MemoryBuffer
from gateway.metering.storage.writer import UsageWriter
from gateway.settings import load_settings
from tests.integration.db.test_read_replica_postgres import event
from tests.integration.metering.conftest import create_database, drop_database, pg_url
from tests.support.servers import PrivatePostgres
from tests.unit.settings.test_environment import MINIMAL, write

pytestmark = pytest.mark.integration

PRIMARY = "gateway_test_replica_fallback_primary"
REPLICA = "gateway_test_replica_fallback_replica"
ADMIN = {"Authorization": "Bearer admin-secret"}


async def _records(url: str, team: str, count: int) -> None:
    await upgrade_head_async(url)
    engine = create_engine(url)
    buffer = MemoryBuffer()
    for number in range(count):
        await buffer.append(event(team, number))
    await UsageWriter(buffer, session_factory(engine)).flush()
    await engine.dispose()


@pytest.fixture
def replica_server() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres().init()
    asyncio.run(create_database(PRIMARY))
    try:
        asyncio.run(_records(pg_url(PRIMARY), "team_primary", 3))
        asyncio.run(_records(server.create_database(REPLICA), "team_replica", 5))
        yield server
    finally:
        server.destroy()
        asyncio.run(drop_database(PRIMARY))


def teams_in(report: object) -> list[tuple[str, int]]:
    assert isinstance(report, dict)
    return [(row["team_id"], row["requests"]) for row in report["data"]]


def test_reports_fall_back_to_the_primary_while_the_replica_is_down(
    replica_server: PrivatePostgres, tmp_path: Path
) -> None:
    settings = load_settings(
        {
            "GATEWAY_CONFIG": str(write(tmp_path, MINIMAL)),
            "GATEWAY_DATABASE_URL": pg_url(PRIMARY),
            "GATEWAY_DATABASE_READ_URL": replica_server.url(REPLICA),
            "GATEWAY_ADMIN_KEY": "admin-secret",
        }
    )
    with TestClient(app=create_app(settings)) as client:
        before = client.get("/admin/usage", params={"group_by": "team"}, headers=ADMIN)
        ready_before = client.get("/readyz").json()
        replica_server.stop()  # its pooled connections die with it
        with structlog.testing.capture_logs() as logs:
            during = [
                client.get("/admin/usage", params={"group_by": "team"}, headers=ADMIN) for _ in range(3)
            ]
            events = client.get("/admin/usage/events", headers=ADMIN)
            ready_during = client.get("/readyz")

    assert teams_in(before.json()) == [("team_replica", 5)]
    assert "read_replica" not in ready_before["degraded"]
    for report in during:
        assert report.status_code == 200, report.text
        assert teams_in(report.json()) == [("team_primary", 3)]
    assert events.status_code == 200 and {e["team_id"] for e in events.json()["data"]} == {"team_primary"}
    assert ready_during.status_code == 200
    assert ready_during.json()["status"] == "ready" and "read_replica" in ready_during.json()["degraded"]
    episode = [entry for entry in logs if entry["event"] == "read_replica_unreachable"]
    print(f"\nreports during the outage: {len(during) + 1}, replica_unreachable lines logged: {len(episode)}")
    assert len(episode) == 1  # once per episode, not once per report


async def test_the_replica_is_read_again_once_back_and_its_cool_down_is_over(
    replica_server: PrivatePostgres,
) -> None:
    now = [0.0]
    primary = create_engine(pg_url(PRIMARY))
    replica = create_engine(replica_server.url(REPLICA), pre_ping=True)
    sessions = ReplicaSessions(replica, session_factory(primary), cool_down_s=30, clock=lambda: now[0])

    async def teams() -> list[str | None]:
        async with sessions() as session:
            return [row.team_id for row in await usage_report(session, UsageQuery(group_by=("team",)))]

    try:
        assert await teams() == ["team_replica"]
        await asyncio.to_thread(replica_server.stop)
        assert await teams() == ["team_primary"] and sessions.unreachable is not None
        await asyncio.to_thread(replica_server.start)
        now[0] = 29.0  # still cooling down: the primary, without trying the replica
        assert await teams() == ["team_primary"]
        now[0] = 31.0
        assert await teams() == ["team_replica"] and sessions.unreachable is None
    finally:
        await replica.dispose()
        await primary.dispose()
