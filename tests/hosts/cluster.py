"""Three gateway hosts in network namespaces behind nginx, sharing one Redis and one PostgreSQL.

    root namespace                            one namespace per host: gw1, gw2, gw3
      nginx on 127.0.0.1:<free port>            `gateway serve` on 10.231.x.1N:8080, with
      on the bridge address 10.231.x.1:         its metering-writer process and its job
        redis-server, PostgreSQL and      <-- runner; one veth each into the bridge
        the simulated vLLM

The catalog: model `chat` served by two deployments (providers `east` and `west`, one simulator
replica each), so that a batch pinned to one shows nothing at the other; model `capped` on a
replica whose cap of CAP requests in flight holds across the three hosts (permits in Redis). Leases
are short (a job's, a permit's), so that a host cut off mid-job gives its work up within seconds.
Migrations run once, from the root namespace, before any host starts, as a migration job does.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import openai

from tests.e2e.stacks.scheduling import Simulator
from tests.hosts.balancer import Balancer
from tests.hosts.stores import BridgedPostgres, BridgedRedis
from tests.hosts.topology import Host, Topology
from tests.support.children import die_with_parent, stop
from tests.support.gateway import REPO, Team, create_team, free_port

ADMIN_KEY = "admin-hosts-secret"
DATABASE = "gateway_test_hosts"
HOST_PORT = 8080  # every host has its own address, so each may use the same port
CAP = 4  # requests in flight at the `capped` replica, summed over every host
JOB_LEASE_S = 2.0
PERMIT_LEASE_S = 1.0
RECLAIM_IDLE_S = 3  # a cut-off writer's unacknowledged usage entries go to another after this
REPLICAS = {"east": 0, "west": 1, "capped": 2}  # provider -> simulator replica
START_TIMEOUT_S = 30.0


@dataclass
class BridgedSimulator(Simulator):
    """The simulated vLLM, listening on the bridge address instead of loopback."""

    address: str = ""

    def replica(self, index: int) -> str:
        return f"http://{self.address}:{self.port}/r{index}"


def launch_simulator(address: str, log_path: Path) -> BridgedSimulator:
    """Time scale 1: a generated token takes about ten milliseconds, so max_tokens sets how long a
    request holds its replica. The KV cache is large enough that nothing is preempted."""
    port = free_port()
    command = [
        *(sys.executable, "-m", "mock_upstream", "--engine", "vllm"),
        *("--host", address, "--port", str(port), "--replicas", str(len(REPLICAS))),
        *("--time-scale", "1", "--num-gpu-blocks", "16384"),
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
        )
    sim = BridgedSimulator(port, process, address)
    sim.wait_ready()
    return sim


def catalog(sim: BridgedSimulator) -> str:
    def provider(name: str, region: str, capacity: int) -> str:
        return f"""
  - name: {name}
    kind: openai
    region: {region}
    base_url: {sim.replica(REPLICAS[name])}/v1
    timeout_s: 30
    capacity: {{max_concurrency: {capacity}}}"""

    providers = (
        provider("east", "us-east", 16) + provider("west", "eu-west", 16) + provider("capped", "eu-west", CAP)
    )
    price = "price: {input: 0.10, output: 0.20}"
    return f"""providers:{providers}
models:
  - name: chat
    deployments:
      - {{provider: east, model: sim-vllm, {price}}}
      - {{provider: west, model: sim-vllm, {price}}}
  - name: capped
    deployments:
      - {{provider: capped, model: sim-vllm, {price}}}
retry:
  max_attempts: 1
circuit:
  failure_threshold: 100000
scheduling:
  permit_lease_s: {PERMIT_LEASE_S}
jobs: {{lease_s: {JOB_LEASE_S}, poll_interval_s: 0.2, concurrency: 4}}
"""


@dataclass
class GatewayHost:
    """`gateway serve` running inside one host's namespace."""

    host: Host
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        """The host's address on the bridge: what nginx, and the test, reach it at."""
        return f"http://{self.host.address}:{HOST_PORT}"

    def start(self) -> GatewayHost:
        env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(Path.home())} | self.env
        command = self.host.command(sys.executable, "-m", "gateway.cli", "serve", "--no-migrate")
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
            )
        return self

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.host.name} exited early:\n{self.logs()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.base_url + "/readyz", timeout=1).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"{self.host.name} was not ready within {START_TIMEOUT_S} s:\n{self.logs()}")

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process is not None:
            stop(self.process, timeout_s=15)
            self.process = None


