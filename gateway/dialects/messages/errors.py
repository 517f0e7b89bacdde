"""Errors as the Messages API's clients read them: Anthropic's envelope (`{"type": "error",
"error": {"type", "message"}}`), the gateway's `param` and `code` kept inside.

Clients key on the envelope's `"type": "error"` (the Vercel AI SDK shows only the HTTP status text
without it) and on Anthropic's error types (Claude Code retries `overloaded_error`), which follow the
status as Anthropic's own do. A failure after a stream's first byte is an `error` event holding the
same envelope, which the SDKs raise.
"""

from __future__ import annotations

import msgspec

from gateway.errors import ErrorDetail, GatewayError
from gateway.schemas.anthropic import ErrorEnvelope

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",  # no capacity for it now (a queue full, every circuit open)
    504: "timeout_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


def error_envelope(detail: ErrorDetail, status: int) -> bytes:
    """The body of an error answer with `status`."""
    anthropic = ErrorDetail(detail.message, error_type(status), detail.param, detail.code)
    return msgspec.json.encode(ErrorEnvelope(anthropic))


def error_event(exc: GatewayError) -> bytes:
    """The `error` event that ends a stream which failed after its first byte."""
    return b"event: error\ndata: " + error_envelope(exc.body().error, exc.status) + b"\n\n"
