"""The Batch API end-to-end stack: one simulated vLLM, `gateway serve` processes running jobs, and
the teams and keys they serve, made through the admin API.

The simulator runs at time scale 1, so a line's duration is set by its max_tokens (about ten
milliseconds a token). Each case has a provider (and a model of the same name) on a replica of its
own, so that one case's requests never show in another's `/_sim/stats`. The main process serves
every case but the takeover, which needs to be the only runner of its database: two processes of
its own (`Takeover`) share a second database, one after the other. No Redis: a job's claim, its
lines and their usage records all live in PostgreSQL.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
from openai.types import Batch

from tests.e2e.stacks.scheduling import Simulator, launch_simulator
from tests.support.gateway import GatewayProcess, Team, create_team, recreate_database

ADMIN_KEY = "admin-jobs-secret"
DATABASE = "gateway_test_e2e_jobs"
TAKEOVER_DATABASE = "gateway_test_e2e_jobs_takeover"
REPLICAS = {"quick": 0, "held": 1, "resumed": 2}  # provider (and model) -> simulator replica
MAIN_JOBS = {"poll_interval_s": 0.2, "concurrency": 4}  # the default lease, as in production
TAKEOVER_JOBS = {"lease_s": 2, "poll_interval_s": 0.2, "concurrency": 4}
POLL_S = 0.05
FINAL = ("completed", "failed", "cancelled", "expired")


def catalog(sim: Simulator, jobs: dict[str, float]) -> str:
    """Every case's provider and model, and how the process runs jobs."""
    providers = "".join(
        f"""
  - name: {name}
    kind: openai
    region: eu-west
    base_url: {sim.replica(replica)}/v1
    timeout_s: 60"""
        for name, replica in REPLICAS.items()
    )
    models = "".join(
        f"""
  - name: {name}
    deployments:
      - provider: {name}
        model: sim-vllm
        price: {{input: 0.10, output: 0.20}}"""
        for name in REPLICAS
    )
    settings = ", ".join(f"{name}: {value}" for name, value in jobs.items())
    # One attempt per line: the simulator then sees each line exactly as often as it was sent.
    return (
        f"providers:{providers}\nmodels:{models}\n"
        "retry:\n  max_attempts: 1\n"
        "circuit:\n  failure_threshold: 100000\n"
        f"jobs: {{{settings}}}\n"
    )


def gateway_env(database_url: str) -> dict[str, str]:
    return {
        "GATEWAY_DATABASE_URL": database_url,
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
        "GATEWAY_KEY_CACHE_TTL_S": "1",
    }


def chat_line(custom_id: str, model: str, system: str, text: str, max_tokens: int) -> dict[str, Any]:
    """One line of a batch input file: a chat completion behind a system prompt."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": text}]
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": model, "messages": messages, "max_tokens": max_tokens},
    }


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def file_lines(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    """The JSON lines of a file the gateway wrote; none for an absent file."""
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines()]


def wait_for_batch(
    client: openai.OpenAI, batch_id: str, statuses: tuple[str, ...], timeout_s: float
) -> Batch:
    """Poll the batch until its status is one of `statuses`; fail after `timeout_s` (generous)."""
    deadline = time.monotonic() + timeout_s
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in statuses:
            return batch
        if time.monotonic() > deadline:
            raise AssertionError(f"batch {batch_id} is {batch.status}, not {statuses}, after {timeout_s} s")
        time.sleep(POLL_S)


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(POLL_S)


def started_requests(sim: Simulator, provider: str) -> int:
    """Requests the provider's replica has taken since its last reset: finished, running or waiting
    (a simulator keeps generating for a client that left, so none of them is lost from the count)."""
    reply = httpx.get(sim.replica(REPLICAS[provider]) + "/_sim/stats", timeout=5).raise_for_status()
    stats = reply.json()
    return int(stats["requests_finished"] + stats["running"] + stats["waiting"])


def reset_replica(sim: Simulator, provider: str) -> None:
    httpx.delete(sim.replica(REPLICAS[provider]) + "/_sim/stats", timeout=5).raise_for_status()


def kill(gateway: GatewayProcess) -> None:
    """SIGKILL: the process renews no lease and gives nothing back."""
    assert gateway.process is not None
    gateway.process.send_signal(signal.SIGKILL)
    gateway.process.wait(timeout=10)


@dataclass
class Gateway:
    """A running `gateway serve` process and the admin API it answers."""

    process: GatewayProcess
    admin: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.admin = httpx.Client(
            base_url=self.process.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=10
        )

    def new_team(self, name: str) -> Team:
        """A team with a unique name (each case makes its own) and a key for it."""
        return create_team(self.admin, f"{name}-{uuid.uuid4().hex[:8]}")

    def client(self, key: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.process.base_url + "/v1", api_key=key, max_retries=0, timeout=30)

    def batch_usage(self, batch_id: str) -> list[dict[str, Any]]:
        """The admin usage report's rows for one batch id, grouped by batch."""
        reply = self.admin.get("/admin/usage", params={"group_by": "batch", "batch": batch_id})
        rows: list[dict[str, Any]] = reply.raise_for_status().json()["data"]
        return rows

    def batch_events(self, batch_id: str) -> list[dict[str, Any]]:
        """Every usage record of one batch id."""
        reply = self.admin.get("/admin/usage/events", params={"batch": batch_id, "limit": "1000"})
        events: list[dict[str, Any]] = reply.raise_for_status().json()["data"]
        return events

    def close(self) -> None:
        self.admin.close()
        self.process.stop()


@dataclass
class Takeover:
    """Processes that run jobs on a database of their own, started one at a time."""

    config: Path
    env: dict[str, str]
    started: list[Gateway] = field(default_factory=list)

    def start(self) -> Gateway:
        gateway = Gateway(GatewayProcess(self.config, self.env).start())
        self.started.append(gateway)
        return gateway

    def close(self) -> None:
        for gateway in self.started:
            gateway.close()


@dataclass
class JobsStack:
    sim: Simulator
    main: Gateway
    takeover: Takeover


@contextlib.contextmanager
def jobs_stack(workdir: Path) -> Iterator[JobsStack]:
    """Recreate both databases, start the simulator and the main process; stop everything after."""
    database_url = recreate_database(DATABASE)
    takeover_url = recreate_database(TAKEOVER_DATABASE)
    sim = launch_simulator(workdir / "sim.log", len(REPLICAS), time_scale=1.0)
    main: Gateway | None = None
    takeover: Takeover | None = None
    try:
        sim.wait_ready()
        main_config, takeover_config = workdir / "main.yaml", workdir / "takeover.yaml"
        main_config.write_text(catalog(sim, MAIN_JOBS))
        takeover_config.write_text(catalog(sim, TAKEOVER_JOBS))
        main = Gateway(GatewayProcess(main_config, gateway_env(database_url)).start())
        takeover = Takeover(takeover_config, gateway_env(takeover_url))
        yield JobsStack(sim, main, takeover)
    finally:
        if takeover is not None:
            takeover.close()
        if main is not None:
            main.close()
        sim.stop()
