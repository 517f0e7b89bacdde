"""Fixtures for the batch tests: TWO `gateway serve` processes sharing one Redis and one PostgreSQL,
in front of TWO mock upstream processes that serve one model alias from two regions.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
import redis

from tests.support.gateway import GatewayProcess, Team, create_team, free_port, recreate_database
from tests.support.stores import redis_url
from tests.support.upstream import RunningUpstream, start_mock_upstream

ADMIN_KEY = "admin-batches-secret"
REDIS_URL = redis_url("e2e-batches")  # this suite's own db, flushed at start
MAX_ATTEMPTS = 3
FAILURE_THRESHOLD = 4

CONFIG = """
providers:
  - name: east
    kind: openai
    region: us-east
    base_url: {east}/v1
    api_key: east-secret
    timeout_s: 5
    cache_hints: openai
  - name: west
    kind: openai
    region: eu-west
    base_url: {west}/v1
    api_key: west-secret
    timeout_s: 5
models:
  - name: chat
    deployments:
      - provider: east
        model: east-chat
        price: {{input: 0.50, output: 1.50, cached_input: 0.25}}
      - provider: west
        model: west-chat
        price: {{input: 0.40, output: 1.20}}
retry:
  max_attempts: {max_attempts}
  backoff_base_s: 0.02
  backoff_max_s: 0.05
  retry_after_cap_s: 1
circuit:
  failure_threshold: {threshold}
  cooldown_s: 300
"""


@dataclass
class BatchStack:
    gateways: tuple[GatewayProcess, GatewayProcess]
    upstreams: dict[str, RunningUpstream]  # by provider name: east, west
    admin: httpx.Client

    def client(self, key: str, gateway: int = 0, **kwargs: object) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=self.gateways[gateway].base_url + "/v1", api_key=key, max_retries=0, **kwargs
        )  # type: ignore[arg-type]

    def async_clients(self, key: str, **kwargs: object) -> list[openai.AsyncOpenAI]:
        return [
            openai.AsyncOpenAI(base_url=g.base_url + "/v1", api_key=key, max_retries=0, timeout=60, **kwargs)  # type: ignore[arg-type]
            for g in self.gateways
        ]

    def http(self, key: str, gateway: int = 0) -> httpx.Client:
        return httpx.Client(
            base_url=self.gateways[gateway].base_url, headers={"authorization": f"Bearer {key}"}
        )

    def new_team(self, name: str, **fields: object) -> Team:
        return create_team(self.admin, name, **fields)

    def received(self, provider: str) -> list[dict[str, object]]:
        """The chat requests an upstream recorded (control calls excluded)."""
        return [
            r for r in self.upstreams[provider].requests() if str(r["path"]).endswith("/chat/completions")
        ]

    def circuits(self, gateway: int) -> dict[str, str]:
        rows = httpx.get(
            self.gateways[gateway].base_url + "/admin/providers",
            headers={"authorization": f"Bearer {ADMIN_KEY}"},
        ).json()["data"]
        return {row["provider"]: row["circuit"] for row in rows}

    def wait_for_circuits(self, expected: dict[str, str]) -> None:
        """Poll both processes until their health snapshots (refreshed from Redis) show `expected`."""
        for _ in range(100):
            if all(self.circuits(i) == expected for i in range(2)):
                return
            time.sleep(0.1)
        store = redis.Redis.from_url(REDIS_URL)
        shared = {key: store.hgetall(key) for key in store.scan_iter("gw:circuit:*")}
        store.close()
        raise AssertionError(
            f"circuits never became {expected}: {[self.circuits(i) for i in range(2)]}; in Redis: {shared}"
        )

    def reset(self) -> None:
        """Healthy upstreams with empty records, and every circuit closed in both processes."""
        for upstream in self.upstreams.values():
            upstream.set_behaviour()
            upstream.clear()
        store = redis.Redis.from_url(REDIS_URL)
        for key in store.scan_iter("gw:circuit:*"):
            store.delete(key)
        store.close()
        self.wait_for_circuits({"east": "closed", "west": "closed"})


def write_config(directory: Path, east: RunningUpstream, west: RunningUpstream) -> Path:
    config = directory / "gateway.yaml"
    config.write_text(
        CONFIG.format(
            east=east.base_url, west=west.base_url, max_attempts=MAX_ATTEMPTS, threshold=FAILURE_THRESHOLD
        )
    )
    return config


def start_pair(config: Path, env: dict[str, str]) -> tuple[GatewayProcess, GatewayProcess]:
    """Two processes on one config; started one after the other so that one migrates first."""
    first = GatewayProcess(config, env).start()
    try:
        second = GatewayProcess(config, env).start()
    except BaseException:
        first.stop()
        raise
    return first, second


@pytest.fixture(scope="module")
def upstream_pair() -> Iterator[dict[str, RunningUpstream]]:
    east = start_mock_upstream()
    try:
        west = start_mock_upstream()
    except BaseException:
        east.stop()
        raise
    yield {"east": east, "west": west}
    east.stop()
    west.stop()


@pytest.fixture(scope="module")
def batch_stack(
    tmp_path_factory: pytest.TempPathFactory, upstream_pair: dict[str, RunningUpstream]
) -> Iterator[BatchStack]:
    redis.Redis.from_url(REDIS_URL).flushdb()
    database_url = recreate_database(f"gateway_e2e_batches_{os.getpid()}")
    config = write_config(tmp_path_factory.mktemp("batches"), upstream_pair["east"], upstream_pair["west"])
    env = {
        "GATEWAY_DATABASE_URL": database_url,
        "GATEWAY_REDIS_URL": REDIS_URL,
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
        "GATEWAY_KEY_CACHE_TTL_S": "1",
    }
    gateways = start_pair(config, env)
    admin = httpx.Client(base_url=gateways[0].base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"})
    try:
        yield BatchStack(gateways, upstream_pair, admin)
    finally:
        admin.close()
        for gateway in gateways:
            gateway.stop()


@pytest.fixture
def pair(batch_stack: BatchStack) -> BatchStack:
    batch_stack.reset()
    return batch_stack


@pytest.fixture(scope="module")
def redis_down_stack(
    tmp_path_factory: pytest.TempPathFactory,
    upstream_pair: dict[str, RunningUpstream],
    batch_stack: BatchStack,
) -> Iterator[BatchStack]:
    """Two more processes on the same database, with GATEWAY_REDIS_URL pointing at a closed port."""
    config = write_config(tmp_path_factory.mktemp("redis-down"), upstream_pair["east"], upstream_pair["west"])
    env = {
        "GATEWAY_DATABASE_URL": batch_stack.gateways[0].env["GATEWAY_DATABASE_URL"],
        "GATEWAY_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
    }
    gateways = start_pair(config, env)
    try:
        yield BatchStack(gateways, upstream_pair, batch_stack.admin)
    finally:
        for gateway in gateways:
            gateway.stop()
