"""Every reply of the Litestar app carries `x-request-id`, and every request has one to log.

The proxied endpoints draw their id with their `ProxyExchange` and put it in the request's state
and headers themselves. This middleware gives every other request one before its handler runs
(`request.state.request_id`, which the error handlers log), and adds the header to any reply that
has none, with the id the state holds when the reply starts.
"""

from __future__ import annotations

from typing import Any

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from gateway.proxy.exchange import new_request_id

HEADER = b"x-request-id"


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        state: dict[str, Any] = scope.setdefault("state", {})
        state.setdefault("request_id", new_request_id())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or ())
                if not any(name.lower() == HEADER for name, _ in headers):
                    headers.append((HEADER, str(state["request_id"]).encode("latin-1")))
                    message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_id)
