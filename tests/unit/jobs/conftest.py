"""A Litestar app with the Files and Batch handlers over real SQLite, a real KeyCache and the
routing tests' catalog; two teams with a key each."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from litestar import Litestar
from litestar.datastructures import State
from litestar.exceptions import HTTPException
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gateway.api.openai.batches import BATCH_JOB_HANDLERS
from gateway.api.openai.files import FILE_HANDLERS
from gateway.api.request_ids import RequestIdMiddleware
from gateway.app import DEPENDENCIES, gateway_error_handler, http_error_handler
from gateway.auth.key_cache import KeyCache
from gateway.db.keys import key_state_loader
from gateway.db.session import create_engine, session_factory
from gateway.errors import GatewayError
from gateway.idempotency import IdempotentRequests, MemoryIdempotencyStore
from gateway.jobs.files.slots import FileSlots
from gateway.jobs.files.store import FileStore
from gateway.metrics.instruments import Metrics
from gateway.routing.deployment import DeploymentTable
from gateway.settings import Settings
from tests.unit.auth.records import add_key, add_team, create_tables
from tests.unit.routing.catalog import CATALOG

Client = AsyncTestClient[Litestar]
JSONL = b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "chat"}}\n'


@dataclass
class StandInServices:
    """What the Files and Batch handlers use of the gateway's Services."""

    settings: Settings
    sessions: async_sessionmaker[AsyncSession]
    key_cache: KeyCache
    table: DeploymentTable
    file_store: FileStore | None = None  # the database keeps the bytes
    file_slots: FileSlots = field(default_factory=lambda: FileSlots(2, 10.0))
    metrics: Metrics = field(default_factory=Metrics)  # the error handlers count refusals
    # a create sent with an Idempotency-Key (kept in this process)
    idempotency: IdempotentRequests = field(
        default_factory=lambda: IdempotentRequests(
            MemoryIdempotencyStore(), 3600.0, 60.0, 1_000_000, count=lambda outcome: None
        )
    )
    jobs_created: int = 0

    def job_created(self) -> None:
        """What the handlers tell the process's job runner after a create commits."""
        self.jobs_created += 1


@dataclass(frozen=True)
class Caller:
    team_id: str
    headers: dict[str, str]


def jobs_app(services: StandInServices) -> Litestar:
    return Litestar(
        route_handlers=[*FILE_HANDLERS, *BATCH_JOB_HANDLERS],
        dependencies=DEPENDENCIES,
        exception_handlers={GatewayError: gateway_error_handler, HTTPException: http_error_handler},
        state=State({"services": services}),
        middleware=[RequestIdMiddleware],  # as the gateway's app: every request has its id
        request_max_body_size=1024 * 1024,  # the gateway's own limit, below the upload route's
    )


async def new_caller(sessions: async_sessionmaker[AsyncSession], team: str, **key_fields: object) -> Caller:
    created = await add_team(sessions, team)
    _, secret = await add_key(sessions, created.id, f"{team}-key", **key_fields)
    return Caller(created.id, {"Authorization": f"Bearer {secret}"})


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(f"sqlite:///{tmp_path}/gateway.db")
    await create_tables(engine)
    yield engine
    await engine.dispose()


@pytest.fixture
def services(engine: AsyncEngine) -> StandInServices:
    sessions = session_factory(engine)
    settings = Settings(
        catalog=CATALOG, config_path="(test)", database_url="sqlite://", redis_url=None, admin_key=None
    )
    return StandInServices(
        settings,
        sessions,
        KeyCache(key_state_loader(sessions), ttl_s=3600.0),
        DeploymentTable.from_catalog(CATALOG),
    )


@pytest.fixture
async def client(services: StandInServices) -> AsyncIterator[Client]:
    async with AsyncTestClient(app=jobs_app(services)) as client:
        yield client


@pytest.fixture
async def alice(services: StandInServices) -> Caller:
    return await new_caller(services.sessions, "alice")


@pytest.fixture
async def bob(services: StandInServices) -> Caller:
    return await new_caller(services.sessions, "bob")


async def upload(
    client: Client, caller: Caller, data: bytes = JSONL, name: str = "in.jsonl"
) -> dict[str, object]:
    response = await client.post(
        "/v1/files", headers=caller.headers, files={"file": (name, data)}, data={"purpose": "batch"}
    )
    assert response.status_code == 200, response.text
    created: dict[str, object] = response.json()
    return created
