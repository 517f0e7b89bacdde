"""The proxied endpoints, served straight from ASGI: POST /v1/chat/completions, /v1/completions,
/v1/embeddings, /v1/responses and /v1/messages, the gateway's hot path.

Litestar's per-request machinery (request and response objects, the handler signature model,
header containers, the exception middleware) is a measurable share of the gateway's CPU per
request (docs/performance.md), so the app (gateway.app) hands these requests to `ProxyFront.serve`
before Litestar routes anything. The front runs the `ProxyPipeline`, reads the body itself once
the key is checked, under the process's budget of bodies being read
(`gateway.api.front.request_body`), and sends the ASGI messages; a stream is relayed frame by frame
and stopped as soon as the client leaves, or stops taking what is sent
(`gateway.api.front.sse_relay`). A request with an `Idempotency-Key` runs once for its team's key,
its repeats answered from the store (`gateway.idempotency`). Litestar declares the same paths only
to document them, and hands the front the spellings of them its router also takes
(`/v1/chat/completions/`): `ProxyFront.asgi`.
"""

from __future__ import annotations

from functools import partial

from litestar.di import NamedDependency
from litestar.params import SkipValidation
from litestar.types import ASGIApp, Receive, Scope, Send

from gateway.api.front.error_replies import (
    Asker,
    ErrorReply,
    error_body,
    gateway_error_reply,
    http_error_reply,
    internal_error_reply,
    request_id_header,
)
from gateway.api.front.request_body import BodyBudget, BodyTooLarge, ClientGone, RequestBody
from gateway.api.front.sse_relay import SSE, relay_sse
from gateway.errors import GatewayError
from gateway.idempotency import IDEMPOTENCY_HEADER, idempotent_request
from gateway.idempotency.service import ErrorAnswer
from gateway.providers.base import Endpoint
from gateway.proxy.exchange import ProxyExchange, ProxyResult
from gateway.services import Services

ENDPOINTS = {
    "/v1/chat/completions": Endpoint.CHAT,
    "/v1/completions": Endpoint.COMPLETIONS,
    "/v1/embeddings": Endpoint.EMBEDDINGS,
    "/v1/responses": Endpoint.RESPONSES,
    "/v1/messages": Endpoint.MESSAGES,
}
JSON = (b"content-type", b"application/json")
CLOSE = {"connection": "close"}


class ProxyFront:
    def __init__(self, max_body_bytes: int, max_buffered_body_bytes: int) -> None:
        self._max_body = max_body_bytes
        self.body_budget = BodyBudget(max_buffered_body_bytes)  # shared by every request of the process
        # The app's services while its lifespan has them open (set there), rather than read from
        # the app's state on every request.
        self.services: Services | None = None

    def asgi(self, endpoint: Endpoint) -> ASGIApp:
        """The front serving `endpoint`, as an ASGI app a Litestar handler may answer with."""
        return partial(self.serve, endpoint=endpoint)

    async def serve(self, scope: Scope, receive: Receive, send: Send, endpoint: Endpoint) -> None:
        # Lower-cased here: ASGI asks servers for lower-case names, and the front does not rely on it.
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]
        }
        exchange = ProxyExchange()
        body: RequestBody | None = None
        services = self.services
        try:
            if services is None:  # before the app's lifespan started, or after it ended: a 500
                raise RuntimeError("The gateway's services are not open")
            body = RequestBody.of(receive, headers, self._max_body, self.body_budget)
            idempotency_key = headers.get(IDEMPOTENCY_HEADER)
            if idempotency_key is None:
                result = await services.pipeline.run(exchange, headers, body.read, endpoint)
            else:
                result = await _serve_once(services, exchange, headers, body, endpoint, idempotency_key)
        except GatewayError as exc:
            reply = gateway_error_reply(exc, _asker(exchange, scope, headers))
            return await _refuse(services, send, reply, body, scope["path"])
        except BodyTooLarge:
            reply = http_error_reply(413, None, _asker(exchange, scope, headers))
            return await _refuse(services, send, reply, body, scope["path"])
        except ClientGone:
            return None
        except Exception as exc:  # an OpenAI-shaped 500, never a bare traceback
            return await _reply(send, internal_error_reply(exc, _asker(exchange, scope, headers)), body)
        if result.stream is not None:
            write_timeout_s = services.settings.catalog.limits.stream_write_timeout_s
            await relay_sse(receive, send, _encoded(SSE, result.headers), result.stream, write_timeout_s)
        else:
            await _send(send, result.status, result.headers, result.body)
        return None


async def _serve_once(
    services: Services,
    exchange: ProxyExchange,
    headers: dict[str, str],
    body: RequestBody,
    endpoint: Endpoint,
    key: str,
) -> ProxyResult:
    """A request sent with an `Idempotency-Key`: run once for its team's key, its repeats given
    the first answer (gateway.idempotency). The key is checked, and the body read, first: the
    team scopes the key, the body is what a repeat must match."""
    pipeline = services.pipeline
    principal = exchange.principal = await pipeline.authenticate(headers, endpoint)
    raw = await body.read()
    path = "/v1/" + endpoint.value
    keyed = idempotent_request(principal.team_id, key, "POST", path, raw)
    run = partial(pipeline.answer, exchange, headers, principal, raw, endpoint)
    return await services.idempotency.serve(
        keyed, exchange.request_id, run, partial(_kept_error, path, exchange.request_id)
    )


def _kept_error(path: str, request_id: str, exc: GatewayError) -> ErrorAnswer:
    """An upstream's error as its client is answered (its log line is written already)."""
    headers = request_id_header(request_id) | exc.headers
    return ErrorAnswer(exc.status, headers, error_body(exc.body().error, exc.status, path))


# What a Litestar handler declares to hand its request to the front (gateway.app provides it).
FrontDependency = NamedDependency[SkipValidation[ProxyFront]]


async def _refuse(
    services: Services | None, send: Send, reply: ErrorReply, body: RequestBody | None, path: str
) -> None:
    """An error answer, counted when the gateway gave it before any upstream was tried."""
    if reply.refused and services is not None:
        services.metrics.count_refused(path, reply.status, reply.code)
    await _reply(send, reply, body)


def _asker(exchange: ProxyExchange, scope: Scope, headers: dict[str, str]) -> Asker:
    """Who a refusal answers, for its log line."""
    return Asker(exchange.request_id, scope["path"], headers.get("user-agent"), exchange.principal)


def _encoded(content_type: tuple[bytes, bytes], headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    encoded = [content_type]
    encoded += [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
    return encoded


async def _reply(send: Send, reply: ErrorReply, body: RequestBody | None) -> None:
    """An error answer. One given before the body was read in full says it closes the connection
    (RFC 9110, 10.1.1): the rest of the body is never read, and a client that asked for
    `100 Continue` learns not to send it. `body` is None when the headers announced more than
    the cap."""
    headers = reply.headers | CLOSE if body is None or body.unread else reply.headers
    await _send(send, reply.status, headers, reply.body)


async def _send(send: Send, status: int, headers: dict[str, str], body: bytes) -> None:
    """A whole response: its head with the body's length, then the body."""
    encoded = _encoded(JSON, headers)
    encoded.append((b"content-length", b"%d" % len(body)))
    await send({"type": "http.response.start", "status": status, "headers": encoded})
    await send({"type": "http.response.body", "body": body, "more_body": False})
