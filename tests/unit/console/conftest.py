"""Console apps over real SQLite and a real KeyCache, each standing for one gateway process: the
console router under the app-level `services` dependency, as gateway.app wires it, with Redis
(fakeredis, one server for all of them) or without."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import fakeredis
import pytest
from litestar import Litestar
from litestar.datastructures import State
from litestar.di import Provide
from litestar.testing import AsyncTestClient
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gateway.auth.attempts import KeyAttempts
from gateway.auth.key_cache import KeyCache
from gateway.console import console_router, console_templates
from gateway.db.keys import key_state_loader
from gateway.db.session import create_engine, session_factory
from gateway.services import provide_services
from gateway.settings import Catalog, Settings
from tests.unit.auth.records import create_tables

ADMIN_KEY = "admin-console-secret"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@dataclass
class StandInServices:
    """What the console reads of a process's services."""

    settings: Settings
    sessions: async_sessionmaker[AsyncSession]
    key_cache: KeyCache
    redis: Redis | None = None
    key_attempts: KeyAttempts = field(default_factory=lambda: KeyAttempts(None))


def console_settings(admin_key: str | None = ADMIN_KEY) -> Settings:
    return Settings(
        catalog=Catalog(providers=(), models=()),
        config_path="(test)",
        database_url="sqlite://",
        redis_url=None,
        admin_key=admin_key,
    )


def console_app(services: StandInServices) -> Litestar:
    return Litestar(
        route_handlers=[console_router(services.settings)],
        dependencies={"services": Provide(provide_services, sync_to_thread=False)},
        template_config=console_templates(),
        state=State({"services": services}),
        debug=True,
    )


ConsoleProcess = Callable[..., AbstractAsyncContextManager[AsyncTestClient[Litestar]]]


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(f"sqlite:///{tmp_path}/gateway.db")
    await create_tables(engine)
    yield engine
    await engine.dispose()


@pytest.fixture
def sessions(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return session_factory(engine)


@pytest.fixture
def redis_server() -> fakeredis.FakeServer:
    return fakeredis.FakeServer()


@pytest.fixture
def console_process(
    sessions: async_sessionmaker[AsyncSession], redis_server: fakeredis.FakeServer
) -> ConsoleProcess:
    """A console process of its own (its memory, its key cache) on the shared database and, unless
    told `redis=False`, the shared Redis."""

    @asynccontextmanager
    async def process(
        *, redis: bool = True, admin_key: str | None = ADMIN_KEY
    ) -> AsyncIterator[AsyncTestClient[Litestar]]:
        client = fakeredis.FakeAsyncRedis(server=redis_server) if redis else None
        services = StandInServices(
            console_settings(admin_key),
            sessions,
            KeyCache(key_state_loader(sessions), ttl_s=3600.0, redis=client),
            client,
        )
        async with AsyncTestClient(app=console_app(services)) as http:
            http.follow_redirects = False
            yield http
        if client is not None:
            await client.aclose()

    return process
