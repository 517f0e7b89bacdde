"""`/v1/gateway/batches/{id}`: a batch's pin and running totals, scoped to the caller's team."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
from litestar import Request, Response, delete, get
from litestar.params import FromPath

from gateway.api.openapi_bodies import documented, json_schema
from gateway.errors import InvalidRequest, NotFound
from gateway.metering.pricing import money_str
from gateway.metering.reports import batch_totals
from gateway.routing.batch_pin import BatchPin
from gateway.routing.directives import BATCH_ID
from gateway.services import services_of


class BatchView(msgspec.Struct):
    id: str
    provider: str
    region: str
    deployment: str
    model: str
    created: int
    last_used: int
    confirmed: bool
    moves: int
    requests: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    cost: str
    object: str = "gateway.batch"


class BatchDeleted(msgspec.Struct):
    id: str
    deleted: bool = True
    object: str = "gateway.batch"


def _batch_id(batch_id: str) -> str:
    if not BATCH_ID.fullmatch(batch_id):
        raise InvalidRequest("A batch id is 1-128 characters of A-Za-z0-9._:-", param="batch_id")
    return batch_id


async def _live_pin(request: Request, batch_id: str) -> tuple[str, BatchPin]:
    services = services_of(request)
    principal = await services.key_cache.authenticate(request.headers.get("authorization"))
    pin = await services.pins.touch(principal.team_id, _batch_id(batch_id), recent=False)
    if pin is None:
        raise NotFound(f"No live batch '{batch_id}' for this team", param="batch_id", code="batch_not_found")
    return principal.team_id, pin


@get("/v1/gateway/batches/{batch_id:str}", operation_class=documented(response=json_schema(BatchView)))
async def get_batch(request: Request, batch_id: FromPath[str]) -> Response[bytes]:
    team_id, pin = await _live_pin(request, batch_id)
    async with services_of(request).sessions() as session:
        since = datetime.fromtimestamp(pin.created_at, UTC)
        totals = await batch_totals(session, team_id, batch_id, since)
    view = BatchView(
        id=batch_id,
        provider=pin.provider,
        region=pin.region,
        deployment=pin.deployment,
        model=pin.model,
        created=int(pin.created_at),
        last_used=int(pin.last_used_at),
        confirmed=pin.confirmed,
        moves=pin.moves,
        requests=totals.requests,
        prompt_tokens=totals.prompt_tokens,
        completion_tokens=totals.completion_tokens,
        cached_tokens=totals.cached_tokens,
        cache_write_tokens=totals.cache_write_tokens,
        cost=money_str(totals.cost),
    )
    return Response(msgspec.json.encode(view), media_type="application/json")


@delete(
    "/v1/gateway/batches/{batch_id:str}",
    status_code=200,
    operation_class=documented(response=json_schema(BatchDeleted)),
)
async def delete_batch(request: Request, batch_id: FromPath[str]) -> Response[bytes]:
    services = services_of(request)
    principal = await services.key_cache.authenticate(request.headers.get("authorization"))
    if not await services.pins.delete(principal.team_id, _batch_id(batch_id)):
        raise NotFound(f"No live batch '{batch_id}' for this team", param="batch_id", code="batch_not_found")
    return Response(msgspec.json.encode(BatchDeleted(batch_id)), media_type="application/json")


BATCH_HANDLERS = [get_batch, delete_batch]
