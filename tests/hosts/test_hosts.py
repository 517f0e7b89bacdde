"""Across hosts (SPEC 1, 3, 5, 8, 9): three gateway hosts in network namespaces behind nginx,
sharing one Redis and one PostgreSQL, driven through the balancer with the openai SDK.

A batch sent through all three lands on one deployment; a replica's cap holds in sum over the
hosts; a Batch API job survives its host being cut off mid-run (link down) and every line is
answered and metered once; and every request the client saw served has exactly one usage record.
The last case reads what the others served, so the module runs in order. Nothing is timed; the
figures (requests per host, peak in flight, how long the job took to move) are printed.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
from openai import AsyncStream
from prometheus_client.parser import text_string_to_metric_families

from tests.hosts.cluster import CAP, Cluster, GatewayHost
from tests.hosts.takeover import (
    Takeover,
    cut_mid_job,
    file_lines,
    job_records,
    lines_by_claim,
    until_logged,
    until_ready,
)
from tests.support.gateway import Team

pytestmark = pytest.mark.e2e

DEADLINE_S = 60.0
POLL_S = 0.3


@dataclass(frozen=True)
class Reply:
    """A request the client saw served: its gateway request id and the provider that served it."""

    request_id: str
    provider: str


@pytest.fixture(scope="module")
def team(hosts: Cluster) -> Team:
    return hosts.new_team("live")


@pytest.fixture(scope="module")
def served() -> dict[str, Reply]:
    """Every live request that got a 200, by request id, over the whole module."""
    return {}


async def chat(
    client: openai.AsyncOpenAI, model: str, text: str, *, max_tokens: int, stream: bool = False
) -> Reply:
    """One chat completion read to its end (a stream to its usage chunk)."""
    messages: Any = [{"role": "user", "content": text}]
    if stream:
        raw = await client.chat.completions.with_raw_response.create(
            model=model, messages=messages, max_tokens=max_tokens, stream=True,
            stream_options={"include_usage": True},
        )  # fmt: skip
        chunks = raw.parse()
        assert isinstance(chunks, AsyncStream)
        usage = [chunk.usage async for chunk in chunks if chunk.usage is not None]
        assert len(usage) == 1
    else:
        raw = await client.chat.completions.with_raw_response.create(
            model=model, messages=messages, max_tokens=max_tokens
        )
        assert raw.parse().usage is not None
    assert raw.status_code == 200
    return Reply(raw.headers["x-request-id"], raw.headers["x-gateway-provider"])


async def send_all(
    client: openai.AsyncOpenAI, model: str, count: int, served: dict[str, Reply]
) -> list[Reply]:
    """`count` requests at once, a quarter of them streams. Each one served goes into `served`,
    even when another failed (then the first failure is raised), so the ledger stays exact."""
    try:
        outcomes = await asyncio.gather(
            *(chat(client, model, f"request {i}", max_tokens=10, stream=i % 4 == 0) for i in range(count)),
            return_exceptions=True,
        )
    finally:
        await client.close()
    replies = [outcome for outcome in outcomes if isinstance(outcome, Reply)]
    served.update((reply.request_id, reply) for reply in replies)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return replies


async def served_per_host(hosts: Cluster, model: str) -> dict[str, float]:
    """Each host's own count of requests it served for `model` (its /metrics)."""

    async def one(gateway: GatewayHost) -> float:
        async with httpx.AsyncClient(timeout=10) as http:
            text = (await http.get(gateway.base_url + "/metrics")).raise_for_status().text
        return sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "gateway_requests_total" and sample.labels.get("model") == model
        )

    counts = await asyncio.gather(*(one(gateway) for gateway in hosts.gateways))
    return {gateway.host.name: count for gateway, count in zip(hosts.gateways, counts, strict=True)}


def difference(after: dict[str, float], before: dict[str, float]) -> dict[str, int]:
    return {name: int(after[name] - before[name]) for name in after}


