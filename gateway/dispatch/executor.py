"""The executor: the one owner of the upstream HTTP clients. Sends, retries, streams.

Network upstreams go through `http1.UpstreamPool`; the in-process `mock` provider through an
httpx transport (`httpx_bridge`). Both raise only the gateway's own errors. The executor asks a
provider adapter to build each upstream request and to parse what comes back, retries retryable
failures on the same deployment with backoff (honouring `Retry-After` up to a cap), and records
each outcome on the health board.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final, Protocol, TypeVar

from gateway.dispatch.http1 import UpstreamPool
from gateway.dispatch.sse import SSEDecoder
from gateway.dispatch.stream import OpenStream
from gateway.errors import UpstreamError
from gateway.providers.base import (
    ProviderAdapter,
    UpstreamCall,
    UpstreamRequest,
    UpstreamResponse,
)
from gateway.providers.registry import adapter_for
from gateway.routing.deployment import Deployment
from gateway.routing.health import HealthBoard
from gateway.routing.policy import rendezvous_pick
from gateway.settings import Catalog, Provider, ProviderKind, RetrySettings

MOCK_BASE_URL = "http://mock.invalid/v1"
T = TypeVar("T")
# Read once: an Enum's members are read through EnumType's __getattr__ hook on CPython 3.11
# (see gateway.providers.openai).
_MOCK: Final = ProviderKind.MOCK

# Module attributes read once into statics (Final): `time.perf_counter` read in a function is a
# module-attribute lookup per call in the compiled build (docs/performance.md).
_perf_counter: Final = time.perf_counter


class Reply(Protocol):
    """An upstream's answer: status and headers (lower-case names), then the body as it arrives."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    async def next_chunk(self) -> bytes | None:
        """The next piece of the body as it arrives; None at its end."""
        ...

    async def read(self, limit: int) -> bytes:
        """The whole body; UpstreamTooLarge once it passes `limit` bytes."""
        ...

    async def aclose(self) -> None: ...


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
    """One request counted as in flight on a deployment until `release()` (idempotent)."""

    __slots__ = ("_counts", "_deployment", "_held")

    def __init__(self, counts: dict[str, int], deployment: str) -> None:
        self._counts, self._deployment, self._held = counts, deployment, True
        counts[deployment] = counts.get(deployment, 0) + 1

    def __enter__(self) -> InFlight:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()

    def release(self) -> None:
        if self._held:
            self._held = False
            self._counts[self._deployment] -= 1


@dataclass(slots=True)
class Attempts:
    """What happened while sending one request: counted for logs, metering and headers."""

    count: int
    upstream_s: float  # time spent waiting on the upstream (the gateway's overhead excludes it)
    ttft_s: float | None
    errors: list[str]

    def __init__(self) -> None:  # written out: dataclasses' own is interpreted (ProxyContext)
        self.count = 0
        self.upstream_s = 0.0
        self.ttft_s = None
        self.errors = []


