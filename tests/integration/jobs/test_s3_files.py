"""Files in an S3-compatible object store (`files.store: s3`): moto's S3 server as a process,
`gateway serve` on PostgreSQL (gateway_test_jobs_s3) with its runner off, and a job runner in this
process writing the output files. Uploads, downloads, a job's output and deletes go through the
official SDK; the bucket and the database are then read directly: the bytes are objects, never rows
of file_contents. A store that fails is a 503 naming nothing of it, and a finish it refuses waits."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import msgspec
import openai
import pytest
from aiobotocore.session import get_session
from botocore.exceptions import ClientError

from gateway.jobs.runner import JobRunner
from gateway.services import Services, open_services
from gateway.settings import JobSettings, S3Settings, load_settings
from tests.support.children import die_with_parent, stop
from tests.support.gateway import GatewayProcess, Team, create_team, free_port, recreate_database
from tests.support.stores import postgres_url

pytestmark = pytest.mark.integration

DATABASE = "gateway_test_jobs_s3"
ADMIN_KEY = "admin-jobs-s3-secret"
KEY_ID, SECRET = "s3-test-key-id", "s3-test-secret-never-shown"
BUCKET, LATE_BUCKET, PREFIX = "gateway-files", "gateway-late", "gateway-files/"
MOTO_SERVER = Path(sys.executable).parent / "moto_server"
CONFIG = """
providers:
  - {name: mock, kind: mock, region: eu}
models:
  - {name: chat, deployments: [{provider: mock, model: m}]}
jobs:
  runner: false
files:
  store: s3
  s3:
    endpoint_url: ${S3_ENDPOINT}
    bucket: gateway-files
    access_key_id: ${S3_KEY_ID}
    secret_access_key: ${S3_SECRET}
"""
# Short leases, so that a job whose finish failed is claimed again within a test.
JOBS = JobSettings(runner=False, lease_s=1.0, poll_interval_s=0.05, concurrency=8, pause_s=0.3)


def jsonl(count: int) -> bytes:
    lines = (
        {
            "custom_id": f"req-{n}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "chat", "messages": [{"role": "user", "content": f"question {n}"}]},
        }
        for n in range(count)
    )
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def wait_for_s3(endpoint: str, process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("moto_server exited early")
        try:
            httpx.get(endpoint, timeout=0.5)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError("moto_server did not start")


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=die_with_parent,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_for_s3(endpoint, process)
        yield endpoint
    finally:
        stop(process)


@contextlib.asynccontextmanager
async def s3_client(endpoint: str) -> AsyncIterator[Any]:
    creating = get_session().create_client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
    )
    async with creating as client:
        yield client


async def object_bytes(endpoint: str, bucket: str, key: str) -> bytes:
    async with s3_client(endpoint) as client:
        reply = await client.get_object(Bucket=bucket, Key=key)
        async with reply["Body"] as body:
            data: bytes = await body.read()
            return data


@pytest.fixture(scope="module")
async def bucket(s3_endpoint: str) -> str:
    async with s3_client(s3_endpoint) as client:
        await client.create_bucket(Bucket=BUCKET)
    return BUCKET


@dataclass
class S3Gateway:
    process: GatewayProcess
    team: Team
    endpoint: str

    def client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=self.process.base_url + "/v1", api_key=self.team.key, max_retries=0
        )


def gateway_env(database_url: str, endpoint: str) -> dict[str, str]:
    return {
        "GATEWAY_DATABASE_URL": database_url,
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
        "GATEWAY_REDIS_URL": "",
        "S3_ENDPOINT": endpoint,
        "S3_KEY_ID": KEY_ID,
        "S3_SECRET": SECRET,
    }


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path: Path = tmp_path_factory.mktemp("jobs-s3") / "gateway.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture(scope="module")
def gateway(config_path: Path, s3_endpoint: str, bucket: str) -> Iterator[S3Gateway]:
    database_url = recreate_database(DATABASE)
    process = GatewayProcess(config_path, gateway_env(database_url, s3_endpoint)).start()
    try:
        with httpx.Client(
            base_url=process.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}
        ) as admin:
            team = create_team(admin, "s3-team")
        yield S3Gateway(process, team, s3_endpoint)
    finally:
        process.stop()


@pytest.fixture(scope="module")
def gateway_without_store(gateway: S3Gateway, config_path: Path) -> Iterator[S3Gateway]:
    """The same database and team, the store's address a port nothing listens on."""
    away = f"http://127.0.0.1:{free_port()}"
    process = GatewayProcess(config_path, gateway_env(postgres_url(DATABASE), away)).start()
    try:
        yield S3Gateway(process, gateway.team, away)
    finally:
        process.stop()


async def database_rows(query: str, *args: object) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(postgres_url(DATABASE))
    try:
        return list(await conn.fetch(query, *args))
    finally:
        await conn.close()


async def contents_of(*file_ids: str) -> int:
    rows = await database_rows(
        "SELECT count(*) AS n FROM file_contents WHERE file_id = ANY($1)", list(file_ids)
    )
    return int(rows[0]["n"])


