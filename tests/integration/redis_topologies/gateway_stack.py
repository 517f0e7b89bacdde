"""What the tests that run a real `gateway serve` share: its catalog (one model from two mock
upstreams in two regions), and reading its usage records from PostgreSQL."""

from __future__ import annotations

import asyncio
import time

import asyncpg

from tests.support.stores import POSTGRES_ADMIN_URL

ADMIN_KEY = "admin-redis-topologies-secret"
DRAIN_TIMEOUT_S = 90.0

CONFIG = """
providers:
  - name: east
    kind: openai
    region: us-east
    base_url: {east}/v1
    timeout_s: 5
  - name: west
    kind: openai
    region: eu-west
    base_url: {west}/v1
    timeout_s: 5
models:
  - name: chat
    deployments:
      - provider: east
        model: east-chat
        price: {{input: 0.50, output: 1.50}}
      - provider: west
        model: west-chat
        price: {{input: 0.40, output: 1.20}}
"""


async def drop_database(name: str) -> None:
    connection = await asyncpg.connect(POSTGRES_ADMIN_URL)
    try:
        await connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await connection.close()


async def usage_records(database_url: str, team_id: str) -> list[asyncpg.Record]:
    connection = await asyncpg.connect(database_url)
    try:
        return list(
            await connection.fetch(
                "SELECT request_id, batch_id, deployment, status FROM usage_records WHERE team_id = $1",
                team_id,
            )
        )
    finally:
        await connection.close()


async def drained(database_url: str, team_id: str, expected: set[str]) -> list[asyncpg.Record]:
    """The team's records once every request id in `expected` has one (or the drain timed out)."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while True:
        records = await usage_records(database_url, team_id)
        if expected <= {r["request_id"] for r in records} or time.monotonic() > deadline:
            return records
        await asyncio.sleep(0.25)
