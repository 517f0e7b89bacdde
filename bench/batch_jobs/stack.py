"""What the batch jobs scenarios run on: the PostgreSQL database `gateway_bench_jobs` (recreated and
migrated once per run), gateway processes that run jobs on it with no Redis (the job's lease is in
PostgreSQL; nothing else they share matters here), the Batch API as a client sees it, and the
ledger as PostgreSQL holds it (who holds a job, what was stored, what was metered).

The processes come from bench/scheduling (`Gateway`, `Simulator`, `Run`), pointed at this database."""

from __future__ import annotations

import asyncio
import io
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import openai
from openai.types import Batch

from bench import stack as bench_stack
from bench.scheduling.processes import (
    GATEWAY,
    Gateway,
    Simulator,
    catalog,
    gateway_env,
    provider,
    write_catalog,
)
from bench.scheduling.scenario import Run
from bench.stack import REPO, free_port

DATABASE = "gateway_bench_jobs"
DATABASE_URL = f"postgresql://postgres@127.0.0.1:5432/{DATABASE}"
PROVIDER = "sim"  # the provider and the model of the catalogs
FINAL = frozenset({"completed", "failed", "expired", "cancelled"})


def jobs_env(env: dict[str, str]) -> dict[str, str]:
    """A gateway's environment on the jobs database, without Redis (an empty URL: the embedded
    default), so that a SIGKILLed process leaves no writer process of its own behind."""
    return env | {"GATEWAY_DATABASE_URL": DATABASE_URL, "GATEWAY_REDIS_URL": ""}


def recreate_database() -> None:
    bench_stack.recreate_database(DATABASE)


def migrate(workdir: Path) -> None:
    """`gateway migrate` on the jobs database (the catalog only has to parse)."""
    document = catalog([{"name": "in-process", "kind": "mock", "region": "local"}])
    env = jobs_env(gateway_env(write_catalog(workdir / "migrate.yaml", document), free_port()))
    subprocess.run([*GATEWAY, "migrate"], env=env, cwd=REPO, check=True, stdout=subprocess.DEVNULL)  # noqa: S603


def jobs_catalog(simulator: Simulator, **jobs: float) -> dict[str, Any]:
    """One provider (and model) on the simulator's first replica, with these `jobs` settings."""
    return catalog([provider(PROVIDER, [simulator.base_url()])]) | {"jobs": jobs}


class JobGateway(Gateway):
    """A `gateway serve` process on the jobs database, running jobs; `start` again after a kill
    restarts it on the same port."""

    def __init__(self, workdir: Path, name: str, document: dict[str, Any]) -> None:
        super().__init__(workdir, name, document)
        assert self.process.env is not None
        self.process.env = jobs_env(self.process.env)


class JobsRun(Run):
    """A scenario's run, with gateways on the jobs database."""

    async def __aenter__(self) -> JobsRun:
        return self

    async def job_gateway(self, name: str, document: dict[str, Any]) -> JobGateway:
        gateway = JobGateway(self.workdir, name, document)
        self._stops.append(gateway.stop)
        await gateway.start()
        return gateway


class BatchClient:
    """The Batch API through the official SDK, as one team's key sees it on one gateway."""

    def __init__(self, bench: Run, gateway: Gateway, api_key: str) -> None:
        self.sdk = openai.AsyncOpenAI(
            base_url=gateway.base_url + "/v1", api_key=api_key, max_retries=0, http_client=bench.http
        )

    async def submit(self, data: bytes, headers: dict[str, str] | None = None) -> Batch:
        """Upload `data` and create a batch of it."""
        uploaded = await self.sdk.files.create(file=("lines.jsonl", io.BytesIO(data)), purpose="batch")
        return await self.sdk.batches.create(
            input_file_id=uploaded.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            extra_headers=headers or {},
        )

    async def retrieve(self, batch_id: str) -> Batch:
        return await self.sdk.batches.retrieve(batch_id)

    async def finished(self, batch_id: str, timeout_s: float, interval_s: float = 0.2) -> Batch:
        """The batch once it has a final status; TimeoutError if it has none within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            batch = await self.retrieve(batch_id)
            if batch.status in FINAL:
                return batch
            if time.monotonic() > deadline:
                raise TimeoutError(f"{batch_id} is still {batch.status} after {timeout_s:.0f} s")
            await asyncio.sleep(interval_s)

    async def content(self, file_id: str | None) -> bytes:
        if file_id is None:
            return b""
        return (await self.sdk.files.content(file_id)).read()


def owner_pid(owner: str) -> int:
    """The pid in a lease owner as gateway.jobs.runner.process_owner writes it: host:pid:random."""
    return int(owner.rsplit(":", 2)[1])


@dataclass(frozen=True, slots=True)
class Metered:
    """The usage records of one batch id: those of answered runs, and apart those of runs lost with
    a killed process (`attempt_lost`, estimated prompt only; docs/batch-jobs.md, "A crash")."""

    records: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    lost_runs: int = 0
    lost_prompt_tokens: int = 0


class Ledger:
    """Reads the jobs database directly: what no API shows (the lease holder), and the records."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn

    @classmethod
    async def connect(cls) -> Ledger:
        return cls(await asyncpg.connect(DATABASE_URL))

    async def close(self) -> None:
        await self.conn.close()

    async def holder_pid(self, job_id: str) -> int | None:
        """The pid of the process whose lease the job carries."""
        owner = await self.conn.fetchval("SELECT lease_owner FROM batch_jobs WHERE id = $1", job_id)
        return None if owner is None else owner_pid(str(owner))

    async def stored_lines(self, job_id: str) -> int:
        """The lines whose outcome is stored."""
        count = await self.conn.fetchval(
            "SELECT count(*) FROM batch_lines WHERE job_id = $1 AND state <> 'pending'", job_id
        )
        return int(count)

    async def metered(self, batch_id: str) -> Metered:
        row = await self.conn.fetchrow(
            "SELECT count(*) FILTER (WHERE error_code IS DISTINCT FROM 'attempt_lost') AS records,"
            " coalesce(sum(prompt_tokens) FILTER (WHERE error_code IS DISTINCT FROM 'attempt_lost'), 0)"
            " AS prompt, coalesce(sum(completion_tokens), 0) AS completion,"
            " coalesce(sum(cached_tokens), 0) AS cached,"
            " count(*) FILTER (WHERE error_code = 'attempt_lost') AS lost,"
            " coalesce(sum(prompt_tokens) FILTER (WHERE error_code = 'attempt_lost'), 0) AS lost_prompt"
            " FROM usage_records WHERE batch_id = $1",
            batch_id,
        )
        assert row is not None
        return Metered(
            int(row["records"]),
            int(row["prompt"]),
            int(row["completion"]),
            int(row["cached"]),
            int(row["lost"]),
            int(row["lost_prompt"]),
        )
