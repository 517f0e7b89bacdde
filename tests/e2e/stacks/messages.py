"""The Messages API end-to-end stack: `gateway serve` in front of a recording `gateway mock-upstream`,
with one model alias per provider kind (anthropic, openai, azure, mock), one served by two kinds,
and two on providers capped at one request in flight.

It has its own PostgreSQL database, and a private redis-server on a free port
(`tests/faults/stores.PrivateRedis`): the shared server's sixteen dbs are all spoken for by other areas.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import anthropic
import httpx

from tests.e2e.stacks.caching import drop_database
from tests.faults.stores import PrivateRedis
from tests.support.gateway import GatewayProcess, Team, create_team, recreate_database
from tests.support.upstream import RunningUpstream, start_mock_upstream

ADMIN_KEY = "admin-messages-secret"
MILLION = Decimal(1_000_000)
# USD per million tokens, as configured below: (input, output, cached input, cache write)
PRICES = {
    "claude": (Decimal(3), Decimal(15), Decimal("0.30"), Decimal("3.75")),
    "gpt": (Decimal("0.50"), Decimal("1.50"), Decimal("0.25"), Decimal("0.50")),
}

CONFIG = """
providers:
  - name: msg-anthropic
    kind: anthropic
    region: us-east
    base_url: {upstream}
    api_key: upstream-secret-anthropic
    timeout_s: 5
  - name: msg-openai
    kind: openai
    region: eu-west
    base_url: {upstream}/v1
    api_key: upstream-secret-openai
    cache_hints: openai
    timeout_s: 5
  - name: msg-azure
    kind: azure
    region: eu-west
    base_url: {upstream}
    api_key: upstream-secret-azure
    timeout_s: 5
  - name: msg-local
    kind: mock
    region: us-east
  - name: msg-anthropic-capped
    kind: anthropic
    region: us-east
    base_url: {upstream}
    capacity: {{max_concurrency: 1}}
  - name: msg-openai-capped
    kind: openai
    region: eu-west
    base_url: {upstream}/v1
    capacity: {{max_concurrency: 1}}
models:
  - name: claude
    deployments:
      - provider: msg-anthropic
        model: claude-up
        price: {{input: 3, output: 15, cached_input: 0.30, cache_write: 3.75}}
  - name: gpt
    deployments:
      - provider: msg-openai
        model: gpt-up
        price: {{input: 0.50, output: 1.50, cached_input: 0.25}}
  - name: gpt-azure
    deployments:
      - provider: msg-azure
        model: azure-gpt
        price: {{input: 0.55, output: 1.65}}
  - name: local
    deployments:
      - provider: msg-local
        model: local-up
        price: {{input: 0.10, output: 0.20}}
  - name: mixed
    deployments:
      - provider: msg-anthropic
        model: claude-up
        price: {{input: 3, output: 15, cached_input: 0.30, cache_write: 3.75}}
      - provider: msg-openai
        model: gpt-up
        price: {{input: 0.50, output: 1.50, cached_input: 0.25}}
  - name: claude-capped
    deployments:
      - provider: msg-anthropic-capped
        model: claude-up
  - name: gpt-capped
    deployments:
      - provider: msg-openai-capped
        model: gpt-up
scheduling:
  queue_timeout_s: {{interactive: 2}}
retry:
  max_attempts: 2
  backoff_base_s: 0.05
  backoff_max_s: 0.1
  retry_after_cap_s: 0.2
circuit:
  failure_threshold: 1000
"""


def expected_cost(model: str, usage: Any) -> Decimal:
    """A reply's cost from its Anthropic usage counts and the configured price, computed here."""
    price_in, price_out, price_cached, price_written = PRICES[model]
    read = usage.cache_read_input_tokens or 0
    written = usage.cache_creation_input_tokens or 0
    total = usage.input_tokens * price_in + read * price_cached + written * price_written
    return (total + usage.output_tokens * price_out) / MILLION


@dataclass
class MessagesStack:
    gateway: GatewayProcess
    upstream: RunningUpstream
    admin: httpx.Client

    def client(self, key: str, **kwargs: Any) -> anthropic.Anthropic:
        """The anthropic SDK as its users set it up: the key goes out as `x-api-key`."""
        return anthropic.Anthropic(base_url=self.gateway.base_url, api_key=key, max_retries=0, **kwargs)

    def bearer_client(self, key: str) -> anthropic.Anthropic:
        """The SDK with `auth_token`: the key goes out as `Authorization: Bearer`."""
        return anthropic.Anthropic(base_url=self.gateway.base_url, auth_token=key, max_retries=0)

    def new_team(self, name: str) -> Team:
        return create_team(self.admin, name)

    def events(self, team_id: str, expected: int) -> list[dict[str, Any]]:
        """The team's usage records once there are `expected` of them (they are written off-path)."""
        events: list[dict[str, Any]] = []
        for _ in range(150):
            events = self.admin.get("/admin/usage/events", params={"team_id": team_id}).json()["data"]
            if len(events) >= expected:
                return events
            time.sleep(0.1)
        raise AssertionError(f"{len(events)} usage records for team {team_id}, expected {expected}")


def messages_stack(workdir: Any) -> Iterator[MessagesStack]:
    """The body of a module-scoped fixture: the stack, torn down afterwards."""
    redis_server = PrivateRedis(appendonly=False).start()
    database_name = f"gateway_e2e_messages_{os.getpid()}"
    database_url = recreate_database(database_name)
    upstream = start_mock_upstream()
    config = workdir / "gateway.yaml"
    config.write_text(CONFIG.format(upstream=upstream.base_url))
    env = {
        "GATEWAY_DATABASE_URL": database_url,
        "GATEWAY_REDIS_URL": redis_server.url(0),
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
        "GATEWAY_KEY_CACHE_TTL_S": "1",
    }
    gateway: GatewayProcess | None = None
    try:
        gateway = GatewayProcess(config, env).start()
        admin = httpx.Client(base_url=gateway.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"})
        yield MessagesStack(gateway, upstream, admin)
        admin.close()
    finally:
        if gateway is not None:
            gateway.stop()
        upstream.stop()
        redis_server.destroy()
        drop_database(database_name)
