"""POST /v1/responses, OpenAI's Responses API: documented here, served by the proxy pipeline
(passed through or translated to chat per provider: gateway.dialects.responses.adapter)."""

from __future__ import annotations

from litestar import Request, Response, post
from litestar.response import Stream

from gateway.api.openai.inference import _proxy
from gateway.api.openapi_bodies import DIRECTIVE_HEADERS, documented, json_schema, openai_body
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
async def create_response(request: Request) -> Response[bytes] | Stream:
    return await _proxy(request, Endpoint.RESPONSES)


RESPONSES_HANDLERS = [create_response]
