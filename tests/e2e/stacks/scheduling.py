"""The scheduling end-to-end stack: simulated vLLM servers, three `gateway serve` processes, and the
teams and keys they serve, made through the admin API.

Two catalogs. The shared one (processes 0 and 1, permits shared through Redis with a one-second
lease) caps replicas for the cap, kill, priority, fairness and affinity cases, and reads the
simulator's own /metrics for back-pressure. The limits one (process 2) has a short interactive queue
timeout and room for one queued request. Every provider has replicas of its own, because a
simulator keeps generating for a client that left: what one case leaves running never shows in
another case's counts. Separate from tests/e2e/conftest.py: its own Redis db and PostgreSQL database
(tests/support/stores.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import redis

from tests.support.children import die_with_parent, stop
from tests.support.gateway import REPO, GatewayProcess, Team, create_team, free_port, recreate_database
from tests.support.stores import redis_url

ADMIN_KEY = "admin-scheduling-secret"
REDIS_URL = redis_url("e2e-scheduling")
DATABASE = "gateway_test_e2e_scheduling"
PERMIT_LEASE_S = 1.0
QUEUE_TIMEOUT_S = 0.2  # the limits catalog's interactive queue timeout
START_TIMEOUT_S = 15.0


@dataclass
class Simulator:
    """A `gateway mock-upstream --engine vllm` subprocess serving replicas under /r0 ... /r{n-1}."""

    port: int
    process: subprocess.Popen[bytes]

    def replica(self, index: int) -> str:
        """The replica's root: /metrics and /_sim/stats live under it, the API under its /v1."""
        return f"http://127.0.0.1:{self.port}/r{index}"

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the simulator exited with {self.process.returncode}")
            with contextlib.suppress(httpx.TransportError):
                httpx.get(self.replica(0) + "/_sim/stats", timeout=0.5).raise_for_status()
                return
            time.sleep(0.05)
        raise RuntimeError(f"the simulator did not answer on port {self.port}")

    async def stats(self, index: int) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=5) as http:
            reply = await http.get(self.replica(index) + "/_sim/stats")
        result: dict[str, Any] = reply.raise_for_status().json()
        return result

    async def reset(self, index: int) -> None:
        """Zero the replica's counters; its maxima restart from what runs and waits now."""
        async with httpx.AsyncClient(timeout=5) as http:
            (await http.delete(self.replica(index) + "/_sim/stats")).raise_for_status()

    def stop(self) -> None:
        stop(self.process)


def launch_simulator(
    log_path: Path, replicas: int, *, time_scale: float, max_num_seqs: int = 256
) -> Simulator:
    """Start a simulator logging to `log_path` (not yet answering: `wait_ready`). A KV cache far
    larger than the default lets long held requests run side by side without preemption."""
    port = free_port()
    command = [
        *(sys.executable, "-m", "mock_upstream", "--engine", "vllm", "--port", str(port)),
        *("--replicas", str(replicas), "--time-scale", str(time_scale)),
        *("--max-num-seqs", str(max_num_seqs), "--num-gpu-blocks", "16384"),
    ]
    with log_path.open("wb") as log:  # the child keeps its own descriptor
        process = subprocess.Popen(
            command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
        )
    return Simulator(port, process)


@dataclass
class Simulators:
    fast: Simulator  # time scale 0.2: the many-request cases
    steady: Simulator  # time scale 1: requests held open while something else is checked
    small: Simulator  # four running sequences at most: back-pressure

    def all(self) -> tuple[Simulator, ...]:
        return (self.fast, self.steady, self.small)


def _provider(name: str, base_urls: list[str], capacity: str) -> str:
    urls = ", ".join(f"{url}/v1" for url in base_urls)
    return f"""
  - name: {name}
    kind: openai
    region: eu-west
    base_urls: [{urls}]
    timeout_s: 120
    capacity: {capacity}"""


def _models(names: list[str]) -> str:
    return "".join(
        f"""
  - name: {name}
    deployments:
      - provider: {name}
        model: sim-vllm
        price: {{input: 0.10, output: 0.20}}"""
        for name in names
    )


_COMMON = """
retry:
  max_attempts: 1
circuit:
  failure_threshold: 100000
"""


def shared_catalog(sims: Simulators, closed_port: int) -> str:
    """The catalog of processes 0 and 1: one provider (and model of the same name) per case."""
    fast, steady, small = sims.fast, sims.steady, sims.small
    providers = {
        "capped": ([fast.replica(0)], "{max_concurrency: 4}"),
        "held": ([steady.replica(0)], "{max_concurrency: 4}"),
        "ordered": ([steady.replica(1)], "{max_concurrency: 1}"),
        "shown": ([steady.replica(4)], "{max_concurrency: 1}"),
        "fair": ([fast.replica(1)], "{max_concurrency: 1}"),
        "spread": ([fast.replica(i) for i in range(2, 6)], "{max_concurrency: 16}"),
        "pressured": ([small.replica(0)], "{load_metrics: true}"),
        "blind": (
            [small.replica(1)],
            f"{{load_metrics: true, metrics_url: 'http://127.0.0.1:{closed_port}/metrics'}}",
        ),
    }
    return (
        "providers:"
        + "".join(_provider(name, urls, capacity) for name, (urls, capacity) in providers.items())
        + "\nmodels:"
        + _models(list(providers))
        + _COMMON
        + f"scheduling:\n  permit_lease_s: {PERMIT_LEASE_S}\n"
    )


