"""The key cache's invalidation listener: a Redis channel of key hashes to evict, in every process.

Kept apart from `key_cache` (compiled in a compiled build) because it waits before reconnecting
while it handles a Redis failure: compiled code must not suspend inside an exception handler
(setup.py, HOT_PATH).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

log = structlog.get_logger("gateway.auth.key_cache")


async def listen_for_invalidations(
    redis: Redis,
    channel: str,
    reconnect_delay_s: float,
    subscribed: asyncio.Event,
    on_subscribed: Callable[[], None],
    evict: Callable[[str], None],
) -> None:
    """Evict the hashes published on `channel`; runs until cancelled, reconnecting as needed.

    `subscribed` is set while subscribed; `on_subscribed` runs at each (re)subscription, since
    invalidations sent while nobody listened are lost."""
    while True:
        try:
            async with redis.pubsub(ignore_subscribe_messages=True) as pubsub:
                await pubsub.subscribe(channel)
                on_subscribed()
                subscribed.set()
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        data = message["data"]
                        evict(data.decode() if isinstance(data, bytes) else str(data))
        except (RedisError, OSError) as exc:
            subscribed.clear()
            log.warning("key_cache.listener_disconnected", error=type(exc).__name__)
            await asyncio.sleep(reconnect_delay_s)
