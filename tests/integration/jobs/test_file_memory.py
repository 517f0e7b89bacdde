"""What uploads and batch creates cost a real `gateway serve` in memory, on each file store: its
peak resident set (VmHWM, reset before each round) during 4 concurrent ~100 MB uploads and during
3 concurrent batch creates on one ~20 MB file, through the official `openai` SDK. The figures are
printed (`-s`); what is asserted is only that every upload and create did what it should: the
bytes stored exactly, every line of every batch in the ledger.

`files.max_concurrent: 2` holds the work two at a time; `busy_wait_s` is long enough here that the
others wait for a slot rather than being refused."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import openai
import pytest

from tests.integration.jobs.test_s3_files import (
    BUCKET,
    PREFIX,
    bucket,  # noqa: F401 (a fixture)
    gateway_env,
    object_bytes,
    s3_endpoint,  # noqa: F401 (a fixture)
)
from tests.support.gateway import GatewayProcess, create_team, recreate_database
from tests.support.stores import postgres_url

pytestmark = pytest.mark.integration

ADMIN_KEY = "admin-jobs-s3-secret"  # gateway_env's
DATABASE = "gateway_test_jobs_memory"
MB = 1024 * 1024
UPLOADS, UPLOAD_BYTES = 4, 100 * MB
CREATES, BATCH_LINES = 3, 45_000  # ~20 MB of lines
CONFIG = """
providers:
  - {{name: mock, kind: mock, region: eu}}
models:
  - {{name: chat, deployments: [{{provider: mock, model: m}}]}}
jobs:
  runner: false
files:
  max_concurrent: 2
  busy_wait_s: 600
{store}"""
S3_STORE = """  store: s3
  s3:
    endpoint_url: ${S3_ENDPOINT}
    bucket: gateway-files
    access_key_id: ${S3_KEY_ID}
    secret_access_key: ${S3_SECRET}
"""


def lines_of(count: int, width: int) -> bytes:
    """`count` good batch lines of about `width` bytes each, one long message."""
    pad = "x" * max(0, width - 160)
    return b"".join(_line(n, [{"role": "user", "content": f"{n} {pad}"}]) for n in range(count))


def conversations_of(count: int) -> bytes:
    """`count` good batch lines of ~450 bytes, each a conversation of seven short messages: many
    small JSON objects, as chat batches mostly are."""
    turns = [{"role": ("user", "assistant")[i % 2], "content": f"turn {i} of it"} for i in range(5)]
    return b"".join(
        _line(n, [{"role": "system", "content": "Be brief."}, *turns, {"role": "user", "content": str(n)}])
        for n in range(count)
    )


def _line(n: int, messages: list[dict[str, str]]) -> bytes:
    request = {"model": "chat", "messages": messages, "max_tokens": 16}
    entry = {"custom_id": f"req-{n}", "method": "POST", "url": "/v1/chat/completions", "body": request}
    return json.dumps(entry).encode() + b"\n"


def process_tree(pid: int) -> list[int]:
    """The process and its descendants (several workers run as children)."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").iterdir():
            children = (task / "children").read_text().split()
            pending.extend(int(child) for child in children)
    return found


def reset_peaks(pids: list[int]) -> None:
    for pid in pids:  # "5": reset the peak resident set size (proc(5), clear_refs)
        Path(f"/proc/{pid}/clear_refs").write_text("5")


def peak_mb(pids: list[int]) -> float:
    """The largest VmHWM among the processes, in MiB."""
    peaks = []
    for pid in pids:
        for row in Path(f"/proc/{pid}/status").read_text().splitlines():
            if row.startswith("VmHWM:"):
                peaks.append(int(row.split()[1]) / 1024)
    return max(peaks)


@dataclass
class Served:
    store: str  # database or s3
    process: GatewayProcess
    client: openai.OpenAI
    s3_endpoint: str

    def stored_bytes(self, file_id: str) -> bytes:
        """The file's bytes as its store holds them: the bucket's object, or the API's download."""
        if self.store == "s3":
            return asyncio.run(object_bytes(self.s3_endpoint, BUCKET, PREFIX + file_id))
        return self.client.files.content(file_id).content


def ledger_lines(job_id: str) -> int:
    async def count() -> int:
        conn = await asyncpg.connect(postgres_url(DATABASE))
        try:
            return int(await conn.fetchval("SELECT count(*) FROM batch_lines WHERE job_id = $1", job_id))
        finally:
            await conn.close()

    return asyncio.run(count())


@pytest.fixture(params=["database", "s3"])
def served(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    s3_endpoint: str,  # noqa: F811
    bucket: str,  # noqa: F811
) -> Iterator[Served]:
    store = request.param
    config = tmp_path / "gateway.yaml"
    config.write_text(CONFIG.format(store=S3_STORE if store == "s3" else ""))
    env = gateway_env(recreate_database(DATABASE), s3_endpoint)
    process = GatewayProcess(config, env).start()
    try:
        admin_headers = {"authorization": f"Bearer {ADMIN_KEY}"}
        with httpx.Client(base_url=process.base_url, headers=admin_headers) as admin:
            team = create_team(admin, f"memory-{store}")
        client = openai.OpenAI(
            base_url=process.base_url + "/v1", api_key=team.key, max_retries=0, timeout=600
        )
        yield Served(store, process, client, s3_endpoint)
    finally:
        process.stop()


def test_peak_memory_of_concurrent_uploads_and_batch_creates(served: Served) -> None:
    client = served.client
    assert served.process.process is not None
    pids = process_tree(served.process.process.pid)
    idle = peak_mb(pids)

    upload = lines_of(UPLOAD_BYTES // 500, 500)
    reset_peaks(pids)
    started = time.monotonic()
    with ThreadPoolExecutor(UPLOADS) as pool:
        uploaded = list(
            pool.map(
                lambda n: client.files.create(file=(f"big-{n}.jsonl", upload), purpose="batch"),
                range(UPLOADS),
            )
        )
    upload_s, upload_peak = time.monotonic() - started, peak_mb(pids)
    assert [file.bytes for file in uploaded] == [len(upload)] * UPLOADS
    assert served.stored_bytes(uploaded[-1].id) == upload  # stored exactly
    upload_mb = len(upload) / MB

    batch_file = conversations_of(BATCH_LINES)
    input_file = client.files.create(file=("batch.jsonl", batch_file), purpose="batch")
    reset_peaks(pids)
    started = time.monotonic()
    with ThreadPoolExecutor(CREATES) as pool:
        batches = list(
            pool.map(
                lambda _: client.batches.create(
                    input_file_id=input_file.id, endpoint="/v1/chat/completions", completion_window="24h"
                ),
                range(CREATES),
            )
        )
    create_s, create_peak = time.monotonic() - started, peak_mb(pids)
    assert [batch.status for batch in batches] == ["validating"] * CREATES
    assert [ledger_lines(batch.id) for batch in batches] == [BATCH_LINES] * CREATES

    print(
        f"\nfile memory [{served.store} store]: idle {idle:.0f} MiB; "
        f"{UPLOADS} concurrent {upload_mb:.0f} MB uploads: peak {upload_peak:.0f} MiB in {upload_s:.1f} s; "
        f"{CREATES} concurrent creates on a {len(batch_file) / MB:.0f} MB file of {BATCH_LINES} lines: "
        f"peak {create_peak:.0f} MiB in {create_s:.1f} s"
    )
