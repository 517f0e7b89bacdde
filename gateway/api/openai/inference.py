"""The OpenAI inference surface: chat completions, completions and embeddings, served by the front
(gateway.api.front.proxy) and declared here for the OpenAPI document; and the models a key may use.
"""

from __future__ import annotations

import msgspec
from litestar import Response, get, post
from litestar.params import FromPath
from litestar.types import ASGIApp

from gateway.api.front.proxy import FrontDependency
from gateway.api.openapi import DIRECTIVE_HEADERS, documented, json_schema, openai_body
from gateway.api.team_key import PrincipalDependency
from gateway.auth.principal import Principal
from gateway.errors import ModelNotFound
from gateway.providers.base import Endpoint
from gateway.schemas.openai import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    Model,
    ModelList,
)
from gateway.services import Services, ServicesDependency

JSON = "application/json"
ANY_OBJECT = {"type": "object"}
# The chat body as documented: `messages` never empty (gateway.proxy.request refuses an empty list).
_CHAT_BODY = openai_body(ChatCompletionRequest)
_CHAT_BODY["properties"]["messages"] = {**_CHAT_BODY["properties"]["messages"], "minItems": 1}


# The front serves these paths before Litestar routes anything; a handler here runs only for the
# other spellings of a path Litestar's router takes (a trailing slash), and hands them to the front.
@post(
    "/v1/chat/completions",
    status_code=200,
    operation_class=documented(body=_CHAT_BODY, response=ANY_OBJECT, streams=True, headers=DIRECTIVE_HEADERS),
)
async def chat_completions(front: FrontDependency) -> ASGIApp:
    return front.asgi(Endpoint.CHAT)


@post(
    "/v1/completions",
    status_code=200,
    operation_class=documented(
        body=openai_body(CompletionRequest), response=ANY_OBJECT, streams=True, headers=DIRECTIVE_HEADERS
    ),
)
async def completions(front: FrontDependency) -> ASGIApp:
    return front.asgi(Endpoint.COMPLETIONS)


@post(
    "/v1/embeddings",
    status_code=200,
    operation_class=documented(
        body=openai_body(EmbeddingRequest), response=ANY_OBJECT, headers=DIRECTIVE_HEADERS
    ),
)
async def embeddings(front: FrontDependency) -> ASGIApp:
    return front.asgi(Endpoint.EMBEDDINGS)


def _models_for(services: Services, principal: Principal) -> list[Model]:
    created = int(services.started_at)
    return [
        Model(id=alias, created=created, owned_by=deployments[0].provider.name)
        for alias, deployments in services.table.by_model.items()  # each model, and each of its aliases
        if principal.may_use_model(alias) or principal.may_use_model(deployments[0].model)
    ]


@get("/v1/models", operation_class=documented(response=json_schema(ModelList)))
async def list_models(services: ServicesDependency, principal: PrincipalDependency) -> Response[bytes]:
    return Response(msgspec.json.encode(ModelList(_models_for(services, principal))), media_type=JSON)


@get("/v1/models/{model_id:path}", operation_class=documented(response=json_schema(Model)))
async def get_model(
    services: ServicesDependency, principal: PrincipalDependency, model_id: FromPath[str]
) -> Response[bytes]:
    model_id = model_id.lstrip("/")
    for model in _models_for(services, principal):
        if model.id == model_id:
            return Response(msgspec.json.encode(model), media_type=JSON)
    raise ModelNotFound(f"The model '{model_id}' does not exist", param="model")


OPENAI_HANDLERS = [chat_completions, completions, embeddings, list_models, get_model]
