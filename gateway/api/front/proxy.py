"""The proxied endpoints served straight from ASGI, in front of the Litestar app.

POST /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses and /v1/messages are the
gateway's hot path.
Litestar's per-request machinery (request and response objects, the handler signature model,
header containers, the exception middleware) is a measurable share of the gateway's CPU per
request (docs/performance.md). This front runs the same `ProxyPipeline` as the Litestar handlers,
reads the body itself once the key is checked, under the process's budget of bodies being read
(`gateway.api.front.request_body`), and sends the ASGI messages; a stream is relayed frame by frame and
stopped as soon as the client leaves, or stops taking what is sent (`gateway.api.front.sse_relay`). Every other request goes to
Litestar, which keeps documenting these endpoints in the OpenAPI schema and serving them to
in-process clients.
"""

from __future__ import annotations

from typing import Any, cast

from litestar import Litestar
from litestar.types import Receive, Scope, Send

from gateway.api.front.error_replies import (
    Asker,
    ErrorReply,
    gateway_error_reply,
    http_error_reply,
    internal_error_reply,
)
from gateway.api.front.request_body import BodyBudget, BodyTooLarge, ClientGone, RequestBody
from gateway.api.front.sse_relay import SSE, relay_sse
from gateway.errors import GatewayError
from gateway.providers.base import Endpoint
from gateway.proxy.exchange import ProxyExchange
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
    def __init__(self, app: Litestar, max_body_bytes: int, max_buffered_body_bytes: int) -> None:
        self.app = app
        self._max_body = max_body_bytes
        self.body_budget = BodyBudget(max_buffered_body_bytes)  # shared by every request of the process
        # The app's services while its lifespan has them open, rather than read from the app's
        # state on every request.
        self._services: Services | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind: str = scope["type"]  # str: the ASGI types leave out the lifespan scope
        endpoint = ENDPOINTS.get(scope["path"]) if kind == "http" else None
        if endpoint is not None and scope.get("method") == "POST":
            await self._serve(scope, receive, send, endpoint)
        elif kind == "lifespan":
            await self.app(scope, receive, self._watching_lifespan(send))
        else:
            await self.app(scope, receive, send)

    def _watching_lifespan(self, send: Send) -> Send:
        async def forward(message: Any) -> None:  # Any: Litestar's `Message` has no lifespan messages
            if message["type"] == "lifespan.startup.complete":
                self._services = self.app.state.services
            elif message["type"] in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
                self._services = None
            await send(message)

        return cast(Send, forward)

    def services(self) -> Services:
        """The services of the running app (read from its state when no lifespan ran here)."""
        services = self._services
        if services is None:
            found: Services = self.app.state.services
            return found
        return services

    async def _serve(self, scope: Scope, receive: Receive, send: Send, endpoint: Endpoint) -> None:
        # Lower-cased here: ASGI asks servers for lower-case names, and the front does not rely on it.
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]
        }
        exchange = ProxyExchange()
        body: RequestBody | None = None
        try:
            body = RequestBody.of(receive, headers, self._max_body, self.body_budget)
            result = await self.services().pipeline.run(exchange, headers, body.read, endpoint)
        except GatewayError as exc:
            reply = gateway_error_reply(exc, _asker(exchange, scope, headers))
            return await self._refuse(send, reply, body, scope["path"])
        except BodyTooLarge:
            reply = http_error_reply(413, None, _asker(exchange, scope, headers))
            return await self._refuse(send, reply, body, scope["path"])
        except ClientGone:
            return None
        except Exception as exc:  # an OpenAI-shaped 500, never a bare traceback
            return await _reply(send, internal_error_reply(exc, _asker(exchange, scope, headers)), body)
        if result.stream is not None:
            write_timeout_s = self.services().settings.catalog.limits.stream_write_timeout_s
            await relay_sse(receive, send, _encoded(SSE, result.headers), result.stream, write_timeout_s)
        else:
            await _send(send, 200, result.headers, result.body)
        return None

    async def _refuse(self, send: Send, reply: ErrorReply, body: RequestBody | None, path: str) -> None:
        """An error answer, counted when the gateway gave it before any upstream was tried."""
        if reply.refused:
            self.services().metrics.count_refused(path, reply.status, reply.code)
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
