"""Fault-injection fixtures: a private PostgreSQL, Redis and mock upstream, and gateway processes.

The stores are started once per session on free ports (tests stop and restart them); every test
gets its own database and Redis db number, so what one scenario leaves behind cannot show up in
the next one's records.
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.faults.load import CHAT_BODY
from tests.faults.stores import PrivatePostgres, PrivateRedis
from tests.support.gateway import GatewayProcess, create_team
from tests.support.upstream import RunningUpstream, start_mock_upstream

ADMIN_KEY = "admin-faults-secret"
RECLAIM_IDLE_S = 2  # writers take over a dead writer's entries after this long
CONFIG = """
providers:
  - name: up-east
    kind: openai
    region: us-east
    base_url: {upstream}/v1
    api_key: upstream-secret
    timeout_s: 10
  - name: up-west
    kind: openai
    region: eu-west
    base_url: {upstream}/v1
    api_key: upstream-secret
    timeout_s: 10
models:
  - name: chat
    deployments:
      - provider: up-east
        model: upstream-chat
        price: {{input: 0.50, output: 1.50, cached_input: 0.25}}
      - provider: up-west
        model: upstream-chat
        price: {{input: 0.50, output: 1.50, cached_input: 0.25}}
retry:
  max_attempts: 2
  backoff_base_s: 0.05
  backoff_max_s: 0.1
circuit:
  failure_threshold: 1000
"""


@dataclass
class Stores:
    postgres: PrivatePostgres
    redis: PrivateRedis
    upstream: RunningUpstream
    databases: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    redis_dbs: Iterator[int] = field(default_factory=lambda: itertools.cycle(range(1, 16)))


@dataclass
class FaultStack:
    stores: Stores
    database_url: str
    redis_url: str | None
    gateways: list[GatewayProcess]

    @property
    def urls(self) -> list[str]:
        return [g.base_url for g in self.gateways]

    def admin(self) -> httpx.Client:
        headers = {"authorization": f"Bearer {ADMIN_KEY}"}
        return httpx.Client(base_url=self.gateways[0].base_url, headers=headers, timeout=10)

    def new_team(self, name: str) -> tuple[str, str]:
        """(team id, key secret) of a new team with one key."""
        with self.admin() as admin:
            team = create_team(admin, name)
        return team.id, team.key

    def warm(self, key: str) -> set[str]:
        """One request per gateway, so each has the key cached; returns their request ids."""
        ids = set()
        for url in self.urls:
            response = httpx.post(
                f"{url}/v1/chat/completions", json=CHAT_BODY, headers={"authorization": f"Bearer {key}"}
            )
            assert response.status_code == 200, response.text
            ids.add(response.headers["x-request-id"])
        return ids

    @staticmethod
    def consumer_of(gateway: GatewayProcess) -> str:
        """The metering stream consumer name of that gateway's writer: its writer process's, or with
        the in-process state its own (redis_buffer.process_consumer_name)."""
        assert gateway.process is not None
        writer = writer_pid(gateway.process.pid)
        return f"{socket.gethostname()}-{gateway.process.pid if writer is None else writer}"

    @staticmethod
    def kill(gateway: GatewayProcess, sig: signal.Signals, *, with_writer: bool = False) -> None:
        """Signal `gateway serve`; `with_writer` signals its writer process at the same moment (a
        machine or container going down takes both)."""
        assert gateway.process is not None
        writer = writer_pid(gateway.process.pid) if with_writer else None
        os.kill(gateway.process.pid, sig)
        if writer is not None:
            os.kill(writer, sig)


def writer_pid(serve_pid: int) -> int | None:
    """The `gateway metering-writer` child of a `gateway serve`, if it runs one."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        if parent == serve_pid and b"metering-writer" in command:
            return int(entry.name)
    return None


@pytest.fixture(scope="session")
def stores() -> Iterator[Stores]:
    postgres = PrivatePostgres().init()
    redis = PrivateRedis(appendonly=True).start()
    upstream = start_mock_upstream()
    try:
        yield Stores(postgres, redis, upstream)
    finally:
        upstream.stop()
        redis.destroy()
        postgres.destroy()


StackFactory = Callable[..., FaultStack]


@pytest.fixture
def fault_stack(stores: Stores, tmp_path: Path) -> Iterator[StackFactory]:
    """`fault_stack(gateways=2, with_redis=True)`: a fresh database and Redis db, running gateways."""
    started: list[GatewayProcess] = []

    def make(gateways: int = 2, with_redis: bool = True, upstream_url: str | None = None) -> FaultStack:
        """`upstream_url`: serve from that upstream instead of the session's mock upstream."""
        database_url = stores.postgres.create_database(f"faults_{os.getpid()}_{next(stores.databases)}")
        redis_url = None
        if with_redis:
            redis_url = stores.redis.url(next(stores.redis_dbs))
            _flush(redis_url)
        config = tmp_path / "gateway.yaml"
        config.write_text(CONFIG.format(upstream=upstream_url or stores.upstream.base_url))
        env = {
            "GATEWAY_DATABASE_URL": database_url,
            "GATEWAY_REDIS_URL": redis_url or "",
            "GATEWAY_ADMIN_KEY": ADMIN_KEY,
            "GATEWAY_KEY_CACHE_TTL_S": "2",
            "GATEWAY_METERING_RECLAIM_IDLE_S": str(RECLAIM_IDLE_S),
            "GATEWAY_LOG_FORMAT": "json",
        }
        processes = []
        for _ in range(gateways):  # one after the other: the first one migrates the database
            gateway = GatewayProcess(config, env)
            started.append(gateway)
            processes.append(gateway.start())
        stores.upstream.clear()
        return FaultStack(stores, database_url, redis_url, processes)

    yield make
    for gateway in started:
        gateway.stop()
    if not stores.postgres.running:  # a scenario that failed half-way leaves them as the next expects
        stores.postgres.start()
    if stores.redis.process is None:
        stores.redis.start()


def _flush(redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        client.flushdb()
    finally:
        client.close()
