"""The prompt-caching end-to-end stack: two `gateway serve` processes and recording mock upstreams.

Separate from `tests/e2e/conftest.py` because these tests need providers of their own (an
OpenAI-kind provider with `cache_hints: openai`, a self-hosted one with three replica base URLs)
and gateways that are restarted with a different catalog. They share one PostgreSQL database and
Redis db of their own (tests/support/stores.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai

from tests.support.gateway import GatewayProcess, create_team
from tests.support.stores import POSTGRES_ADMIN_URL, redis_url
from tests.support.upstream import RunningUpstream

ADMIN_KEY = "admin-caching-secret"
REDIS_URL = redis_url("e2e-caching")

# Prices in USD per million tokens, as configured below; the tests compute costs from these.
CLAUDE_PRICE = {"input": "3", "output": "15", "cached_input": "0.30", "cache_write": "3.75"}
GPT_PRICE = {"input": "0.50", "output": "1.50", "cached_input": "0.25"}

MAIN_CONFIG = """
providers:
  - name: claude-direct
    kind: anthropic
    region: us-east
    base_url: {upstream}
    api_key: upstream-secret-anthropic
    timeout_s: 5
  - name: openai-hinted
    kind: openai
    region: us-east
    base_url: {upstream}/v1
    api_key: upstream-secret-openai
    cache_hints: openai
    timeout_s: 5
  - name: selfhosted-plain     # kind openai, cache_hints left at auto: strip for a self-hosted server
    kind: openai
    region: eu-west
    base_url: {upstream}/v1
    timeout_s: 5
models:
  - name: claude
    deployments:
      - provider: claude-direct
        model: claude-sonnet-4-5
        price: {{input: 3, output: 15, cached_input: 0.30, cache_write: 3.75}}
  - name: gpt-hinted
    deployments:
      - provider: openai-hinted
        model: gpt-upstream
        price: {{input: 0.50, output: 1.50, cached_input: 0.25}}
  - name: llama-plain
    deployments:
      - provider: selfhosted-plain
        model: llama-upstream
        price: {{input: 0.10, output: 0.20}}
circuit:
  failure_threshold: 1000
"""

REPLICA_CONFIG = """
providers:
  - name: vllm-replicas
    kind: openai
    region: eu-west
    base_urls: [{replicas}]
    timeout_s: 10
models:
  - name: llama
    deployments:
      - provider: vllm-replicas
        model: meta-llama/Llama-3.1-70B-Instruct
        price: {{input: 0.60, output: 0.80, cached_input: 0.15, cache_write: 0.75}}
retry:
  max_attempts: 1
circuit:
  failure_threshold: 1000
"""


def gateway_env(database_url: str) -> dict[str, str]:
    return {
        "GATEWAY_DATABASE_URL": database_url,
        "GATEWAY_REDIS_URL": REDIS_URL,
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
        "GATEWAY_KEY_CACHE_TTL_S": "1",
    }


def drop_database(name: str) -> None:
    import asyncpg

    async def run() -> None:
        conn = await asyncpg.connect(POSTGRES_ADMIN_URL)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    asyncio.run(run())


def replica_config(replicas: Sequence[RunningUpstream], affinity_load_bound: float | None = None) -> str:
    config = REPLICA_CONFIG.format(replicas=", ".join(f"{r.base_url}/v1" for r in replicas))
    if affinity_load_bound is not None:
        config += f"scheduling:\n  affinity_load_bound: {affinity_load_bound}\n"
    return config


@dataclass
class CachingStack:
    """Two gateway processes over one catalog, one database and one Redis; one recording upstream."""

    upstream: RunningUpstream
    gateways: tuple[GatewayProcess, GatewayProcess]
    database_url: str
    workdir: Path
    admin: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.admin = httpx.Client(
            base_url=self.gateways[0].base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}
        )

    def client(self, key: str, gateway: int = 0, **kwargs: Any) -> openai.OpenAI:
        base_url = self.gateways[gateway].base_url + "/v1"
        return openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, **kwargs)

    def new_team_key(self, name: str) -> tuple[str, str]:
        """A new team and a key for it: (team id, secret)."""
        team = create_team(self.admin, name)
        return team.id, team.key

    def usage_rows(self, expected_requests: int, **params: str) -> list[dict[str, Any]]:
        """The admin usage report once it counts `expected_requests` (records are written off-path)."""
        rows: list[dict[str, Any]] = []
        for _ in range(100):
            rows = self.admin.get("/admin/usage", params=params).raise_for_status().json()["data"]
            if sum(int(row["requests"]) for row in rows) >= expected_requests:
                return rows
            time.sleep(0.1)
        raise AssertionError(f"the usage report never reached {expected_requests} requests: {rows}")

    def close(self) -> None:
        self.admin.close()
