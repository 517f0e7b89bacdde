"""Anthropic's Messages API surface: `POST /v1/messages` and `POST /v1/messages/count_tokens`.

`/v1/messages` is served by the front like chat completions (gateway.api.front.proxy) and declared
here for the OpenAPI document. count_tokens generates
nothing, but is admitted against the key's and team's limits like any request: an Anthropic-kind
deployment of the model counts the prompt with its own tokenizer, and that call has a usage record
at no cost; for a model no such deployment serves, the gateway answers its estimate, marked as one
(docs/messages.md), and records nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import msgspec
from litestar import Request, Response, post
from litestar.di import Provide
from litestar.types import ASGIApp

from gateway.api.front.proxy import FrontDependency
from gateway.api.openapi import DIRECTIVE_HEADERS, documented, error_responses, json_schema, openai_body
from gateway.api.team_key import PrincipalDependency, provide_messages_principal
from gateway.auth.principal import Principal
from gateway.dialects.messages.count import (
    count_request,
    counted_tokens,
    estimate_tokens,
    read_count_request,
)
from gateway.dialects.messages.native import NativeMessagesAdapter
from gateway.errors import UpstreamError
from gateway.limits import Reservation
from gateway.metering.events import UsageEvent, UsageSource, usage_event
from gateway.providers.base import Endpoint, TokenUsage
from gateway.routing.deployment import Deployment
from gateway.routing.directives import parse_directives
from gateway.routing.policy import eligible_deployments
from gateway.schemas.anthropic import (
    CountTokensRequest,
    ErrorEnvelope,
    MessageOut,
    MessagesRequest,
    TokenCount,
)
from gateway.services import Services, ServicesDependency
from gateway.settings import ProviderKind

JSON = "application/json"
API_KEY_HEADER: dict[str, Any] = {
    "name": "x-api-key",
    "in": "header",
    "required": False,
    "description": "The gateway key, as the anthropic SDK sends it (instead of Authorization: Bearer).",
    "schema": {"type": "string"},
}
HEADERS = [API_KEY_HEADER, *DIRECTIVE_HEADERS]
ERRORS = error_responses(json_schema(ErrorEnvelope), "Anthropic's error envelope")


@post(
    "/v1/messages",
    status_code=200,
    operation_class=documented(
        body=openai_body(MessagesRequest),
        response=json_schema(MessageOut),
        streams=True,
        headers=HEADERS,
        errors=ERRORS,
    ),
)
async def create_message(front: FrontDependency) -> ASGIApp:
    # Runs only for a spelling of the path the front does not take itself (a trailing slash).
    return front.asgi(Endpoint.MESSAGES)


def counting_deployment(eligible: Sequence[Deployment], open_circuits: Any) -> Deployment | None:
    """The first Anthropic-kind deployment (in preference order) whose circuit is not open."""
    return next(
        (d for d in eligible if d.provider.kind is ProviderKind.ANTHROPIC and d.id not in open_circuits),
        None,
    )


@post(
    "/v1/messages/count_tokens",
    status_code=200,
    operation_class=documented(
        body=openai_body(CountTokensRequest), response=json_schema(TokenCount), headers=HEADERS, errors=ERRORS
    ),
    dependencies={"principal": Provide(provide_messages_principal)},
)
async def count_message_tokens(
    request: Request, services: ServicesDependency, principal: PrincipalDependency
) -> Response[bytes]:
    request_id: str = request.state.request_id  # gateway.api.request_ids
    started = time.time(), time.perf_counter()
    body, typed, gateway_object = read_count_request(await request.body())
    directives = parse_directives(request.headers, gateway_object)
    eligible = eligible_deployments(typed.model, directives, principal, services.table)
    # A request like any other for the key's and team's limits (it reserves no tokens and costs
    # nothing): a refusal is the same 429, with its retry-after
    admission = await services.limiter.admit(principal, Reservation())
    counter = counting_deployment(eligible, services.health.open_circuits())
    headers = {"x-request-id": request_id} | admission.headers
    if counter is None:  # the gateway's own estimate: no upstream call, no usage record
        count = TokenCount(input_tokens=estimate_tokens(typed), estimated=True)
        headers["x-gateway-token-count"] = "estimated"
    else:
        betas = request.headers.get("anthropic-beta")
        count = await _counted_upstream(services, request_id, principal, counter, (body, betas), started)
        headers |= {
            "x-gateway-token-count": "upstream",
            "x-gateway-provider": counter.provider.name,
            "x-gateway-region": counter.region,
        }
    return Response(msgspec.json.encode(count), media_type=JSON, headers=headers)


async def _counted_upstream(
    services: Services,
    request_id: str,
    principal: Principal,
    counter: Deployment,
    asked: tuple[dict[str, Any], str | None],
    started: tuple[float, float],
) -> TokenCount:
    """The count of `counter`'s own count_tokens for `asked` (the body, the client's
    anthropic-beta header), recorded (at no cost) however the call ended."""
    body, betas = asked
    call = count_request(body, counter.provider, counter.upstream_model, counter.provider.urls[0], betas)
    try:
        input_tokens = counted_tokens(
            await services.executor.exchange(counter.provider, call, NativeMessagesAdapter())
        )
    except UpstreamError as exc:
        failed = count_record(request_id, principal, counter, started, exc.status, error_code=exc.code)
        await services.buffer.append(failed)
        raise
    await services.buffer.append(
        count_record(request_id, principal, counter, started, 200, input_tokens=input_tokens)
    )
    return TokenCount(input_tokens=input_tokens)


MESSAGES_HANDLERS = [create_message, count_message_tokens]


COUNT_ENDPOINT = "messages/count_tokens"  # the usage records' endpoint of a forwarded count


def count_record(
    request_id: str,
    principal: Principal,
    counter: Deployment,
    started: tuple[float, float],
    status: int,
    *,
    input_tokens: int = 0,
    error_code: str | None = None,
) -> UsageEvent:
    """The usage record of a count forwarded to `counter` (`started`: the request's unix time and
    perf_counter): the count as its prompt tokens, at no cost, since providers do not bill counting;
    it is recorded because it reached the upstream (and spent the operator's quota there)."""
    created_at, began = started
    return usage_event(
        request_id,
        created_at=created_at,
        team_id=principal.team_id,
        key_id=principal.key_id,
        deployment=counter,
        endpoint=COUNT_ENDPOINT,
        status=status,
        usage=TokenUsage(prompt_tokens=input_tokens),
        source=UsageSource.UPSTREAM if status == 200 else UsageSource.NONE,
        tariff=None,
        latency_ms=round((time.perf_counter() - began) * 1000, 3),
        error_code=error_code,
    )