class Executor:
    def __init__(self, catalog: Catalog, health: HealthBoard, rng: random.Random | None = None) -> None:
        self._retry = catalog.retry
        self._max_response = catalog.limits.max_upstream_response_bytes
        self._health = health
        self._rng = rng or random.Random()
        # Per provider, resolved once: `Provider.urls` and `adapter_for` are interpreted (settings.py
        # defines Structs; the registry imports every adapter), two calls a request otherwise.
        self._urls = {p.name: p.urls or (MOCK_BASE_URL,) for p in catalog.providers}
        self._adapters = {p.name: adapter_for(p.kind) for p in catalog.providers}
        self._round_robin = {name: itertools.cycle(urls) for name, urls in self._urls.items()}
        self._network: UpstreamClient = UpstreamPool()
        self._mock: UpstreamClient | None = None
        if any(p.kind is _MOCK for p in catalog.providers):
            from gateway.dispatch.httpx_bridge import HttpxUpstream
            from gateway.mockupstream.behaviour import MockBehaviour
            from gateway.mockupstream.transport import InProcessMockTransport

            self._mock = HttpxUpstream(InProcessMockTransport(MockBehaviour()))

    async def aclose(self) -> None:
        await self._network.aclose()
        if self._mock is not None:
            await self._mock.aclose()

    def _client_for(self, provider: Provider) -> UpstreamClient:
        if provider.kind is _MOCK and self._mock is not None:
            return self._mock
        return self._network

    def _base_url(self, provider: Provider, cache_key: str | None) -> str:
        urls = self._urls.get(provider.name) or provider.urls or (MOCK_BASE_URL,)
        if len(urls) == 1:
            return urls[0]
        if cache_key is not None:
            return rendezvous_pick(cache_key, urls)  # replica affinity keeps a prefix cache warm
        return next(self._round_robin[provider.name])

    def _build(self, deployment: Deployment, call: UpstreamCall) -> tuple[ProviderAdapter, UpstreamRequest]:
        provider = deployment.provider
        adapter = self._adapters.get(provider.name) or adapter_for(provider.kind)
        return adapter, adapter.build_request(call, provider, self._base_url(provider, call.cache_key))

    async def _open(self, provider: Provider, request: UpstreamRequest) -> Reply:
        return await self._client_for(provider).request(
            request.method,
            request.url,
            request.headers,
            request.content,
            connect_timeout=provider.connect_timeout_s,
            read_timeout=provider.timeout_s,
        )

    async def send(
        self, deployment: Deployment, call: UpstreamCall, attempts: Attempts, max_attempts: int
    ) -> UpstreamResponse:
        """A non-streaming request, retried on this deployment while the failure allows."""
        adapter, request = self._build(deployment, call)

        async def once() -> UpstreamResponse:
            with self._in_flight(deployment.id):
                body = await self._exchange(deployment.provider, request, adapter)
            return adapter.parse_response(call, body)

        return await self._retrying(deployment, attempts, max_attempts, once)

    async def _retrying(
        self,
        deployment: Deployment,
        attempts: Attempts,
        max_attempts: int,
        once: Callable[[], Awaitable[T]],
    ) -> T:
        """Run `once` until it succeeds, fails for good, or the attempts on this deployment run out."""
        for attempt in range(1, max_attempts + 1):
            attempts.count += 1
            started = _perf_counter()
            failure: UpstreamError | None = None
            try:
                result = await once()
            except UpstreamError as exc:
                failure = exc
            if failure is not None:  # after the handler: no await inside one (setup.py, HOT_PATH)
                attempts.upstream_s += _perf_counter() - started
                attempts.errors.append(failure.code or failure.type)
                await self._on_failure(deployment, failure)
                if not failure.retryable or attempt == max_attempts:
                    raise failure
                await asyncio.sleep(self._backoff(attempt, failure))
                continue
            elapsed = _perf_counter() - started
            attempts.upstream_s += elapsed
            attempts.ttft_s = elapsed
            await self._health.record_success(deployment.id)
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    def _in_flight(self, deployment_id: str) -> InFlight:
        return InFlight(self._health.in_flight, deployment_id)

    async def _exchange(
        self, provider: Provider, request: UpstreamRequest, adapter: ProviderAdapter
    ) -> bytes:
        reply = await self._open(provider, request)
        failure: BaseException | None = None
        try:
            body = await self._read_capped(reply)
        except BaseException as exc:
            failure = exc
        await reply.aclose()  # whatever the read did, after the handler (setup.py, HOT_PATH)
        if failure is not None:
            raise failure
        if reply.status >= 400:
            raise adapter.classify_error(reply.status, body, reply.headers)
        return body

    async def _read_capped(self, reply: Reply) -> bytes:
        return await reply.read(self._max_response)

    async def open_stream(
        self, deployment: Deployment, call: UpstreamCall, attempts: Attempts, max_attempts: int
    ) -> OpenStream:
        """Start a stream and read it up to its first frames; failures before then may be retried."""
        adapter, request = self._build(deployment, call)

        async def once() -> OpenStream:
            return await self._first_frames(request, adapter, deployment, call)

        return await self._retrying(deployment, attempts, max_attempts, once)

    async def _first_frames(
        self, request: UpstreamRequest, adapter: ProviderAdapter, deployment: Deployment, call: UpstreamCall
    ) -> OpenStream:
        in_flight = self._in_flight(deployment.id)
        try:
            reply = await self._open(deployment.provider, request)
        except BaseException:
            in_flight.release()
            raise
        try:
            if reply.status >= 400:
                body = await self._read_capped(reply)
                raise adapter.classify_error(reply.status, body, reply.headers)
            stream = OpenStream(
                deployment,
                adapter.stream_translator(call),
                reply,
                SSEDecoder(),
                in_flight,
                self._max_response,
            )
            await stream.read_first_frames()
            return stream
        except BaseException as exc:
            in_flight.release()
            failure = exc
        await reply.aclose()  # after the handler: no await inside one (setup.py, HOT_PATH)
        raise failure

    async def _on_failure(self, deployment: Deployment, exc: UpstreamError) -> None:
        if exc.retryable:
            await self._health.record_failure(deployment.id)

    def _backoff(self, attempt: int, exc: UpstreamError) -> float:
        if exc.retry_after_s is not None:
            return min(exc.retry_after_s, self._retry.retry_after_cap_s)
        return backoff_delay(self._retry, attempt, self._rng)


def backoff_delay(retry: RetrySettings, attempt: int, rng: random.Random) -> float:
    """Exponential backoff with full jitter between half and all of the step."""
    step = min(retry.backoff_max_s, retry.backoff_base_s * 2.0 ** (attempt - 1))
    return float(step * (0.5 + rng.random() / 2))
