"""A 3-master Cluster and a Sentinel set of the tests' own, and a client of each as the gateway
builds it (`redis_client` from the URL). Each topology is flushed before every test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from gateway.redis.client import RedisClient, redis_client
from tests.integration.redis_topologies.servers import LocalCluster, LocalSentinelSet
from tests.support.upstream import RunningUpstream, start_mock_upstream


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    local = LocalCluster()
    try:
        yield local.start()
    finally:
        local.destroy()


@pytest.fixture(scope="session")
def sentinel_set() -> Iterator[LocalSentinelSet]:
    local = LocalSentinelSet(replicas=1)
    try:
        yield local.start()
    finally:
        local.destroy()


@pytest.fixture(params=["cluster", "sentinel"])
async def topology_client(
    request: pytest.FixtureRequest, cluster: LocalCluster, sentinel_set: LocalSentinelSet
) -> AsyncIterator[RedisClient]:
    """The gateway's client of a Cluster, then of a Sentinel-watched master (min_replicas=1)."""
    if request.param == "cluster":
        cluster.flush()
        client = redis_client(cluster.url)
    else:
        sentinel_set.master().client().flushall()
        client = redis_client(sentinel_set.url(min_replicas=1))
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def upstreams() -> Iterator[tuple[RunningUpstream, RunningUpstream]]:
    east = start_mock_upstream()
    try:
        west = start_mock_upstream()
    except BaseException:
        east.stop()
        raise
    try:
        yield east, west
    finally:
        east.stop()
        west.stop()
