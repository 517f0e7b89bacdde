"""A running `gateway serve` on its own PostgreSQL database (gateway_test_jobs_api), no Redis, and
two teams with a key each, for the Files and Batch API tests. Job runners are off: jobs stay
where the API puts them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from tests.support.gateway import GatewayProcess, Team, create_team, free_port, recreate_database

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
