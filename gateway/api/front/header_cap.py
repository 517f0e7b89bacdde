"""A cap on the request headers that reach the app: 431 as an OpenAI error.

uvicorn's httptools protocol has read the head whole by then; the bound while it is read is the
reverse proxy's (docs/operations.md). The answer closes the connection, as no body is read.
"""

from __future__ import annotations

import msgspec
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Receive, Scope, Send

from gateway.errors import ErrorBody, ErrorDetail

MAX_HEADER_BYTES = 64 * 1024
_BODY = msgspec.json.encode(
    ErrorBody(
        ErrorDetail(
            message=f"The request headers exceed {MAX_HEADER_BYTES // 1024} KiB",
            type="invalid_request_error",
            code="request_header_fields_too_large",
        )
    )
)


def header_cap(app: ASGIApp) -> ASGIApp:
    async def capped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == ScopeType.HTTP:
            size = sum(len(name) + len(value) for name, value in scope["headers"])
            if size > MAX_HEADER_BYTES:
                await send(
                    {
                        "type": "http.response.start",
                        "status": 431,
                        "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
                    }
                )
                await send({"type": "http.response.body", "body": _BODY, "more_body": False})
                return
        await app(scope, receive, send)

    return capped
