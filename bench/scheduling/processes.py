"""The processes a scenario runs, each on a free port: the simulated vLLM (`gateway mock-upstream
--engine vllm`), the plain mock upstream, and gateway processes serving a generated catalog.

The gateways share the bench's own stores: the PostgreSQL database `gateway_bench_scheduling`
(recreated and migrated once per run) and Redis db 15 (flushed before each scenario, while no
gateway runs; nothing else uses it)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench import stack as bench_stack
from bench.procstat import tree
from bench.stack import REPO, free_port

DATABASE = "gateway_bench_scheduling"
DATABASE_URL = f"postgresql://postgres@127.0.0.1:5432/{DATABASE}"
REDIS_URL = "redis://127.0.0.1:6379/15"
ADMIN_KEY = "bench-scheduling-admin"
UPSTREAM_MODEL = "sim-vllm"
GATEWAY = (sys.executable, "-m", "gateway.cli")


def recreate_database() -> None:
    bench_stack.recreate_database(DATABASE)


def migrate(workdir: Path) -> None:
    """`gateway migrate` on the bench database (the catalog only has to parse)."""
    document = catalog([{"name": "in-process", "kind": "mock", "region": "local"}])
    env = gateway_env(write_catalog(workdir / "migrate.yaml", document), free_port())
    subprocess.run([*GATEWAY, "migrate"], env=env, cwd=REPO, check=True, stdout=subprocess.DEVNULL)  # noqa: S603


def flush_redis() -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.flushdb()
    finally:
        client.close()


def provider(name: str, base_urls: list[str], capacity: dict[str, Any] | None = None) -> dict[str, Any]:
    """One OpenAI-shaped provider of the catalog; `capacity` as SPEC section 8 writes it."""
    entry: dict[str, Any] = {
        "name": name,
        "kind": "openai",
        "region": "local",
        "api_key": "bench",
        "timeout_s": 300,
    }
    if len(base_urls) == 1:
        entry["base_url"] = base_urls[0]
    else:
        entry["base_urls"] = base_urls
    if capacity is not None:
        entry["capacity"] = capacity
    return entry


def catalog(providers: list[dict[str, Any]]) -> dict[str, Any]:
    """A catalog with one model per provider, named as the provider; no retries, so that every
    upstream failure is seen by the client."""
    price = {"input": 0.1, "output": 0.2}
    models = [
        {"name": p["name"], "deployments": [{"provider": p["name"], "model": UPSTREAM_MODEL, "price": price}]}
        for p in providers
    ]
    return {"providers": providers, "models": models, "retry": {"max_attempts": 1}}


def write_catalog(path: Path, document: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def gateway_env(config: Path, port: int) -> dict[str, str]:
    return os.environ | {
        "GATEWAY_CONFIG": str(config),
        "GATEWAY_DATABASE_URL": DATABASE_URL,
        "GATEWAY_REDIS_URL": REDIS_URL,
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
        "GATEWAY_PORT": str(port),
        "GATEWAY_WORKERS": "1",
        "GATEWAY_LOG_FORMAT": "json",
    }


@dataclass
class Process:
    """A command this bench started, with its output in a log file; stopped by its own pid."""

    name: str
    command: list[str]
    log: Path
    env: dict[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = None
    descendants: list[int] = field(default_factory=list)

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(  # noqa: S603
                self.command, env=self.env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT
            )

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crashed host would: no graceful stop, nothing handed back."""
        if self.alive():
            self.descendants = tree(self.pid)[1:]
            os.kill(self.pid, signal.SIGKILL)
            assert self.popen is not None
            self.popen.wait(10)

    def stop(self) -> None:
        if self.alive():
            self.descendants = tree(self.pid)[1:]
            assert self.popen is not None
            self.popen.terminate()
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        for pid in self.descendants:  # a child that outlived its parent (the metering writer)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        self.descendants = []


async def wait_until_answers(process: Process, url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=1.0) as client:
        while time.monotonic() < deadline:
            if not process.alive():
                raise RuntimeError(f"{process.name} exited; see {process.log}")
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(url)).status_code < 500:
                    return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{process.name} did not answer {url} within {timeout_s:.0f} s; see {process.log}")


def _flag(key: str, value: float | int) -> str:
    """The simulator's flag for one engine setting; a bool is a switch (`--x` or `--no-x`)."""
    name = key.replace("_", "-")
    if isinstance(value, bool):
        return f"--{name}" if value else f"--no-{name}"
    return f"--{name}={value}"


