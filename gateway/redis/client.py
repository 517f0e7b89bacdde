"""The process's redis-py client, built from the Redis URL of the settings."""

from __future__ import annotations

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff


def redis_client(url: str) -> Redis:
    """The process's Redis client; the URL carries the host, db, credentials and client name.

    A blocking pool: a burst of requests waits for a connection instead of failing. redis-py's
    default socket_timeout (5 s) bounds each command of the pool; a request's own commands (its
    usage append and spend settle) go through the group commit instead
    (`gateway.redis.group_commit`), which has one timeout per round trip. Connections from a pool
    get no retries unless told: after a Redis restart every pooled connection is dead, and each
    would fail the next command given to it (a request's pin, its admission); up to two retries on
    a fresh connection let those commands through once Redis is back.
    """
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=1024,
        timeout=5.0,
        socket_connect_timeout=2.0,
        socket_keepalive=True,
        health_check_interval=10,
        retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 2),
    )
    return Redis(connection_pool=pool)
