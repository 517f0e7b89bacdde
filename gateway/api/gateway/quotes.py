"""`POST /v1/gateway/batches/quote`: what a batch would cost and take on each lane the team may use
(`gateway.jobs.quotes`), for an uploaded input file or lines given inline.

Reading an input file takes one of the process's file slots (`files.max_concurrent`), as a batch
create does. `X-Gateway-Region` / `X-Gateway-Provider` narrow the lanes as they pin a job.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response, post

from gateway.api.admin.body import decode_body
from gateway.api.openapi import DIRECTIVE_HEADERS, documented, json_schema
from gateway.api.team_key import PrincipalDependency
from gateway.errors import InvalidRequest
from gateway.jobs import repository as batches
from gateway.jobs.input_lines import MAX_CUSTOM_ID, MAX_REQUESTS
from gateway.jobs.quotes.quote import Quoter, request_lines
from gateway.schemas.quotes import BatchQuote, QuoteRequest
from gateway.services import Services, ServicesDependency

JSON = "application/json"
_PIN_HEADERS = [h for h in DIRECTIVE_HEADERS if h["name"] in ("X-Gateway-Region", "X-Gateway-Provider")]


def quoter(services: Services) -> Quoter:
    """A quoter on this process's catalog, database and scheduler queues."""
    queues = services.executor.scheduler.providers

    def queued(provider: str) -> int:
        queue = queues.get(provider)
        return 0 if queue is None else queue.queued()

    return Quoter(services.settings.catalog, services.table, queued)


def _request_body() -> dict[str, Any]:
    """QuoteRequest's schema with what the handler holds it to: a file or lines (one of them), the
    endpoints served, windows of 1h to 24h, and each line shaped as an input file's. What lines
    must agree on between them (one model, each custom_id once) no schema says: such lines are a
    400 naming the line."""
    schema = json_schema(QuoteRequest)
    fields = schema["properties"]
    fields["input_file_id"] = {"type": "string", "minLength": 1}
    fields["endpoint"] = {"enum": sorted(batches.ENDPOINTS)}
    fields["completion_window"] = {"enum": [f"{hours}h" for hours in range(1, 25)]}
    line = {
        "type": "object",
        "required": ["custom_id", "method", "url", "body"],
        "properties": {
            "custom_id": {"type": "string", "pattern": f"^[^\\x00-\\x1f\\x7f]{{1,{MAX_CUSTOM_ID}}}$"},
            "method": {"enum": ["POST"]},
            "url": {"enum": sorted(batches.ENDPOINTS)},
            "body": {"type": "object", "required": ["model"], "properties": {"model": {"type": "string"}}},
        },
    }
    fields["lines"] = {"type": "array", "minItems": 1, "maxItems": MAX_REQUESTS, "items": line}
    schema["oneOf"] = [{"required": ["input_file_id"]}, {"required": ["lines"]}]
    return schema


@post(
    "/v1/gateway/batches/quote",
    status_code=200,
    operation_class=documented(body=_request_body(), response=json_schema(BatchQuote), headers=_PIN_HEADERS),
)
async def quote_batch(
    request: Request, services: ServicesDependency, principal: PrincipalDependency
) -> Response[bytes]:
    spec = decode_body(await request.body(), QuoteRequest)
    if spec.endpoint not in batches.ENDPOINTS:
        raise InvalidRequest(
            f"The endpoint {spec.endpoint!r} is not supported for batches.",
            param="endpoint",
            code="unsupported",
        )
    directives = batches.job_directives(request.headers, None)
    async with services.file_slots.held(), services.sessions() as session:
        lines, model = await request_lines(session, principal, spec, services.file_store)
        quote = await quoter(services).quote(
            session,
            principal,
            directives,
            lines,
            model=model,
            endpoint=spec.endpoint,
            window=spec.completion_window,
        )
    return Response(msgspec.json.encode(quote), media_type=JSON)


QUOTE_HANDLERS = [quote_batch]
