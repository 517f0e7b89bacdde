"""The OpenAI-compatible surface: thin handlers that parse, call the proxy service, serialize."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field

import msgspec
import structlog
from litestar import Request, Response, get, post
from litestar.params import FromPath
from litestar.response import Stream

from gateway.api.openapi_bodies import DIRECTIVE_HEADERS, documented, json_schema, openai_body
from gateway.auth.principal import Principal
from gateway.errors import GatewayError, ModelNotFound
from gateway.limits import estimate_tokens, requested_max_tokens
from gateway.providers.base import Endpoint
from gateway.proxy.request import parse_request
from gateway.proxy.service import ProxyContext
from gateway.routing.deployment import Deployment
from gateway.routing.directives import parse_directives
from gateway.schemas.openai import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    Model,
    ModelList,
)
from gateway.services import Services, services_of

log = structlog.get_logger("gateway.request")
JSON = "application/json"
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

    request_id: str = field(default_factory=new_request_id)
    principal: Principal | None = None


@dataclass(frozen=True, slots=True)
class ProxyResult:
    headers: dict[str, str]
    body: bytes = b""
    frames: AsyncGenerator[bytes, None] | None = None  # an SSE stream instead of a body


async def run_proxy(
    services: Services, exchange: ProxyExchange, headers: Mapping[str, str], raw: bytes, endpoint: Endpoint
) -> ProxyResult:
    """One proxied request, from its headers (lower-case names) and body to the answer's parts.

    Shared by the Litestar handlers below and the ASGI front (`gateway.api.proxy_asgi`)."""
    principal = exchange.principal = await services.key_cache.authenticate(headers.get("authorization"))
    parsed = parse_request(raw, endpoint, services.settings.catalog.limits.max_messages)
    directives = parse_directives(headers, parsed.gateway_object)
    estimated = estimate_tokens(len(raw), requested_max_tokens(parsed.body))
    admission = await services.limiter.admit(principal, estimated)
    ctx = ProxyContext(exchange.request_id, principal, parsed, directives, estimated_tokens=estimated)
    try:
        if parsed.stream:
            stream = await services.proxy.open_stream(ctx)
        else:
            completed = await services.proxy.complete(ctx)
    except GatewayError as exc:
        if ctx.attempts.count == 0:  # never reached an upstream: no usage event will settle it
            await services.limiter.release(principal, estimated)
        exc.headers = admission.headers | exc.headers
        raise
    overhead = time.perf_counter() - ctx.started - ctx.attempts.upstream_s
    services.metrics.observe_overhead(overhead)  # a stream's: up to its first frames
    if parsed.stream:
        answer = gateway_headers(exchange.request_id, stream.deployment, overhead) | SSE_HEADERS
        return ProxyResult(answer | admission.headers, frames=services.proxy.relay(ctx, stream))
    answer = gateway_headers(exchange.request_id, completed.deployment, overhead) | admission.headers
    return ProxyResult(answer, body=completed.response.body)


async def _proxy(request: Request, endpoint: Endpoint) -> Response[bytes] | Stream:
    exchange = ProxyExchange()
    try:
        result = await run_proxy(
            services_of(request), exchange, request.headers, await request.body(), endpoint
        )
    finally:  # the error handlers read these
        request.state.request_id, request.state.principal = exchange.request_id, exchange.principal
    if result.frames is not None:
        return Stream(result.frames, media_type="text/event-stream", headers=result.headers)
    return Response(result.body, media_type=JSON, headers=result.headers)


_ANY_OBJECT = {"type": "object"}


@post(
    "/v1/chat/completions",
    status_code=200,
    operation_class=documented(
        body=openai_body(ChatCompletionRequest), response=_ANY_OBJECT, streams=True, headers=DIRECTIVE_HEADERS
    ),
)
async def chat_completions(request: Request) -> Response[bytes] | Stream:
    return await _proxy(request, Endpoint.CHAT)


@post(
    "/v1/completions",
    status_code=200,
    operation_class=documented(
        body=openai_body(CompletionRequest), response=_ANY_OBJECT, streams=True, headers=DIRECTIVE_HEADERS
    ),
)
async def completions(request: Request) -> Response[bytes] | Stream:
    return await _proxy(request, Endpoint.COMPLETIONS)


@post(
    "/v1/embeddings",
    status_code=200,
    operation_class=documented(
        body=openai_body(EmbeddingRequest), response=_ANY_OBJECT, headers=DIRECTIVE_HEADERS
    ),
)
async def embeddings(request: Request) -> Response[bytes]:
    response = await _proxy(request, Endpoint.EMBEDDINGS)
    assert not isinstance(response, Stream)
    return response


def _models_for(services: Services, request: Request) -> list[Model]:
    principal = request.state.principal
    created = int(services.started_at)
    return [
        Model(id=alias, created=created, owned_by=deployments[0].provider.name)
        for alias, deployments in services.table.by_model.items()
        if principal.may_use_model(alias)
    ]


@get("/v1/models", operation_class=documented(response=json_schema(ModelList)))
async def list_models(request: Request) -> Response[bytes]:
    services = services_of(request)
    request.state.principal = await services.key_cache.authenticate(request.headers.get("authorization"))
    return Response(msgspec.json.encode(ModelList(_models_for(services, request))), media_type=JSON)


@get("/v1/models/{model_id:path}", operation_class=documented(response=json_schema(Model)))
async def get_model(request: Request, model_id: FromPath[str]) -> Response[bytes]:
    services = services_of(request)
    request.state.principal = await services.key_cache.authenticate(request.headers.get("authorization"))
    model_id = model_id.lstrip("/")
    for model in _models_for(services, request):
        if model.id == model_id:
            return Response(msgspec.json.encode(model), media_type=JSON)
    raise ModelNotFound(f"The model '{model_id}' does not exist", param="model")


OPENAI_HANDLERS = [chat_completions, completions, embeddings, list_models, get_model]
