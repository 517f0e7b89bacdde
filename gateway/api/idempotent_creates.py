"""A create answered by a Litestar handler (a batch, a file) run once for its team's
`Idempotency-Key`: a repeat within the window gets the first's JSON answer and request id
(gateway.idempotency). The proxied endpoints do the same in `gateway.api.front.proxy`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from litestar import Request, Response
from litestar.enums import MediaType

from gateway.api.front.error_replies import request_id_header
from gateway.idempotency import IDEMPOTENCY_HEADER, idempotent_request
from gateway.idempotency.service import IdempotentRequests
from gateway.proxy.exchange import ProxyResult


async def created_once(
    request: Request,
    idempotency: IdempotentRequests,
    team_id: str,
    fingerprinted: bytes,
    create: Callable[[], Awaitable[bytes]],
) -> Response[bytes]:
    """`create()`'s JSON answer; with an `Idempotency-Key`, the first one's for the same team, key
    and `fingerprinted` request (what makes two creates the same: the body, or what a body with a
    boundary of its own carries)."""
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is None:
        return Response(await create(), media_type=MediaType.JSON)
    keyed = idempotent_request(team_id, key, request.method, request.url.path, fingerprinted)
    request_id: str = request.state.request_id  # gateway.api.request_ids

    async def run() -> ProxyResult:
        return ProxyResult(request_id_header(request_id), body=await create())

    answer = await idempotency.serve(keyed, request_id, run)
    return Response(answer.body, status_code=answer.status, headers=answer.headers, media_type=MediaType.JSON)
