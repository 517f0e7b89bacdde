"""What a serving worker's own writer moves into the database, by GATEWAY_METERING_WRITER."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select

from gateway.db.migrate import upgrade_head_async
from gateway.db.models import UsageRecord
from gateway.metering.storage.redis_buffer import RedisStreamBuffer
from gateway.services import open_services
from gateway.settings import load_settings
from tests.unit.metering.conftest import EventFactory

REPO = Path(__file__).resolve().parents[4]
UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"  # nothing listens there: every append spools


def _settings(tmp_path: Path, metering_writer: str) -> dict[str, str]:
    return {
        "GATEWAY_CONFIG": str(REPO / "config" / "gateway.yaml"),
        "GATEWAY_DATABASE_URL": f"sqlite:///{tmp_path}/gateway.db",
        "GATEWAY_REDIS_URL": UNREACHABLE_REDIS,
        "GATEWAY_METERING_WRITER": metering_writer,
    }


@pytest.mark.parametrize(("mode", "writes_the_stream"), [("auto", True), ("worker", True), ("process", False),
                                                         ("external", False)])  # fmt: skip
async def test_with_a_writer_process_a_worker_writes_only_its_spool(
    tmp_path: Path, mode: str, writes_the_stream: bool
) -> None:
    services = open_services(load_settings(_settings(tmp_path, mode)))
    try:
        assert isinstance(services.buffer, RedisStreamBuffer)
        expected = services.buffer if writes_the_stream else services.buffer.spool
        assert services.writer.buffer is expected
    finally:
        await services.aclose()


async def test_what_a_worker_spooled_while_redis_was_away_is_written_by_the_worker(
    tmp_path: Path, make_event: EventFactory
) -> None:
    settings = load_settings(_settings(tmp_path, "process"))
    await upgrade_head_async(settings.database_url)
    services = open_services(settings)
    try:
        await services.buffer.append(make_event())
        assert isinstance(services.buffer, RedisStreamBuffer) and services.buffer.spooling

        await services.writer.flush()

        async with services.sessions() as session:
            assert await session.scalar(select(func.count()).select_from(UsageRecord)) == 1
    finally:
        await services.aclose()