@dataclass
class Cluster:
    topology: Topology
    postgres: BridgedPostgres
    redis: BridgedRedis
    sim: BridgedSimulator
    gateways: list[GatewayHost]
    balancer: Balancer
    admin: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.admin = httpx.Client(
            base_url=self.balancer.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=10
        )

    @property
    def base_url(self) -> str:
        return self.balancer.base_url + "/v1"

    def new_team(self, name: str) -> Team:
        return create_team(self.admin, f"{name}-{uuid.uuid4().hex[:8]}")

    def client(self, key: str, **kwargs: Any) -> openai.AsyncOpenAI:
        """The SDK against the load balancer, without retries of its own unless asked."""
        options: dict[str, Any] = {"max_retries": 0, "timeout": 60} | kwargs
        return openai.AsyncOpenAI(base_url=self.base_url, api_key=key, **options)

    def gateway_on(self, host: Host) -> GatewayHost:
        return next(gateway for gateway in self.gateways if gateway.host == host)

    async def query(self, sql: str, *args: object) -> list[asyncpg.Record]:
        """Read the shared database directly (from the root namespace, over loopback)."""
        conn = await asyncpg.connect(self.postgres.url(DATABASE))
        try:
            rows: list[asyncpg.Record] = await conn.fetch(sql, *args)
            return rows
        finally:
            await conn.close()

    async def replica_stats(self, provider: str) -> dict[str, Any]:
        return await self.sim.stats(REPLICAS[provider])

    async def reset_replicas(self) -> None:
        await asyncio.gather(*(self.sim.reset(index) for index in REPLICAS.values()))

    def close(self) -> None:
        self.admin.close()


def stop_all(gateways: list[GatewayHost]) -> None:
    """SIGTERM every host at once, then wait for each (a graceful stop drains its requests)."""
    for gateway in gateways:
        if gateway.process is not None and gateway.process.poll() is None:
            gateway.process.terminate()
    for gateway in gateways:
        gateway.stop()


def _migrate(database_url: str, config: Path) -> None:
    env = {"GATEWAY_DATABASE_URL": database_url, "GATEWAY_CONFIG": str(config), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "migrate"], cwd=REPO, env=env, capture_output=True, timeout=120
    )
    if done.returncode != 0:
        raise RuntimeError(f"gateway migrate failed: {done.stderr.decode(errors='replace')}")


def host_env(postgres: BridgedPostgres, redis: BridgedRedis, config: Path, address: str) -> dict[str, str]:
    return {
        "GATEWAY_CONFIG": str(config),
        "GATEWAY_DATABASE_URL": postgres.host_url(DATABASE),
        "GATEWAY_REDIS_URL": redis.host_url(0),
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
        "GATEWAY_HOST": address,
        "GATEWAY_PORT": str(HOST_PORT),
        "GATEWAY_LOG_FORMAT": "json",
        "GATEWAY_RUN_JOBS": "true",
        "GATEWAY_KEY_CACHE_TTL_S": "1",
        "GATEWAY_KEEP_ALIVE_TIMEOUT_S": "75",  # above nginx's idle timeout for kept-alive connections
        "GATEWAY_METERING_RECLAIM_IDLE_S": str(RECLAIM_IDLE_S),
    }


@contextlib.contextmanager
def cluster(workdir: Path, nginx: str, hosts: int = 3) -> Iterator[Cluster]:
    """Build the network, start the stores, the simulator, the hosts and nginx; tear all down after,
    whatever failed on the way."""
    with contextlib.ExitStack() as cleanup:
        topology = Topology(hosts)
        cleanup.callback(topology.destroy)
        topology.build()
        address = topology.bridge_address
        postgres = BridgedPostgres(bridge_address=address)
        cleanup.callback(postgres.destroy)
        postgres.init()
        postgres.create_database(DATABASE)
        redis = BridgedRedis(appendonly=False, bridge_address=address)
        cleanup.callback(redis.destroy)
        redis.start()
        sim = launch_simulator(address, workdir / "sim.log")
        cleanup.callback(sim.stop)
        config = workdir / "gateway.yaml"
        config.write_text(catalog(sim))
        _migrate(postgres.url(DATABASE), config)
        gateways = [
            GatewayHost(host, host_env(postgres, redis, config, host.address), workdir / f"{host.name}.log")
            for host in topology.hosts
        ]
        cleanup.callback(stop_all, gateways)
        for gateway in gateways:
            gateway.start()
        for gateway in gateways:
            gateway.wait_ready()
        balancer = Balancer(workdir / "nginx", [f"{g.host.address}:{HOST_PORT}" for g in gateways])
        cleanup.callback(balancer.stop)
        balancer.start(nginx)
        running = Cluster(topology, postgres, redis, sim, gateways, balancer)
        cleanup.callback(running.close)
        yield running
