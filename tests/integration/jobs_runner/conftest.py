"""Real PostgreSQL (database gateway_test_jobs_runner) for the job runner's tests; jobs and their
lines are written straight into the tables, as the Batch API's create would leave them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.models import BatchJob, BatchLine
from gateway.db.session import create_engine
from gateway.db.teams import utcnow
from gateway.services import Services, open_services
from gateway.settings import (
    Catalog,
    CircuitSettings,
    JobSettings,
    Price,
    Provider,
    ProviderKind,
    RetrySettings,
    Settings,
)
from tests.support.catalogs import catalog, deployment, model, provider
from tests.support.stores import POSTGRES_ADMIN_URL, postgres_url
from tests.unit.auth.records import add_key, add_team, create_tables

pytestmark = pytest.mark.integration

DATABASE = "gateway_test_jobs_runner"
DATABASE_URL = postgres_url(DATABASE)
MODEL = "m"
# Short leases and polls, so that a takeover happens within a test; quick retries and circuits.
JOBS = JobSettings(runner=False, lease_s=1.0, poll_interval_s=0.05, concurrency=64, pause_s=0.3)


@pytest.fixture(scope="session")
async def database_url() -> str:
    conn = await asyncpg.connect(POSTGRES_ADMIN_URL)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{DATABASE}"')
    finally:
        await conn.close()
    return DATABASE_URL


def catalog_with(serving: Provider, jobs: JobSettings = JOBS, price: Price | None = None) -> Catalog:
    """`serving` alone behind MODEL, with quick retries and a circuit that stays closed."""
    return catalog(
        serving,
        models=[model(MODEL, deployment(serving, "m-up", price=price))],
        retry=RetrySettings(max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.02),
        circuit=CircuitSettings(failure_threshold=1000, cooldown_s=0.5),
        jobs=jobs,
    )


MOCK = provider("mock", ProviderKind.MOCK, region="eu")
MOCK_CATALOG = catalog_with(MOCK)
ServicesFactory = Callable[[Catalog], Services]


@pytest.fixture
async def make_services(database_url: str) -> AsyncIterator[ServicesFactory]:
    """Services over a fresh schema, as `gateway serve` builds them (the runner not started)."""
    engine = create_engine(database_url)
    await create_tables(engine)
    await engine.dispose()
    opened: list[Services] = []

    def make(catalog: Catalog) -> Services:
        settings = Settings(
            catalog=catalog, config_path="", database_url=database_url, redis_url=None, admin_key=None
        )
        services = open_services(settings)
        opened.append(services)
        return services

    yield make
    for services in opened:
        await services.aclose()


@pytest.fixture
async def services(make_services: ServicesFactory) -> Services:
    return make_services(MOCK_CATALOG)


@dataclass(frozen=True)
class Owner:
    team_id: str
    key_id: str


@pytest.fixture
async def owner(services: Services) -> Owner:
    team = await add_team(services.sessions)
    key, _ = await add_key(services.sessions, team.id)
    return Owner(team.id, key.id)


def chat_body(n: int, *, system: str = "You are terse.", **extra: Any) -> dict[str, Any]:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": f"question {n}"}]
    return {"model": MODEL, "messages": messages, **extra}


async def add_job(
    sessions: async_sessionmaker[AsyncSession],
    owner: Owner,
    bodies: list[dict[str, Any]],
    *,
    expires_in_s: float = 86_400,
    directives: dict[str, str] | None = None,
    model: str = MODEL,
) -> str:
    """A job in `validating` with one line per body (custom_id `req-<n>`), as the API creates it."""
    now = utcnow()
    job_id = "batch_" + hashlib.sha256(f"{now.isoformat()}{len(bodies)}".encode()).hexdigest()[:24]
    async with sessions.begin() as session:
        session.add(
            BatchJob(
                id=job_id,
                team_id=owner.team_id,
                key_id=owner.key_id,
                endpoint="/v1/chat/completions",
                input_file_id="file-input",
                completion_window="24h",
                status="validating",
                model=model,
                directives=directives,
                request_total=len(bodies),
                created_at=now,
                expires_at=now + timedelta(seconds=expires_in_s),
            )
        )
        await session.flush()
        session.add_all(
            BatchLine(
                job_id=job_id,
                line_no=n,
                custom_id=f"req-{n}",
                body=json.dumps(body),
                prefix_key=hashlib.sha256(json.dumps(body["messages"][:-1]).encode()).hexdigest()[:32],
            )
            for n, body in enumerate(bodies)
        )
    return job_id


async def job_row(sessions: async_sessionmaker[AsyncSession], job_id: str) -> BatchJob:
    async with sessions() as session:
        job = (await session.scalars(select(BatchJob).where(BatchJob.id == job_id))).one()
        session.expunge(job)
        return job