# --- one batch, one deployment ----------------------------------------------------------------


async def test_a_batch_sent_through_three_hosts_stays_on_one_deployment(
    hosts: Cluster, team: Team, served: dict[str, Reply]
) -> None:
    await hosts.reset_replicas()
    before = await served_per_host(hosts, "chat")
    batch = f"hosts-{uuid.uuid4().hex[:8]}"
    client = hosts.client(team.key, default_headers={"X-Gateway-Batch": batch})

    replies = await send_all(client, "chat", 60, served)

    per_host = difference(await served_per_host(hosts, "chat"), before)
    print(f"\nbatch of 60 through the balancer, per host: {per_host}")
    assert sum(per_host.values()) == 60
    assert all(count > 0 for count in per_host.values()), per_host  # every host took part...
    (pinned,) = {reply.provider for reply in replies}  # ...and every host sent it to one deployment
    other = "west" if pinned == "east" else "east"
    assert (await hosts.replica_stats(pinned))["requests_finished"] == 60
    assert (await hosts.replica_stats(other))["requests_finished"] == 0


# --- capacity caps in sum ---------------------------------------------------------------------


async def test_a_replica_cap_holds_in_sum_over_the_hosts(
    hosts: Cluster, team: Team, served: dict[str, Reply]
) -> None:
    await hosts.reset_replicas()
    before = await served_per_host(hosts, "capped")

    await send_all(hosts.client(team.key), "capped", 40, served)

    per_host = difference(await served_per_host(hosts, "capped"), before)
    stats = await hosts.replica_stats("capped")
    print(f"\n40 requests at a cap of {CAP}, per host: {per_host}; peak in flight: {stats['max_running']}")
    assert all(count > 0 for count in per_host.values()), per_host
    assert stats["requests_finished"] == 40
    # Each host alone would let CAP through: only permits shared in Redis hold the sum to CAP.
    assert stats["max_running"] <= CAP
    assert stats["max_running"] == CAP  # ...and the cap was used, not merely respected


# --- a job survives its host being cut off ----------------------------------------------------

JOB_LINES = 200


def print_takeover(hosts: Cluster, run: Takeover, resent: int) -> None:
    print(
        f"\njob of {JOB_LINES} lines: {run.holder.name} cut off after {run.done_at_cut} lines; "
        f"{run.taker.name} claimed it {run.moved_after_s:.1f} s after the cut and finished it "
        f"{run.finished_after_s:.1f} s after; "
        f"lines stored by claim: {run.lines_by_claim}; lines the upstream was sent twice: {resent}; "
        f"requests abandoned at {run.holder.name}: {hosts.balancer.abandoned(run.holder.address)}"
    )


