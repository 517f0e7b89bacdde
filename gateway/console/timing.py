"""`Server-Timing: console;dur=<ms>` on every console response: the time from the request's arrival
at the console to its response's first message, queries and template rendering included, so a
browser's developer tools or a benchmark can read a page's server time without a profiler."""

from __future__ import annotations

import time

from litestar.datastructures import MutableScopeHeaders
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send


def server_timing(app: ASGIApp) -> ASGIApp:
    async def timed(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await app(scope, receive, send)
            return
        started = time.perf_counter()

        async def send_timed(message: Message) -> None:
            if message["type"] == "http.response.start":
                elapsed_ms = (time.perf_counter() - started) * 1000
                MutableScopeHeaders.from_message(message).add(
                    "server-timing", f"console;dur={elapsed_ms:.1f}"
                )
            await send(message)

        await app(scope, receive, send_timed)

    return timed
