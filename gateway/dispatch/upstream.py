"""What the executor asks of an upstream HTTP client (`UpstreamClient`, its `Reply`), and the
count of requests in flight on each deployment (`InFlight`).

`gateway.dispatch.http1.pool.UpstreamPool` serves network upstreams; `gateway.dispatch.httpx_bridge`
puts any httpx transport (the in-process mock) behind the same interface.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import Protocol

from gateway.providers.base import TokenUsage
from gateway.scheduling.gate import Grant


class Reply(Protocol):
    """An upstream's answer: status and headers (lower-case names), then the body as it arrives."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    def chunks(self) -> AsyncGenerator[bytes, None]:
        """The body, piece by piece as it arrives."""
        ...

    async def read(self, limit: int) -> bytes:
        """The whole body; UpstreamTooLarge once it passes `limit` bytes."""
        ...

    async def aclose(self) -> None:
        """Release the connection, whatever was read (idempotent)."""
        ...


class UpstreamClient(Protocol):
    async def request(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        *,
        connect_timeout: float,
        read_timeout: float,
    ) -> Reply: ...

    async def aclose(self) -> None: ...


class InFlight:
    """One request counted as in flight on a deployment until `release()` (idempotent), holding
    the scheduler's permit for it (`gateway.scheduling.gate.Grant`), if any, until then."""

    __slots__ = ("_counts", "_deployment", "_grant", "_held")

    def __init__(self, counts: dict[str, int], deployment: str, grant: Grant | None = None) -> None:
        self._counts, self._deployment, self._grant, self._held = counts, deployment, grant, True
        counts[deployment] = counts.get(deployment, 0) + 1

    def __enter__(self) -> InFlight:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()

    def release(self, usage: TokenUsage | None = None) -> None:
        """`usage`: what the request used, if known (the scheduler charges its team with it)."""
        if self._held:
            self._held = False
            self._counts[self._deployment] -= 1
            if self._grant is not None:
                self._grant.release(usage)