async def test_a_job_survives_its_host_being_cut_off_and_each_line_is_answered_once(
    hosts: Cluster, team: Team, served: dict[str, Reply]
) -> None:
    live: list[Reply] = []

    async def live_traffic() -> None:
        """Requests through the balancer while the host is cut off. nginx hands some to idle
        kept-alive connections to it, where they hang until the client gives up: the SDK's timeout
        and retries carry them to another host. A request sent after the cut never reached the
        cut-off host, so sending it again does not serve it twice."""
        started = time.monotonic()
        live.extend(await send_all(hosts.client(team.key, max_retries=8, timeout=4), "chat", 30, served))
        print(f"\n30 requests while a host was cut off: all served in {time.monotonic() - started:.1f} s")

    # The SDK's retries carry the job's polls past the cut-off host too (reads: safe to repeat).
    client = hosts.client(hosts.new_team("jobs").key, max_retries=6, timeout=5)
    await hosts.reset_replicas()
    try:
        run = await cut_mid_job(hosts, client, JOB_LINES, max_tokens=20, while_cut=live_traffic)
        assert run.taker != run.holder
        assert run.batch.status == "completed"
        assert run.batch.request_counts is not None
        assert (run.batch.request_counts.completed, run.batch.request_counts.failed) == (JOB_LINES, 0)
        assert run.batch.error_file_id is None
        custom_ids = Counter(line["custom_id"] for line in run.output)
        assert custom_ids == Counter(f"line-{i}" for i in range(JOB_LINES))  # every line, once
        assert all(line["response"]["status_code"] == 200 for line in run.output)
        assert len(run.lines_by_claim) == 2  # each claim stored the lines it finished, none twice
        assert sum(run.lines_by_claim.values()) == JOB_LINES
        # one record per answered line, and one per run the cut-off host had in flight (its process
        # lost them: an estimated `attempt_lost` record each, since the upstream may have served them)
        answered = [record for record in run.records if record[2] != "attempt_lost"]
        lost = len(run.records) - len(answered)
        assert len(answered) == JOB_LINES
        assert len({request_id for request_id, _, _ in run.records}) == len(run.records)
        (provider,) = {provider for _, provider, _ in run.records}  # the whole job on one deployment
        other = "west" if provider == "east" else "east"  # ...so the other saw only the live requests
        live_at = Counter(reply.provider for reply in live)
        assert (await hosts.replica_stats(other))["requests_finished"] == live_at[other]
        answered_by = hosts.balancer.served_by()
        assert len(live) == 30
        assert all(answered_by[reply.request_id] != run.holder.address for reply in live)
        upstream = await hosts.replica_stats(provider)
        sent = upstream["requests_finished"] + upstream["running"] + upstream["waiting"]
        resent = sent - JOB_LINES - live_at[provider]
        print_takeover(hosts, run, resent=resent)
        assert resent <= lost  # every line the upstream was sent twice has a record for each time

        # Back on the network, the cut-off host finds its lease gone and writes nothing more.
        cut_off = hosts.gateway_on(run.holder)
        await until_logged(cut_off, "batch_lease_lost")
        await until_ready(cut_off)
        assert await job_records(hosts, run.batch.id) == run.records
        assert await lines_by_claim(hosts, run.batch.id) == run.lines_by_claim
        assert await file_lines(client, run.batch.output_file_id) == run.output
    finally:
        await client.close()


# --- exactly one record per served request ----------------------------------------------------


async def test_every_request_served_has_exactly_one_usage_record(
    hosts: Cluster, team: Team, served: dict[str, Reply]
) -> None:
    # More traffic after the cut-off host came back, so the case stands on its own too.
    await send_all(hosts.client(team.key), "chat", 30, served)
    await send_all(hosts.client(team.key), "capped", 10, served)

    deadline = time.monotonic() + DEADLINE_S
    while True:
        rows = await hosts.query(
            "SELECT request_id, provider, status FROM usage_records WHERE team_id = $1", team.id
        )
        if set(served) <= {row["request_id"] for row in rows} or time.monotonic() > deadline:
            break
        await asyncio.sleep(POLL_S)
    per_request = Counter(row["request_id"] for row in rows)
    records = {row["request_id"]: (row["provider"], row["status"]) for row in rows}
    others = {request_id: records[request_id] for request_id in set(records) - set(served)}
    abandoned = hosts.balancer.abandoned()
    print(
        f"\n{len(served)} requests served to the client, {len(rows)} usage records; "
        f"{abandoned} requests abandoned by the client; other records: {sorted(others.values())}"
    )
    assert set(served) <= set(per_request)  # every served request has a record...
    assert all(per_request[request_id] == 1 for request_id in served)  # ...exactly one
    assert {request_id: records[request_id] for request_id in served} == {
        request_id: (reply.provider, 200) for request_id, reply in served.items()
    }
    # A request the client gave up on at the cut-off host reached it when the link came back
    # (TCP delivers what it had queued), and may have gone upstream: it is metered, as SPEC 5 says.
    # Nothing else is: every other record stands for an abandoned request.
    assert len(others) <= abandoned
