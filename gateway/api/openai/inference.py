"""The OpenAI-compatible surface: thin handlers that parse, call the proxy service, serialize."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import anyio
import msgspec
from litestar import Request, Response, get, post
from litestar.params import FromPath
from litestar.response import Stream

from gateway.api.openapi_bodies import DIRECTIVE_HEADERS, documented, json_schema, openai_body
from gateway.errors import ModelNotFound
from gateway.providers.base import Endpoint
from gateway.proxy.exchange import ProxyExchange
from gateway.proxy.relay import StreamRelay
from gateway.schemas.openai import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    Model,
    ModelList,
)
from gateway.services import Services, services_of

JSON = "application/json"
METER_GRACE_S = 5.0  # how long a cancelled stream may take to close upstream and record its usage


async def _proxy(request: Request, endpoint: Endpoint) -> Response[bytes] | Stream:
    exchange = ProxyExchange()
    try:
        # `request.body` is awaited by the pipeline once the key is checked, not before
        result = await services_of(request).pipeline.run(exchange, request.headers, request.body, endpoint)
    finally:  # the error handlers read these
        request.state.request_id, request.state.principal = exchange.request_id, exchange.principal
    if result.stream is not None:
        return Stream(_frames(result.stream), media_type="text/event-stream", headers=result.headers)
    return Response(result.body, media_type=JSON, headers=result.headers)


async def _frames(relay: StreamRelay) -> AsyncGenerator[bytes, None]:
    """The relay as Litestar's `Stream` reads it; closed (and metered) however the response ends.
    Litestar cancels a stream whose client left through an anyio cancel scope, which cancels again
    at every await until the scope exits: the clean-up runs shielded from it."""
    frames = relay.frames()
    try:
        async for frame in frames:
            yield frame
    finally:
        with anyio.move_on_after(METER_GRACE_S, shield=True):
            try:
                await frames.aclose()
            finally:
                await relay.close()


_ANY_OBJECT = {"type": "object"}
# The chat body as documented: `messages` never empty (gateway.proxy.request refuses an empty list).
_CHAT_BODY = openai_body(ChatCompletionRequest)
_CHAT_BODY["properties"]["messages"] = {**_CHAT_BODY["properties"]["messages"], "minItems": 1}


@post(
    "/v1/chat/completions",
    status_code=200,
    operation_class=documented(
        body=_CHAT_BODY, response=_ANY_OBJECT, streams=True, headers=DIRECTIVE_HEADERS
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
