"""The Files and Batch API and the job runner against real PostgreSQL.

The API's tests talk to a running `gateway serve` on its own database (gateway_test_jobs_api), no
Redis, with two teams holding a key each; its job runners are off, so jobs stay where the API puts
them. The runner's tests build services in-process on another database (gateway_test_jobs_runner)
and write jobs and their lines straight into the tables, as the Batch API's create would leave them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import openai
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
from tests.support.gateway import GatewayProcess, Team, create_team, free_port, recreate_database
from tests.support.stores import POSTGRES_ADMIN_URL, postgres_url
from tests.unit.auth.records import add_key, add_team, create_tables

pytestmark = pytest.mark.integration

DATABASE = "gateway_test_jobs_api"
ADMIN_KEY = "admin-jobs-api-secret"

CONFIG = """
providers:
  - name: vllm-eu
    kind: openai
    region: eu-west
    base_url: http://127.0.0.1:{dead_port}/v1
  - name: vllm-us
    kind: openai
    region: us-east
    base_url: http://127.0.0.1:{dead_port}/v1
models:
  - name: chat
    deployments:
      - provider: vllm-eu
        model: llama
      - provider: vllm-us
        model: llama
jobs:
  runner: false
"""


@dataclass
class JobsGateway:
    process: GatewayProcess
    admin: httpx.Client

    def client(self, team: Team) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.process.base_url + "/v1", api_key=team.key, max_retries=0)

    def http(self, team: Team) -> httpx.Client:
        """The raw JSON of the same API, to validate it against OpenAI's document."""
        return httpx.Client(base_url=self.process.base_url, headers={"authorization": f"Bearer {team.key}"})


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobsGateway]:
    database_url = recreate_database(DATABASE)
    config: Path = tmp_path_factory.mktemp("jobs-api") / "gateway.yaml"
    config.write_text(CONFIG.format(dead_port=free_port()))
    process = GatewayProcess(
        config,
        {"GATEWAY_DATABASE_URL": database_url, "GATEWAY_ADMIN_KEY": ADMIN_KEY, "GATEWAY_REDIS_URL": ""},
    ).start()
    admin = httpx.Client(base_url=process.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"})
    try:
        yield JobsGateway(process, admin)
    finally:
        admin.close()
        process.stop()


@pytest.fixture(scope="session")
def team_a(gateway: JobsGateway) -> Team:
    return create_team(gateway.admin, "jobs-team-a")


@pytest.fixture(scope="session")
def team_b(gateway: JobsGateway) -> Team:
    return create_team(gateway.admin, "jobs-team-b")


# --- the job runner's tests -----------------------------------------------------------------------

RUNNER_DATABASE = "gateway_test_jobs_runner"
MODEL = "m"
# Short leases and polls, so that a takeover happens within a test; quick retries and circuits.
JOBS = JobSettings(runner=False, lease_s=1.0, poll_interval_s=0.05, concurrency=64, pause_s=0.3)


@pytest.fixture(scope="session")
async def runner_database_url() -> str:
    conn = await asyncpg.connect(POSTGRES_ADMIN_URL)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{RUNNER_DATABASE}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{RUNNER_DATABASE}"')
    finally:
        await conn.close()
    return postgres_url(RUNNER_DATABASE)


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
async def make_services(runner_database_url: str) -> AsyncIterator[ServicesFactory]:
    """Services over a fresh schema, as `gateway serve` builds them (the runner not started)."""
    engine = create_engine(runner_database_url)
    await create_tables(engine)
    await engine.dispose()
    opened: list[Services] = []

    def make(catalog: Catalog) -> Services:
        settings = Settings(
            catalog=catalog, config_path="", database_url=runner_database_url, redis_url=None, admin_key=None
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
