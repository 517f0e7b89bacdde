"""End-to-end fixtures: `gateway serve` in front of `gateway mock-upstream`, real PostgreSQL and Redis."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
import redis

from tests.support.gateway import GatewayProcess, Team, create_team, recreate_database
from tests.support.stores import redis_url
from tests.support.upstream import RunningUpstream, fresh, start_mock_upstream

ADMIN_KEY = "admin-e2e-secret"
REDIS_URL = redis_url("e2e")
MAX_BODY = 1_048_576

CONFIG = """
providers:
  - name: up-openai
    kind: openai
    region: us-east
    base_url: {upstream}/v1
    api_key: upstream-secret-openai
    timeout_s: 3
  - name: up-azure
    kind: azure
    region: eu-west
    base_url: {upstream}
    api_key: upstream-secret-azure
    timeout_s: 3
  - name: up-anthropic
    kind: anthropic
    region: us-east
    base_url: {upstream}
    api_key: upstream-secret-anthropic
    timeout_s: 3
  - name: dead
    kind: openai
    region: ap-south
    base_url: http://127.0.0.1:{dead_port}/v1
    timeout_s: 2
models:
  - name: chat
    deployments:
      - provider: up-openai
        model: upstream-chat
        price: {{input: 0.50, output: 1.50, cached_input: 0.25}}
  - name: chat-azure
    deployments:
      - provider: up-azure
        model: azure-chat
        price: {{input: 0.55, output: 1.65}}
  - name: claude
    deployments:
      - provider: up-anthropic
        model: claude-test
        price: {{input: 3, output: 15, cached_input: 0.30, cache_write: 3.75}}
  - name: embed
    deployments:
      - provider: up-openai
        model: upstream-embed
        price: {{input: 0.02}}
  - name: nowhere
    deployments:
      - provider: dead
        model: x
        price: {{input: 1, output: 1}}
retry:
  max_attempts: 2
  backoff_base_s: 0.05
  backoff_max_s: 0.1
  retry_after_cap_s: 1
circuit:
  failure_threshold: 1000   # circuits are exercised by the batch tests, not here
limits:
  max_body_bytes: {max_body}
"""


@dataclass
class Stack:
    gateway: GatewayProcess
    upstream: RunningUpstream
    admin: httpx.Client

    @property
    def base_url(self) -> str:
        return self.gateway.base_url + "/v1"

    def client(self, key: str, **kwargs: object) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key=key, max_retries=0, **kwargs)  # type: ignore[arg-type]

    def new_team(self, name: str, **fields: object) -> Team:
        return create_team(self.admin, name, **fields)

    def usage(self, **params: str) -> list[dict[str, object]]:
        """The admin usage report once every record is written: polled until the totals have not
        changed for a second (a loaded machine's writer can take longer than one poll's gap)."""
        import time

        previous, unchanged = None, 0
        for _ in range(60):
            rows = self.admin.get("/admin/usage", params=params).json()["data"]
            unchanged = unchanged + 1 if rows == previous else 0
            if unchanged == 4:
                return rows  # type: ignore[no-any-return]
            previous = rows
            time.sleep(0.25)
        return previous  # type: ignore[return-value]


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    redis.Redis.from_url(REDIS_URL).flushdb()
    database_url = recreate_database(f"gateway_e2e_{os.getpid()}")
    upstream = start_mock_upstream()
    from tests.support.gateway import free_port

    config = tmp_path_factory.mktemp("e2e") / "gateway.yaml"
    config.write_text(CONFIG.format(upstream=upstream.base_url, dead_port=free_port(), max_body=MAX_BODY))
    gateway = GatewayProcess(
        config,
        {
            "GATEWAY_DATABASE_URL": database_url,
            "GATEWAY_REDIS_URL": REDIS_URL,
            "GATEWAY_ADMIN_KEY": ADMIN_KEY,
            "GATEWAY_KEY_CACHE_TTL_S": "1",
        },
    ).start()
    admin = httpx.Client(base_url=gateway.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"})
    try:
        yield Stack(gateway, upstream, admin)
    finally:
        admin.close()
        gateway.stop()
        upstream.stop()


@pytest.fixture(scope="session")
def team_a(stack: Stack) -> Team:
    return stack.new_team("team-a")


@pytest.fixture
def fresh_upstream(stack: Stack) -> Iterator[RunningUpstream]:
    yield from fresh(stack.upstream)


def config_path(stack: Stack) -> Path:
    return stack.gateway.config_path