def limits_catalog(sims: Simulators) -> str:
    """The catalog of process 2: a short interactive queue timeout and one queued request at most."""
    providers = {
        "timed": ([sims.steady.replica(2)], "{max_concurrency: 1}"),
        "full": ([sims.steady.replica(3)], "{max_concurrency: 1}"),
    }
    return (
        "providers:"
        + "".join(_provider(name, urls, capacity) for name, (urls, capacity) in providers.items())
        + "\nmodels:"
        + _models(list(providers))
        + _COMMON
        + "scheduling:\n"
        + f"  queue_timeout_s: {{interactive: {QUEUE_TIMEOUT_S}, batch: 600}}\n"
        + "  max_queued: 1\n"
    )


def gateway_env(database_url: str) -> dict[str, str]:
    return {
        "GATEWAY_DATABASE_URL": database_url,
        "GATEWAY_REDIS_URL": REDIS_URL,
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
        "GATEWAY_KEY_CACHE_TTL_S": "1",
    }


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    """Poll `check` until it holds; fail naming `what` after `timeout_s` (a generous deadline)."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        await asyncio.sleep(0.02)


@dataclass
class SchedulingStack:
    sims: Simulators
    gateways: list[GatewayProcess]  # 0 and 1: the shared catalog; 2: the limits catalog
    shared_config: Path
    database_url: str
    admin: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.admin = httpx.Client(
            base_url=self.gateways[0].base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}
        )

    def new_team(self, name: str, **fields: object) -> Team:
        """A team with a unique name (each case makes its own) and a key for it."""
        return create_team(self.admin, f"{name}-{uuid.uuid4().hex[:8]}", **fields)

    def set_weight(self, team: Team, weight: float) -> None:
        reply = self.admin.patch(f"/admin/teams/{team.id}", json={"weight": weight})
        assert reply.status_code == 200, reply.text
        assert reply.json()["weight"] == weight

    def client(self, key: str, gateway: int | GatewayProcess = 0, **kwargs: Any) -> openai.AsyncOpenAI:
        process = self.gateways[gateway] if isinstance(gateway, int) else gateway
        base_url = process.base_url + "/v1"
        return openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=60, **kwargs)

    def spare_gateway(self) -> GatewayProcess:
        """One more process on the shared catalog (for a case that kills it)."""
        return GatewayProcess(self.shared_config, gateway_env(self.database_url)).start()

    async def admin_get(self, path: str, gateway: int = 0, **params: str) -> httpx.Response:
        headers = {"authorization": f"Bearer {ADMIN_KEY}"}
        async with httpx.AsyncClient(base_url=self.gateways[gateway].base_url, timeout=10) as http:
            return await http.get(path, headers=headers, params=params)

    async def replicas(self, provider: str, gateway: int = 0) -> list[dict[str, Any]]:
        """The provider's replicas as `/admin/providers` of `gateway` shows them."""
        reply = (await self.admin_get("/admin/providers", gateway)).raise_for_status()
        for row in reply.json()["data"]:
            if row["provider"] == provider:
                replicas: list[dict[str, Any]] = row["replicas"]
                return replicas
        raise AssertionError(f"no provider {provider} in /admin/providers")

    async def metrics(self, gateway: int = 0) -> str:
        async with httpx.AsyncClient(timeout=10) as http:
            reply = await http.get(self.gateways[gateway].base_url + "/metrics")
        return reply.raise_for_status().text

    async def usage_events(self, team: Team, gateway: int = 0) -> list[dict[str, Any]]:
        reply = await self.admin_get("/admin/usage/events", gateway, team_id=team.id, limit="100")
        events: list[dict[str, Any]] = reply.raise_for_status().json()["data"]
        return events

    def close(self) -> None:
        self.admin.close()


def _start_simulators(workdir: Path) -> Simulators:
    sims = Simulators(
        fast=launch_simulator(workdir / "fast.log", 6, time_scale=0.2),
        steady=launch_simulator(workdir / "steady.log", 5, time_scale=1.0),
        small=launch_simulator(workdir / "small.log", 2, time_scale=0.5, max_num_seqs=4),
    )
    try:
        for sim in sims.all():
            sim.wait_ready()
    except BaseException:
        for sim in sims.all():
            sim.stop()
        raise
    return sims


@contextlib.contextmanager
def scheduling_stack(workdir: Path) -> Iterator[SchedulingStack]:
    """Flush this suite's Redis db, recreate its database, start everything; stop it all after."""
    redis.Redis.from_url(REDIS_URL).flushdb()
    database_url = recreate_database(DATABASE)
    sims = _start_simulators(workdir)
    shared, limits = workdir / "shared.yaml", workdir / "limits.yaml"
    shared.write_text(shared_catalog(sims, closed_port=free_port()))
    limits.write_text(limits_catalog(sims))
    gateways: list[GatewayProcess] = []
    try:
        for config in (shared, shared, limits):
            gateways.append(GatewayProcess(config, gateway_env(database_url)).start())
        stack = SchedulingStack(sims, gateways, shared, database_url)
        try:
            yield stack
        finally:
            stack.close()
    finally:
        for gateway in gateways:
            gateway.stop()
        for sim in sims.all():
            sim.stop()
        redis.Redis.from_url(REDIS_URL).flushdb()
