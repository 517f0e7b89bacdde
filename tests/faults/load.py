"""Steady load for fault tests: a bounded number of requests at a fixed rate, every answer kept.

Requests are sent open-loop (one every 1/rate seconds, whether or not earlier ones finished) and
round-robin over the targets, so a stalled or dead gateway does not slow the others down. At most
MAX_IN_FLIGHT are outstanding: a client that queues thousands of requests in httpx's pool spends
its CPU managing the queue (quadratic) and stops generating load at all.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

MAX_IN_FLIGHT = 64
CHAT_BODY = {"model": "chat", "messages": [{"role": "user", "content": "count the apples"}], "max_tokens": 8}


@dataclass(frozen=True)
class Outcome:
    target: str  # the gateway's base URL
    status: int | None  # None: no HTTP answer at all (refused, reset, timed out)
    request_id: str | None  # the x-request-id header
    sent_at: float  # seconds since the load started
    provider: str | None = None  # the x-gateway-provider header


def served_ids(outcomes: Sequence[Outcome]) -> set[str]:
    """Request ids of every request the client got a successful answer for."""
    return {o.request_id for o in outcomes if o.status == 200 and o.request_id}


def summary(outcomes: Sequence[Outcome]) -> dict[str, int]:
    """How many requests ended how: `200`, `503`, ..., `no answer`."""
    counts: dict[str, int] = {}
    for outcome in outcomes:
        label = "no answer" if outcome.status is None else str(outcome.status)
        counts[label] = counts.get(label, 0) + 1
    return counts


class SteadyLoad:
    def __init__(
        self,
        targets: Sequence[str],
        key: str,
        rate_per_s: float,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.targets = list(targets)
        self.rate_per_s = rate_per_s
        self.body = body or CHAT_BODY
        self.headers = {"authorization": f"Bearer {key}"} | (headers or {})
        self.outcomes: list[Outcome] = []

    async def run(self, duration_s: float) -> list[Outcome]:
        """Send rate x duration requests, then wait for the last answer; returns every outcome."""
        limits = httpx.Limits(max_connections=MAX_IN_FLIGHT, max_keepalive_connections=MAX_IN_FLIGHT)
        in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)
        async with httpx.AsyncClient(timeout=httpx.Timeout(20.0), limits=limits) as client:
            started = time.monotonic()
            pending: list[asyncio.Task[None]] = []
            total = int(duration_s * self.rate_per_s)
            for i in range(total):
                await asyncio.sleep(max(started + i / self.rate_per_s - time.monotonic(), 0))
                await in_flight.acquire()
                target = self.targets[i % len(self.targets)]
                sent_at = time.monotonic() - started
                pending.append(asyncio.create_task(self._send(client, target, sent_at, in_flight)))
            await asyncio.gather(*pending)
        return self.outcomes

    async def _send(
        self, client: httpx.AsyncClient, target: str, sent_at: float, in_flight: asyncio.Semaphore
    ) -> None:
        try:
            await self._record(client, target, sent_at)
        finally:
            in_flight.release()

    async def _record(self, client: httpx.AsyncClient, target: str, sent_at: float) -> None:
        try:
            response = await client.post(
                f"{target}/v1/chat/completions", json=self.body, headers=self.headers
            )
        except httpx.HTTPError:
            self.outcomes.append(Outcome(target, None, None, sent_at))
            return
        headers = response.headers
        self.outcomes.append(
            Outcome(
                target,
                response.status_code,
                headers.get("x-request-id"),
                sent_at,
                headers.get("x-gateway-provider"),
            )
        )
