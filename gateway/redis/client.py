"""The process's redis-py client, built from the Redis URL of the settings (see `urls`).

One server, a Sentinel-watched master or a Cluster: each is redis-py's own client, and the rest of
the gateway holds "a Redis client" (`RedisClient`) without asking which. What differs is kept
here and in `group_commit`: a Cluster routes each command to the node of its key's slot, so the
callers' multi-key commands, scripts and transactions name keys of one hash tag (docs/redis.md).
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import ExponentialBackoff
from redis.typing import EncodableT

from gateway.redis.urls import Durability, RedisTopology, parse_redis_url

RedisClient = Redis | RedisCluster

MAX_CONNECTIONS = 1024  # per server (per node in a Cluster)
# redis-py's default socket_timeout (5 s) bounds each command; the group commit has its own.
CONNECTION_OPTIONS: dict[str, Any] = {
    "socket_connect_timeout": 2.0,
    "socket_keepalive": True,
    "health_check_interval": 10,
}


def redis_client(url: str) -> RedisClient:
    """The process's Redis client for `url` (RedisUrlError if it names no topology).

    Connections from a pool get no retries unless told: after a Redis restart or a failover every
    pooled connection is dead, and each would fail the next command given to it (a request's pin,
    its admission); up to two retries on a fresh connection let those commands through once Redis
    is back. A fresh Sentinel-managed connection asks the Sentinels where the master is now.
    """
    topology = parse_redis_url(url)
    if topology.kind == "cluster":
        return _cluster(topology)
    if topology.kind == "sentinel":
        return _sentinel_master(topology)
    assert topology.url is not None
    # A blocking pool: a burst of requests waits for a connection instead of failing.
    pool = BlockingConnectionPool.from_url(
        topology.url, max_connections=MAX_CONNECTIONS, timeout=5.0, retry=_retry(), **CONNECTION_OPTIONS
    )
    return Redis(connection_pool=pool)


def durability_of(url: str) -> Durability:
    """The replica acknowledgements `url` asks for before a durable write counts (`urls.Durability`)."""
    return parse_redis_url(url).durability


def _retry() -> Retry:
    return Retry(ExponentialBackoff(cap=0.2, base=0.02), 2)


class SentinelMaster(Redis):
    """The master a Sentinel set names; closing it closes the connections to the Sentinels too."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        pool = self.connection_pool
        if isinstance(pool, SentinelConnectionPool):
            await pool.sentinel_manager.aclose()


def _sentinel_master(topology: RedisTopology) -> Redis:
    """A client of the master that the Sentinels name for the service. redis-py has no blocking
    Sentinel pool: past MAX_CONNECTIONS at once a command fails instead of waiting."""
    sentinel_options = {
        "username": topology.sentinel_username,
        "password": topology.sentinel_password,
        "ssl": topology.tls,
        "socket_timeout": 2.0,
        "socket_connect_timeout": 2.0,
    }
    sentinel = Sentinel(list(topology.hosts), sentinel_kwargs=sentinel_options)  # type: ignore[no-untyped-call]
    assert topology.service is not None
    master: Redis = sentinel.master_for(
        topology.service,
        redis_class=SentinelMaster,
        db=topology.db,
        username=topology.username,
        password=topology.password,
        ssl=topology.tls,
        client_name=topology.client_name,
        max_connections=MAX_CONNECTIONS,
        retry=_retry(),
        **CONNECTION_OPTIONS,
    )
    return master


class SlotMapFirst(RedisCluster):
    """redis-py's Cluster client, which learns the slot map before it routes a command.

    redis-py 8.1 looks up a command's keys (for a script, by asking a startup node) before its
    lazy first load of the slot map, and that load closes the startup nodes' connections: commands
    that reach a fresh client together (a gateway's first requests) then fail on a connection
    closed under them (AttributeError 'writelines'). Loading the map first is a no-op once loaded.
    """

    async def execute_command(self, *args: EncodableT, **kwargs: Any) -> Any:
        await self.initialize()
        return await super().execute_command(*args, **kwargs)


def _cluster(topology: RedisTopology) -> RedisCluster:
    """A Cluster client that learns the slot map from any reachable startup node. It retries a
    command on MOVED/ASK and on a connection error (refreshing the map) by itself."""
    return SlotMapFirst(
        startup_nodes=[ClusterNode(host, port) for host, port in topology.hosts],
        username=topology.username,
        password=topology.password,
        ssl=topology.tls,
        client_name=topology.client_name,
        max_connections=MAX_CONNECTIONS,
        **CONNECTION_OPTIONS,
    )
