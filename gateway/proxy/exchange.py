"""One proxied request from its headers and body to the answer's parts: `run_proxy`.

Shared by the ASGI front (`gateway.api.proxy_asgi`, the hot path) and the Litestar handlers
(`gateway.api.openai`, which document the endpoints and serve in-process clients).
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from gateway.auth.principal import Principal
from gateway.errors import GatewayError
from gateway.limits import estimate_tokens, requested_max_tokens
from gateway.providers.base import Endpoint
from gateway.proxy.relay import StreamRelay
from gateway.proxy.request import parse_request
from gateway.proxy.service import ProxyContext
from gateway.routing.deployment import Deployment
from gateway.routing.directives import parse_directives
from gateway.services import Services

# Module attributes read once into statics (Final): `time.perf_counter` read in a function is a
# module-attribute lookup per call in the compiled build (docs/performance.md).
_perf_counter: Final = time.perf_counter

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


class RequestIds:
    """`req_` + 16 random hex digits drawn once per process + a counter: unique across processes and
    restarts like a random id, without a `getrandom` call per request. A forked child draws anew."""

    def __init__(self) -> None:
        self.draw()

    def draw(self) -> None:
        self._prefix = "req_" + os.urandom(8).hex()
        self._counter = itertools.count()

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._counter):x}"


new_request_id = RequestIds()
os.register_at_fork(after_in_child=new_request_id.draw)


def gateway_headers(request_id: str, deployment: Deployment, overhead_s: float) -> dict[str, str]:
    return {
        "x-request-id": request_id,
        "x-gateway-provider": deployment.provider.name,
        "x-gateway-region": deployment.region,
        "x-gateway-overhead-ms": f"{overhead_s * 1000:.3f}",
    }


@dataclass(slots=True)
class ProxyExchange:
    """Who and what one proxied request is, as far as it got: error replies and logs read it."""

    request_id: str
    principal: Principal | None

    def __init__(self) -> None:  # written out: dataclasses' own is interpreted (ProxyContext)
        self.request_id = new_request_id()
        self.principal = None


@dataclass(slots=True)
class ProxyResult:
    headers: dict[str, str]
    body: bytes
    frames: StreamRelay | None  # an SSE stream instead of a body

    # A class of the compiled build, not a `record`: read on every request, where a Struct's
    # attribute is a generic lookup (gateway.proxy.request.ParsedRequest). `__init__` written out:
    # the one dataclasses generates is interpreted.
    def __init__(self, headers: dict[str, str], body: bytes = b"", frames: StreamRelay | None = None) -> None:
        self.headers = headers
        self.body = body
        self.frames = frames


async def run_proxy(
    services: Services, exchange: ProxyExchange, headers: Mapping[str, str], raw: bytes, endpoint: Endpoint
) -> ProxyResult:
    """One proxied request, from its headers (lower-case names) and body to the answer's parts."""
    principal = exchange.principal = await services.key_cache.authenticate(headers.get("authorization"))
    parsed = parse_request(raw, endpoint, services.settings.catalog.limits.max_messages)
    directives = parse_directives(headers, parsed.gateway_object)
    estimated = estimate_tokens(len(raw), requested_max_tokens(parsed.body))
    admission = await services.limiter.admit(principal, estimated)
    ctx = ProxyContext(exchange.request_id, principal, parsed, directives, estimated_tokens=estimated)
    failure: GatewayError | None = None
    try:
        if parsed.stream:
            stream = await services.proxy.open_stream(ctx)
        else:
            completed = await services.proxy.complete(ctx)
    except GatewayError as exc:
        exc.headers = admission.headers | exc.headers
        failure = exc
    if failure is not None:  # after the handler: no await inside one (setup.py, HOT_PATH)
        if ctx.attempts.count == 0:  # never reached an upstream: no usage event will settle it
            await services.limiter.release(principal, estimated)
        raise failure
    overhead = _perf_counter() - ctx.started - ctx.attempts.upstream_s
    services.metrics.observe_overhead(overhead)  # a stream's: up to its first frames
    if parsed.stream:
        answer = gateway_headers(exchange.request_id, stream.deployment, overhead) | SSE_HEADERS
        return ProxyResult(answer | admission.headers, frames=services.proxy.relay(ctx, stream))
    answer = gateway_headers(exchange.request_id, completed.deployment, overhead) | admission.headers
    return ProxyResult(answer, body=completed.response.body)
