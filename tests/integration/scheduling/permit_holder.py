"""Another gateway process, for the release-to-dispatch figure (test_release_wakeups.py): told so
on stdin, it takes the one permit of a replica ("hold") or gives it back ("release"), printing
when (wall clock, the same host's).

    python -m tests.integration.scheduling.permit_holder REDIS_URL REPLICA
"""

from __future__ import annotations

import asyncio
import sys
import time

from redis.asyncio import Redis

from gateway.redis.group_commit import PipelineBatcher
from gateway.scheduling.permits import Caps
from gateway.scheduling.redis.permits import RedisPermits

HOLDER = "permit-holder"
CAPS = Caps(max_concurrency=1)


async def hold(redis_url: str, replica: str) -> None:
    client = Redis.from_url(redis_url)
    bank = RedisPermits(client, PipelineBatcher(client), process=HOLDER)
    bank.start()
    try:
        while (command := (await asyncio.to_thread(sys.stdin.readline)).strip()) in ("hold", "release"):
            if command == "hold":
                while not await bank.acquire(replica, 1, CAPS, waiting=1):
                    await asyncio.sleep(0.001)
                print("held", flush=True)
            else:
                released_at = time.time()
                bank.release(replica, 1)
                print(f"released {released_at!r}", flush=True)
    finally:
        await bank.aclose()
        await client.aclose()


if __name__ == "__main__":
    asyncio.run(hold(sys.argv[1], sys.argv[2]))
