"""OpenAI's Responses API: `POST /v1/responses`, served by the front (gateway.api.front.proxy) and
declared here for the OpenAPI document (passed through or translated to chat per provider:
gateway.dialects.responses.adapter); and the team's stored Responses (gateway.responses_store):
`GET` and `DELETE /v1/responses/{id}`, `GET /v1/responses/{id}/input_items`, and
`POST /v1/responses/input_tokens`, the input's token count (the gateway's estimate).

A stored Response of another team is a 404, exactly as a missing one.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.params import FromPath
from litestar.types import ASGIApp

from gateway.api.front.proxy import FrontDependency
from gateway.api.openapi import DIRECTIVE_HEADERS, documented, json_schema, openai_body
from gateway.api.query_params import documented_limit, documented_query, page_size, path_id, text_param
from gateway.api.team_key import PrincipalDependency
from gateway.errors import InvalidRequest, UnknownResponse
from gateway.limits import Reservation
from gateway.providers.base import Endpoint
from gateway.proxy.prompt_text import prompt_size
from gateway.proxy.request import parse_request
from gateway.responses_store.items import items_page
from gateway.responses_store.store import StoredRecord
from gateway.routing.directives import parse_directives
from gateway.routing.policy import eligible_deployments
from gateway.schemas.responses import InputItemList, InputTokens, ResponseDeleted, ResponsesRequest
from gateway.schemas.responses import Response as ResponseObject
from gateway.services import Services, ServicesDependency

JSON = "application/json"
MAX_PAGE, DEFAULT_PAGE = 100, 20  # OpenAI's bounds for input_items
_ITEMS = msgspec.json.Decoder(list[dict[str, Any]])
_NO_MODEL = "(none)"  # stands for the model an input_tokens request may leave out


@post(
    "/v1/responses",
    status_code=200,
    operation_class=documented(
        body=openai_body(ResponsesRequest),
        response=json_schema(ResponseObject),
        streams=True,
        headers=DIRECTIVE_HEADERS,
    ),
)
async def create_response(front: FrontDependency) -> ASGIApp:
    # Runs only for a spelling of the path the front does not take itself (a trailing slash).
    return front.asgi(Endpoint.RESPONSES)


def _not_found(response_id: str) -> UnknownResponse:
    """OpenAI's 404 for an id: missing, deleted, or another team's, alike."""
    return UnknownResponse(f"Response with id '{response_id[:255]}' not found.", param="response_id")


async def _stored(services: Services, team_id: str, response_id: str) -> StoredRecord:
    checked = path_id(response_id, "response_id")
    record = await services.responses.store.get(team_id, checked)
    if record is None:
        raise _not_found(checked)
    return record


@get("/v1/responses/{response_id:str}", operation_class=documented(response=json_schema(ResponseObject)))
async def retrieve_response(
    services: ServicesDependency, principal: PrincipalDependency, response_id: FromPath[str]
) -> Response[bytes]:
    """The team's stored Response, as it was answered."""
    record = await _stored(services, principal.team_id, response_id)
    return Response(record.response, media_type=JSON)


@delete(
    "/v1/responses/{response_id:str}",
    status_code=200,
    operation_class=documented(response=json_schema(ResponseDeleted)),
)
async def delete_response(
    services: ServicesDependency, principal: PrincipalDependency, response_id: FromPath[str]
) -> Response[bytes]:
    checked = path_id(response_id, "response_id")
    if not await services.responses.store.delete(principal.team_id, checked):
        raise _not_found(checked)
    return Response(msgspec.json.encode(ResponseDeleted(id=checked)), media_type=JSON)


def _newest_first(order: str | None) -> bool:
    if order not in (None, "asc", "desc"):
        raise InvalidRequest("order must be asc or desc.", param="order")
    return order != "asc"


@get(
    "/v1/responses/{response_id:str}/input_items",
    operation_class=documented(response=json_schema(InputItemList)),
)
async def list_input_items(
    services: ServicesDependency,
    principal: PrincipalDependency,
    response_id: FromPath[str],
    limit: Annotated[str | None, documented_limit(MAX_PAGE, DEFAULT_PAGE)] = None,
    order: Annotated[
        str | None, documented_query("asc, or desc (the default: the last item first).", enum=["asc", "desc"])
    ] = None,
    after: Annotated[str | None, documented_query("The last item id of the previous page.")] = None,
    before: Annotated[str | None, documented_query("The first item id of the next page.")] = None,
    include: Annotated[
        str | None, documented_query("Accepted for OpenAI's clients; items are listed as stored.")
    ] = None,
) -> Response[bytes]:
    """The input items of the request that made the Response (its own, not those it continues)."""
    record = await _stored(services, principal.team_id, response_id)
    page = items_page(
        _ITEMS.decode(record.input_items),
        limit=page_size(limit, "limit", default=DEFAULT_PAGE, maximum=MAX_PAGE),
        newest_first=_newest_first(order),
        after=text_param(after, "after"),
        before=text_param(before, "before"),
    )
    return Response(msgspec.json.encode(page), media_type=JSON)


@post(
    "/v1/responses/input_tokens",
    status_code=200,
    operation_class=documented(body=openai_body(ResponsesRequest), response=json_schema(InputTokens)),
)
async def count_input_tokens(
    request: Request, services: ServicesDependency, principal: PrincipalDependency
) -> Response[bytes]:
    """The tokens the request's input would take (with the conversation a previous_response_id
    continues): the gateway's estimate, said in `x-gateway-token-count`. Nothing goes upstream:
    the estimate serves every provider alike, and costs no upstream call."""
    raw, model_given = _with_model(await request.body())
    parsed = parse_request(raw, Endpoint.RESPONSES, services.settings.catalog.limits.max_messages)
    if model_given:  # one the key may use, as when the request is sent
        directives = parse_directives(request.headers, parsed.gateway_object)
        eligible_deployments(parsed.model, directives, principal, services.table)
    # a request like any other for the key's and team's rate limits (it reserves no tokens)
    admission = await services.limiter.admit(principal, Reservation())
    body = await services.responses.conversation(principal.team_id, parsed.body)
    typed = msgspec.convert(body, ResponsesRequest)
    count = InputTokens(input_tokens=prompt_size(typed).tokens)
    headers = {"x-request-id": request.state.request_id, "x-gateway-token-count": "estimated"}
    headers |= admission.headers
    return Response(msgspec.json.encode(count), media_type=JSON, headers=headers)


def _with_model(raw: bytes) -> tuple[bytes, bool]:
    """The body with a `model`, and whether it had one: optional here, as at OpenAI (the estimate
    does not depend on it)."""
    try:
        body = msgspec.json.decode(raw) if raw else None
    except msgspec.DecodeError:
        raise InvalidRequest("The request body is not valid JSON") from None
    if isinstance(body, dict) and "model" not in body:
        return msgspec.json.encode({**body, "model": _NO_MODEL}), False
    return raw, True


RESPONSES_HANDLERS = [
    create_response,
    retrieve_response,
    delete_response,
    list_input_items,
    count_input_tokens,
]
