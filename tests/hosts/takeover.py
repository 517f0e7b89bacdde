"""A Batch API job whose host is cut off mid-run: submit it through the balancer, wait until a fifth
of its lines are stored, take the link of the host holding its lease down, and follow the job to
another host and to its end (with other traffic meanwhile). What happened, and how long it took,
comes back as a `Takeover`.

The lease holder is found from the database: a lease owner names its process
(`gateway.jobs.runner.process_owner`), and `ip netns identify` names the process's namespace.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import openai
from openai.types import Batch

from tests.hosts.cluster import Cluster, GatewayHost
from tests.hosts.topology import Host

DEADLINE_S = 60.0
POLL_S = 0.3
FINAL = ("completed", "failed", "cancelled", "expired")


def job_input(count: int, max_tokens: int) -> bytes:
    """`count` chat lines behind one system prompt; at the simulator a line takes about
    `max_tokens` times ten milliseconds."""
    lines = [
        {
            "custom_id": f"line-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": "chat",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": f"q {i}"},
                ],
                "max_tokens": max_tokens,
            },
        }
        for i in range(count)
    ]
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


@dataclass(frozen=True)
class Takeover:
    holder: Host  # the host cut off
    taker: Host  # the host that claimed the job next
    done_at_cut: int  # lines stored when the link went down
    moved_after_s: float  # from the cut to the next claim
    finished_after_s: float  # from the cut to the job's final status in the database
    batch: Batch
    output: list[dict[str, Any]]  # the output file's lines
    records: list[tuple[str, str, str | None]]  # the job's usage records: request id, provider, error
    lines_by_claim: dict[int, int]  # fencing token -> lines whose outcome that claim stored


async def job_row(hosts: Cluster, job_id: str) -> dict[str, Any]:
    (row,) = await hosts.query(
        "SELECT status, lease_owner, fencing_token, request_completed FROM batch_jobs WHERE id = $1", job_id
    )
    return dict(row)


async def until_job(
    hosts: Cluster, job_id: str, check: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    """Poll the job's row until `check` holds; fail naming `what` after DEADLINE_S (generous)."""
    deadline = time.monotonic() + DEADLINE_S
    while not check(row := await job_row(hosts, job_id)):
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id}: {what}: not within {DEADLINE_S} s (now {row})")
        await asyncio.sleep(POLL_S / 3)
    return row


def holder_of(hosts: Cluster, lease_owner: str) -> Host:
    """The host of a lease owner (`hostname:pid:random`): the namespace its pid runs in."""
    return hosts.topology.host_of_pid(int(lease_owner.split(":")[1]))


async def job_records(hosts: Cluster, job_id: str) -> list[tuple[str, str, str | None]]:
    rows = await hosts.query(
        "SELECT request_id, provider, error_code FROM usage_records WHERE batch_id = $1", job_id
    )
    return sorted((row["request_id"], row["provider"], row["error_code"]) for row in rows)


async def lines_by_claim(hosts: Cluster, job_id: str) -> dict[int, int]:
    rows = await hosts.query(
        "SELECT fencing_token, count(*) AS lines FROM batch_lines WHERE job_id = $1 GROUP BY 1", job_id
    )
    return {row["fencing_token"]: row["lines"] for row in rows}


async def wait_for_batch(client: openai.AsyncOpenAI, batch_id: str) -> Batch:
    deadline = time.monotonic() + DEADLINE_S
    while (batch := await client.batches.retrieve(batch_id)).status not in FINAL:
        if time.monotonic() > deadline:
            raise AssertionError(f"batch {batch_id} is {batch.status} after {DEADLINE_S} s")
        await asyncio.sleep(POLL_S)
    return batch


async def file_lines(client: openai.AsyncOpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    content = await client.files.content(file_id)
    return [json.loads(line) for line in content.text.splitlines()]


async def cut_mid_job(
    hosts: Cluster,
    client: openai.AsyncOpenAI,
    lines: int,
    max_tokens: int,
    while_cut: Callable[[], Awaitable[object]],
) -> Takeover:
    """Run a job, cutting its host off a fifth of the way through, and `while_cut` beside it once
    another host has claimed it; the link is back up on return."""
    uploaded = await client.files.create(file=("in.jsonl", job_input(lines, max_tokens)), purpose="batch")
    job = await client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    running = await until_job(
        hosts, job.id, lambda row: row["request_completed"] >= lines // 5, "a fifth done"
    )
    holder = holder_of(hosts, running["lease_owner"])
    hosts.topology.cut(holder)
    cut_at = time.monotonic()
    try:
        claimed = await until_job(
            hosts, job.id, lambda row: row["fencing_token"] > running["fencing_token"], "claimed again"
        )
        moved_after = time.monotonic() - cut_at

        async def finished() -> float:
            await until_job(hosts, job.id, lambda row: row["status"] in FINAL, "finished")
            return time.monotonic() - cut_at

        finished_after, _ = await asyncio.gather(finished(), while_cut())
        batch = await wait_for_batch(client, job.id)  # as the client sees it, through nginx
        return Takeover(
            holder=holder,
            taker=holder_of(hosts, claimed["lease_owner"]),
            done_at_cut=running["request_completed"],
            moved_after_s=moved_after,
            finished_after_s=finished_after,
            batch=batch,
            output=await file_lines(client, batch.output_file_id),
            records=await job_records(hosts, job.id),
            lines_by_claim=await lines_by_claim(hosts, job.id),
        )
    finally:
        hosts.topology.restore(holder)


async def until_logged(gateway: GatewayHost, event: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while f'"event":"{event}"' not in gateway.logs():
        if time.monotonic() > deadline:
            raise AssertionError(f"{gateway.host.name} did not log {event} within {DEADLINE_S} s")
        await asyncio.sleep(POLL_S)


async def until_ready(gateway: GatewayHost) -> None:
    deadline = time.monotonic() + DEADLINE_S
    async with httpx.AsyncClient(timeout=2) as http:
        while True:
            try:
                if (await http.get(gateway.base_url + "/readyz")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{gateway.host.name} was not ready again within {DEADLINE_S} s")
            await asyncio.sleep(POLL_S)