@contextlib.asynccontextmanager
async def runner_writing_to(config_path: Path, endpoint: str, bucket_name: str) -> AsyncIterator[Services]:
    """A job runner in this process, its output files going to `bucket_name`."""
    env = gateway_env(postgres_url(DATABASE), endpoint) | {"GATEWAY_CONFIG": str(config_path)}
    settings = load_settings(env)
    s3 = settings.catalog.files.s3
    assert isinstance(s3, S3Settings)
    files = msgspec.structs.replace(
        settings.catalog.files, s3=msgspec.structs.replace(s3, bucket=bucket_name)
    )
    catalog = msgspec.structs.replace(settings.catalog, files=files, jobs=JOBS)
    services = open_services(msgspec.structs.replace(settings, catalog=catalog))
    runner = JobRunner(services)
    task = asyncio.create_task(runner.run())
    try:
        yield services
    finally:
        await runner.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await services.aclose()


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 60.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not await check():
            await asyncio.sleep(0.05)


async def job_state(job_id: str) -> tuple[str, int]:
    rows = await database_rows("SELECT status, fencing_token FROM batch_jobs WHERE id = $1", job_id)
    return str(rows[0]["status"]), int(rows[0]["fencing_token"])


async def create_batch(client: openai.AsyncOpenAI, lines: int) -> str:
    uploaded = await client.files.create(file=("requests.jsonl", jsonl(lines)), purpose="batch")
    batch = await client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert batch.status == "validating", batch
    return batch.id


async def test_an_upload_is_an_object_of_the_bucket_and_no_row_of_file_contents(gateway: S3Gateway) -> None:
    data = jsonl(3)
    client = gateway.client()
    uploaded = await client.files.create(file=("requests.jsonl", data), purpose="batch")

    assert uploaded.bytes == len(data)
    assert await object_bytes(gateway.endpoint, BUCKET, PREFIX + uploaded.id) == data
    assert (await client.files.content(uploaded.id)).content == data
    assert (await client.files.retrieve(uploaded.id)).filename == "requests.jsonl"
    assert await contents_of(uploaded.id) == 0


async def test_a_jobs_output_file_is_written_to_the_bucket_and_read_through_the_app(
    gateway: S3Gateway, config_path: Path
) -> None:
    client = gateway.client()
    batch_id = await create_batch(client, 4)

    async with runner_writing_to(config_path, gateway.endpoint, BUCKET):

        async def completed() -> bool:
            return (await client.batches.retrieve(batch_id)).status == "completed"

        await eventually(completed)

    batch = await client.batches.retrieve(batch_id)
    assert batch.output_file_id is not None
    assert batch.error_file_id is None
    output = (await client.files.content(batch.output_file_id)).content
    lines = [json.loads(line) for line in output.splitlines()]
    assert [line["custom_id"] for line in lines] == [f"req-{n}" for n in range(4)]
    assert all(line["response"]["status_code"] == 200 for line in lines)
    assert await object_bytes(gateway.endpoint, BUCKET, PREFIX + batch.output_file_id) == output
    assert await contents_of(batch.output_file_id, batch.input_file_id) == 0


async def test_a_finish_the_store_refuses_is_claimed_again_until_the_store_takes_it(
    gateway: S3Gateway, config_path: Path
) -> None:
    client = gateway.client()
    batch_id = await create_batch(client, 2)

    async with runner_writing_to(config_path, gateway.endpoint, LATE_BUCKET):
        await eventually(lambda: _status_is(batch_id, "finalizing"))
        _, first_token = await job_state(batch_id)

        async def claimed_again() -> bool:
            return (await job_state(batch_id))[1] > first_token

        await eventually(claimed_again)
        status, _ = await job_state(batch_id)
        assert status == "finalizing"  # the refused finish stored nothing and kept the status
        outputs = await database_rows("SELECT id FROM files WHERE filename = $1", f"{batch_id}_output.jsonl")
        assert outputs == []

        async with s3_client(gateway.endpoint) as s3:
            await s3.create_bucket(Bucket=LATE_BUCKET)
        await eventually(lambda: _status_is(batch_id, "completed"))

    batch = await client.batches.retrieve(batch_id)
    assert batch.output_file_id is not None
    output = await object_bytes(gateway.endpoint, LATE_BUCKET, PREFIX + batch.output_file_id)
    assert [json.loads(line)["custom_id"] for line in output.splitlines()] == ["req-0", "req-1"]


async def _status_is(batch_id: str, status: str) -> bool:
    return (await job_state(batch_id))[0] == status


async def test_deleting_a_file_removes_its_object(gateway: S3Gateway) -> None:
    client = gateway.client()
    uploaded = await client.files.create(file=("gone.jsonl", jsonl(1)), purpose="batch")

    assert (await client.files.delete(uploaded.id)).deleted

    with pytest.raises(ClientError) as missing:
        await object_bytes(gateway.endpoint, BUCKET, PREFIX + uploaded.id)
    assert missing.value.response["Error"]["Code"] == "NoSuchKey"
    with pytest.raises(openai.NotFoundError):
        await client.files.content(uploaded.id)


async def test_a_store_that_is_away_is_a_503_naming_neither_its_address_nor_its_secret(
    gateway_without_store: S3Gateway,
) -> None:
    client = gateway_without_store.client()

    with pytest.raises(openai.APIStatusError) as refused:
        await client.files.create(file=("away.jsonl", jsonl(1)), purpose="batch")

    reply = refused.value.response
    assert reply.status_code == 503
    assert reply.json()["error"]["code"] == "service_unavailable"
    port = gateway_without_store.endpoint.rsplit(":", 1)[1]
    assert port not in reply.text
    assert SECRET not in reply.text
    assert SECRET not in gateway_without_store.process.logs()
    assert "Traceback" not in gateway_without_store.process.logs()
    # the upload's metadata row went with the failed store: no file without its bytes
    assert await database_rows("SELECT id FROM files WHERE filename = 'away.jsonl'") == []
