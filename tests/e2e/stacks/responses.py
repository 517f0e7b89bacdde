"""The Responses API end-to-end stack: `gateway serve` in front of one `gateway mock-upstream`, with
providers that pass /v1/responses through (`responses_api: native`, Azure) and ones that translate
it to chat (a self-hosted OpenAI-compatible server, Anthropic).

Separate from tests/e2e/conftest.py because these tests need providers of their own. A PostgreSQL
database of its own; no Redis (every Redis db of tests/support/stores.py has its area): the one
gateway process keeps pins and limits in process, as `gateway serve` does without Redis.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai

from tests.support.gateway import GatewayProcess, Team, create_team, recreate_database
from tests.support.upstream import RunningUpstream, start_mock_upstream

ADMIN_KEY = "admin-responses-secret"

CONFIG = """
providers:
  - name: openai-us               # serves the Responses API itself
    kind: openai
    region: us-east
    base_url: {upstream}/us/v1
    api_key: upstream-secret-openai
    responses_api: native
    timeout_s: 5
  - name: openai-eu               # a second deployment of the same model, for the batch pin
    kind: openai
    region: eu-west
    base_url: {upstream}/eu/v1
    api_key: upstream-secret-openai
    responses_api: native
    timeout_s: 5
  - name: selfhosted              # auto: not api.openai.com, so translated to chat
    kind: openai
    region: us-east
    base_url: {upstream}/v1
    timeout_s: 5
  - name: azure-eu                # auto: Azure passes through, on its v1 surface
    kind: azure
    region: eu-west
    base_url: {upstream}
    api_key: upstream-secret-azure
    timeout_s: 5
  - name: claude-direct           # translated to chat, and on to the Messages API
    kind: anthropic
    region: us-east
    base_url: {upstream}
    api_key: upstream-secret-anthropic
    timeout_s: 5
models:
  - name: gpt
    deployments:
      - provider: openai-us
        model: gpt-upstream
        price: {{input: 1.25, output: 10, cached_input: 0.125}}
      - provider: openai-eu
        model: gpt-upstream
        price: {{input: 1.25, output: 10, cached_input: 0.125}}
  - name: llama
    deployments:
      - provider: selfhosted
        model: llama-upstream
        price: {{input: 0.60, output: 0.80}}
  - name: gpt-azure
    deployments:
      - provider: azure-eu
        model: azure-deployment
        price: {{input: 1.25, output: 10}}
  - name: claude
    deployments:
      - provider: claude-direct
        model: claude-upstream
        price: {{input: 3, output: 15, cached_input: 0.30, cache_write: 3.75}}
retry:
  max_attempts: 1
circuit:
  failure_threshold: 1000
"""


@dataclass
class ResponsesStack:
    gateway: GatewayProcess
    upstream: RunningUpstream
    admin: httpx.Client

    def client(self, key: str, **kwargs: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.gateway.base_url + "/v1", api_key=key, max_retries=0, **kwargs)

    def new_team(self, name: str) -> Team:
        return create_team(self.admin, name)

    def records(self, team: Team, expected: int) -> list[dict[str, Any]]:
        """The team's usage records, newest first, once `expected` of them are written."""
        rows: list[dict[str, Any]] = []
        for _ in range(80):
            rows = self.admin.get("/admin/usage/events", params={"team_id": team.id, "limit": 100}).json()[
                "data"
            ]
            if len(rows) >= expected:
                return rows
            time.sleep(0.25)
        return rows


def responses_stack(workdir: Path) -> Iterator[ResponsesStack]:
    """The body of a pytest fixture: `yield from responses_stack(tmp_path)`."""
    database = f"gateway_e2e_responses_{os.getpid()}"
    database_url = recreate_database(database)
    upstream = start_mock_upstream()
    config = workdir / "gateway.yaml"
    config.write_text(CONFIG.format(upstream=upstream.base_url))
    gateway = GatewayProcess(
        config,
        {
            "GATEWAY_DATABASE_URL": database_url,
            "GATEWAY_REDIS_URL": "",  # in process, whatever the environment says
            "GATEWAY_ADMIN_KEY": ADMIN_KEY,
            "GATEWAY_KEY_CACHE_TTL_S": "1",
        },
    )
    try:
        gateway.start()
        admin = httpx.Client(base_url=gateway.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"})
        try:
            yield ResponsesStack(gateway, upstream, admin)
        finally:
            admin.close()
    finally:
        gateway.stop()
        upstream.stop()
