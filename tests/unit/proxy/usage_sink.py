"""A usage buffer that keeps what the proxy appends, for the proxy's tests to read."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.metering.events import UsageEvent


@dataclass
class Sink:
    events: list[UsageEvent] = field(default_factory=list)

    async def append(self, event: UsageEvent) -> None:
        self.events.append(event)