class Simulator:
    """The simulated vLLM: `engine` holds its flags (max_num_seqs=..., time_scale=...,
    share_prefix_blocks=False)."""

    def __init__(self, workdir: Path, engine: dict[str, float | int], replicas: int = 1) -> None:
        self.port = free_port()
        self.replicas = replicas
        self.engine = engine
        flags = [_flag(key, value) for key, value in engine.items()]
        command = [
            *GATEWAY,
            "mock-upstream",
            "--engine",
            "vllm",
            "--port",
            str(self.port),
            "--replicas",
            str(replicas),
            *flags,
        ]
        self.process = Process("simulator", command, workdir / f"simulator-{self.port}.log")
        self.http = httpx.AsyncClient(timeout=5.0)

    def root(self, replica: int = 0) -> str:
        return f"http://127.0.0.1:{self.port}/r{replica}"

    def base_url(self, replica: int = 0) -> str:
        return self.root(replica) + "/v1"

    @property
    def base_urls(self) -> list[str]:
        return [self.base_url(i) for i in range(self.replicas)]

    async def start(self) -> Simulator:
        self.process.start()
        await wait_until_answers(self.process, self.root() + "/_sim/stats")
        return self

    async def stats(self, replica: int = 0) -> dict[str, Any]:
        """`/_sim/stats`: the engine's ground truth since the last reset."""
        reply = await self.http.get(self.root(replica) + "/_sim/stats")
        reply.raise_for_status()
        stats: dict[str, Any] = reply.json()
        return stats

    async def all_stats(self) -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(self.stats(i) for i in range(self.replicas))))

    async def reset(self) -> None:
        for i in range(self.replicas):
            (await self.http.delete(self.root(i) + "/_sim/stats")).raise_for_status()

    async def metric(self, name: str, replica: int = 0) -> float:
        """One of the replica's Prometheus gauges or counters (vLLM's names), summed over its series."""
        reply = await self.http.get(self.root(replica) + "/metrics")
        reply.raise_for_status()
        total = 0.0
        for line in reply.text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                total += float(line.rsplit(" ", 1)[1])
        return total

    async def stop(self) -> None:
        await self.http.aclose()
        self.process.stop()


class PlainUpstream:
    """`gateway mock-upstream` as it answers by default: immediately, a fixed small reply."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        command = [*GATEWAY, "mock-upstream", "--port", str(self.port)]
        self.process = Process("mock upstream", command, workdir / f"mock-upstream-{self.port}.log")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> PlainUpstream:
        self.process.start()
        await wait_until_answers(self.process, f"http://127.0.0.1:{self.port}/v1/models")
        return self

    async def stop(self) -> None:
        self.process.stop()


class Gateway:
    """One `gateway serve` process (one worker) on the bench's stores, serving `document`."""

    def __init__(self, workdir: Path, name: str, document: dict[str, Any]) -> None:
        self.port = free_port()
        config = write_catalog(workdir / f"{name}.yaml", document)
        command = [*GATEWAY, "serve", "--no-migrate"]
        self.process = Process(name, command, workdir / f"{name}.log", gateway_env(config, self.port))
        self.admin = httpx.AsyncClient(
            base_url=self.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=10.0
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    async def start(self) -> Gateway:
        self.process.start()
        await wait_until_answers(self.process, self.base_url + "/healthz")
        return self

    async def team(self, name: str, weight: float | None = None) -> tuple[str, str]:
        """A new team (with its scheduling weight, if given) and a key of it: (team id, key). Its
        name gets a random suffix: team names are unique, and the database outlives a run."""
        body: dict[str, Any] = {"name": f"{name}-{secrets.token_hex(3)}"}
        if weight is not None:
            body["weight"] = weight
        team = await self.admin.post("/admin/teams", json=body)
        team.raise_for_status()
        team_id = str(team.json()["id"])
        key = await self.admin.post("/admin/keys", json={"team_id": team_id, "name": f"{name}-key"})
        key.raise_for_status()
        return team_id, str(key.json()["key"])

    async def set_weight(self, team_id: str, weight: float) -> None:
        reply = await self.admin.patch(f"/admin/teams/{team_id}", json={"weight": weight})
        reply.raise_for_status()

    def kill(self) -> None:
        self.process.kill()

    async def stop(self) -> None:
        await self.admin.aclose()
        self.process.stop()
