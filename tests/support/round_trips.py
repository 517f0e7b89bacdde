"""Counting the Redis round trips of the group commit (`gateway.redis.group_commit.PipelineBatcher`)."""

from __future__ import annotations

from typing import Any

from gateway.redis.group_commit import Command, PipelineBatcher


class RoundTrips:
    """Wraps a batcher's round trips from now on: counts them and keeps the commands each sent."""

    def __init__(self, batcher: PipelineBatcher) -> None:
        self.count = 0
        self.sent: list[list[Command]] = []
        self._round_trip = batcher._round_trip
        batcher._round_trip = self._counted  # type: ignore[method-assign]

    async def _counted(self, commands: list[Command]) -> list[Any]:
        self.count += 1
        self.sent.append(commands)
        return await self._round_trip(commands)

    def command_names(self) -> list[str]:
        """The first word of every command sent, in order (`["EVALSHA", "SCRIPT", ...]`)."""
        return [str(command[0]) for commands in self.sent for command in commands]
