"""A minimal Litestar app with the admin controllers over real SQLite and a real KeyCache."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from litestar import Litestar, Request, Response
from litestar.datastructures import State
from litestar.testing import AsyncTestClient
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gateway.api.admin import ADMIN_CONTROLLERS
from gateway.app import DEPENDENCIES
from gateway.auth.attempts import KeyAttempts
from gateway.auth.key_cache import KeyCache
from gateway.db.keys import key_state_loader
from gateway.db.session import create_engine, session_factory
from gateway.errors import GatewayError
from gateway.metrics.instruments import Metrics
from gateway.settings import Catalog, Settings
from tests.unit.auth.records import create_tables

ADMIN_KEY = "admin-test-secret"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@dataclass
class StandInServices:
    settings: Settings
    sessions: async_sessionmaker[AsyncSession]
    key_cache: KeyCache
    redis: Redis | None = None
    metrics: Metrics = field(default_factory=Metrics)  # the error handlers count refusals
    key_attempts: KeyAttempts = field(default_factory=lambda: KeyAttempts(None))


def settings_with(admin_key: str | None) -> Settings:
    return Settings(
        catalog=Catalog(providers=(), models=()),
        config_path="(test)",
        database_url="sqlite://",
        redis_url=None,
        admin_key=admin_key,
    )


def render_gateway_error(_: Request, exc: GatewayError) -> Response[bytes]:  # type: ignore[type-arg]
    return Response(exc.to_json(), status_code=exc.status, media_type="application/json", headers=exc.headers)


def admin_app(services: StandInServices) -> Litestar:
    return Litestar(
        route_handlers=ADMIN_CONTROLLERS,
        dependencies=DEPENDENCIES,
        exception_handlers={GatewayError: render_gateway_error},
        state=State({"services": services}),
    )


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(f"sqlite:///{tmp_path}/gateway.db")
    await create_tables(engine)
    yield engine
    await engine.dispose()


@pytest.fixture
def services(engine: AsyncEngine) -> StandInServices:
    sessions = session_factory(engine)
    return StandInServices(
        settings_with(ADMIN_KEY), sessions, KeyCache(key_state_loader(sessions), ttl_s=3600.0)
    )


@pytest.fixture
async def client(services: StandInServices) -> AsyncIterator[AsyncTestClient[Litestar]]:
    async with AsyncTestClient(app=admin_app(services)) as client:
        yield client
