"""Counting the Redis round trips of the group commit (`gateway.redis_batching.PipelineBatcher`)."""

from __future__ import annotations

from gateway.redis_batching import PipelineBatcher


class RoundTrips:
    """Counts the packed writes to a connected batcher's connection: one per round trip."""

    def __init__(self, batcher: PipelineBatcher) -> None:
        connection = batcher._connection
        assert connection is not None, "connect the batcher first (submit one command)"
        self.count = 0
        send = connection.send_packed_command

        async def counted(*args: object, **kwargs: object) -> None:
            self.count += 1
            await send(*args, **kwargs)  # type: ignore[arg-type]

        connection.send_packed_command = counted  # type: ignore[method-assign]
