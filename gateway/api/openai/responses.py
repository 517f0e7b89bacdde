"""POST /v1/responses, OpenAI's Responses API: served by the front (gateway.api.front.proxy) and
declared here for the OpenAPI document (passed through or translated to chat per provider:
gateway.dialects.responses.adapter)."""

from __future__ import annotations

from litestar import post
from litestar.types import ASGIApp

from gateway.api.front.proxy import FrontDependency
from gateway.api.openapi import DIRECTIVE_HEADERS, documented, json_schema, openai_body
from gateway.providers.base import Endpoint
from gateway.schemas.responses import Response as ResponseObject
from gateway.schemas.responses import ResponsesRequest


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


RESPONSES_HANDLERS = [create_response]
