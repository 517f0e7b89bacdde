"""A release at a replica wakes the gate waiting for it in another process on a 3-master Cluster
and through a Sentinel set too: the release script's PUBLISH reaches a subscription held on
whichever node, for replicas whose channels hash to different slots."""

from __future__ import annotations

import asyncio

import pytest

from gateway.redis.client import RedisClient
from gateway.redis.group_commit import PipelineBatcher
from gateway.routing.directives import Priority
from gateway.scheduling.gate import ReplicaGate
from gateway.scheduling.permits import Caps
from gateway.scheduling.redis.permits import RedisPermits, replica_keys
from gateway.scheduling.ticket import Ticket

pytestmark = pytest.mark.integration

REPLICAS = ("http://east:8000/v1", "http://west:8000/v1", "http://north:8000/v1")
CAPS = Caps(max_concurrency=1)
TICKET = Ticket("team", 1.0, Priority.INTERACTIVE, prompt_tokens=1, tokens=1)
AN_HOUR = 3600.0  # a poll that never comes within a test
DEADLINE_S = 10.0


async def test_a_release_wakes_a_gate_in_another_process(topology_client: RedisClient) -> None:
    batcher = PipelineBatcher(topology_client)
    holder = RedisPermits(topology_client, batcher, process="holder")
    waiter = RedisPermits(topology_client, batcher, process="waiter", poll_s=AN_HOUR)
    waiter.start()
    gates = [ReplicaGate("vllm", replica, CAPS, waiter, batch_share=0.1) for replica in REPLICAS]
    try:
        await asyncio.wait_for(waiter.listening.wait(), DEADLINE_S)
        for replica, gate in zip(REPLICAS, gates, strict=True):
            assert await holder.acquire(replica, 1, CAPS, 0)
            entering = asyncio.create_task(gate.enter(TICKET, timeout_s=AN_HOUR, queue_full=lambda: False))
            for _ in range(200):  # until its refusal is in Redis: then a release publishes
                if await topology_client.hget(replica_keys(replica)[2], "waiter") is not None:
                    break
                await asyncio.sleep(0.05)
            holder.release(replica, 1)
            grant = await asyncio.wait_for(entering, DEADLINE_S)  # not the hour's poll
            grant.release()
    finally:
        await waiter.aclose()
        await holder.aclose()
