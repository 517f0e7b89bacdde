"""Fixtures for metering unit tests: a usage-event factory and a migrated SQLite database."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator, Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.migrate import upgrade_head_async
from gateway.db.session import create_engine, session_factory
from gateway.metering.events import UsageEvent, UsageSource

EventFactory = Callable[..., UsageEvent]


@pytest.fixture
def make_event() -> EventFactory:
    sequence = itertools.count()

    def make(**overrides: Any) -> UsageEvent:
        values: dict[str, Any] = {
            "request_id": f"req_{uuid.uuid4().hex}",
            "created_at": 1_767_225_600.0 + next(sequence),  # 2026-01-01T00:00:00Z onwards
            "team_id": "team_a",
            "key_id": "key_a",
            "model": "gpt-4o",
            "provider": "openai-us",
            "region": "us-east",
            "deployment": "openai-us/gpt-4o",
            "upstream_model": "gpt-4o-2024-08-06",
            "endpoint": "chat/completions",
            "status": 200,
            "prompt_tokens": 100,
            "completion_tokens": 20,
            "usage_source": UsageSource.UPSTREAM,
            "cost": Decimal("0.00045"),
            "uncached_cost": Decimal("0.00045"),
            "latency_ms": 123.4567,
        }
        values.update(overrides)
        return UsageEvent(**values)

    return make


@pytest.fixture
async def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'gateway.db'}"
    await upgrade_head_async(url)
    return url


@pytest.fixture
async def sqlite_sessions(sqlite_url: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = create_engine(sqlite_url)
    yield session_factory(engine)
    await engine.dispose()
