"""The gateway's one exception tree; every error knows its HTTP status and OpenAI error shape.

GatewayError                 (413 for an oversized body comes from Litestar's body limit, see app.py)
├── InvalidRequest (400, invalid_request_error, code invalid_request or the schema's: schema_error_code)
│   ├── NoRoute (400, code no_route)
│   └── DirectiveConflict (400, code directive_conflict)
├── AuthenticationFailed (401, authentication_error)
├── PermissionDenied (403, permission_error)
├── NotFound (404, not_found_error)
│   └── UnknownResponse (404, invalid_request_error): a response id the team did not create
├── Conflict (409, invalid_request_error, code conflict)
├── RateLimited (429, rate_limit_error / insufficient_quota)
│   ├── QueueFull (429, code queue_full)
│   ├── QueueTimeout (429, code queue_timeout)
│   └── TooManyStreams (429, code too_many_streams)
├── ServiceUnavailable (503, api_error): the gateway's own dependency (database) is down
└── UpstreamError (502, upstream_error)         retryable + fallback allowed unless said
    ├── UpstreamTimeout (504)
    ├── UpstreamUnavailable (503)
    ├── UpstreamRateLimited (429 from the provider, with Retry-After; never opens a circuit)
    ├── UpstreamTooLarge (502, over the response size cap: never retried)
    ├── UpstreamRejected (4xx from the provider: passed on, never retried)
    ├── UpstreamMisconfigured (502: a URL or header the catalog got wrong: never retried)
    └── PinnedProviderUnavailable (503, code pinned_provider_unavailable)

ConfigError                  never served: a bad configuration, raised while the settings load
"""

from __future__ import annotations

import math
import re

import msgspec

# Retry-After on an upstream 429 that did not say when to come back: a short pause, the gateway
# having already waited out its own retries.
UPSTREAM_RATE_LIMIT_RETRY_S = 1


class ConfigError(Exception):
    """A bad configuration: the message names the file, the key and the problem."""


class ErrorDetail(msgspec.Struct, omit_defaults=False):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(msgspec.Struct):
    error: ErrorDetail


class GatewayError(Exception):
    status = 500
    type = "api_error"
    code: str | None = None
    retryable = False
    logged = False  # the request's log line is already written (metered upstream failures)

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.headers = headers or {}

    def body(self) -> ErrorBody:
        return ErrorBody(ErrorDetail(self.message, self.type, self.param, self.code))

    def to_json(self) -> bytes:
        return msgspec.json.encode(self.body())


class InvalidRequest(GatewayError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"  # a body that fits no schema says which way: `schema_error_code`


class NoRoute(InvalidRequest):
    code = "no_route"


class DirectiveConflict(InvalidRequest):
    code = "directive_conflict"


class AuthenticationFailed(GatewayError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class PermissionDenied(GatewayError):
    status = 403
    type = "permission_error"
    code = "permission_denied"


class NotFound(GatewayError):
    status = 404
    type = "not_found_error"
    code = "not_found"


class ModelNotFound(NotFound):
    code = "model_not_found"


class UnknownResponse(NotFound):
    """A stored Response or conversation the caller's team did not create: answered as OpenAI
    answers an id it does not know."""

    type = "invalid_request_error"


class Conflict(GatewayError):
    status = 409
    type = "invalid_request_error"
    code = "conflict"


class RateLimited(GatewayError):
    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"


class QuotaExceeded(RateLimited):
    type = "insufficient_quota"
    code = "insufficient_quota"


class QueueFull(RateLimited):
    """The provider's queue holds `scheduling.max_queued` requests already."""

    code = "queue_full"


class QueueTimeout(RateLimited):
    """The request waited its class's `queue_timeout_s` for capacity; it never reached an upstream."""

    code = "queue_timeout"


class TooManyStreams(RateLimited):
    """The key has `limits.max_streams_per_key` streams in flight at this process already; the
    request was not sent."""

    code = "too_many_streams"


class ServiceUnavailable(GatewayError):
    """A dependency of the gateway itself (not a provider) is unreachable; retry later."""

    status = 503
    type = "api_error"
    code = "service_unavailable"


class UpstreamError(GatewayError):
    """The provider failed; `retryable` says whether the same deployment may be tried again."""

    status = 502
    type = "upstream_error"
    code = "upstream_error"
    retryable = True

    def __init__(self, message: str, *, retry_after_s: float | None = None, **kwargs: object) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.retry_after_s = retry_after_s


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"


class UpstreamUnavailable(UpstreamError):
    status = 503
    code = "upstream_unavailable"


class UpstreamRateLimited(UpstreamError):
    """The provider answered 429. Its reply carries `Retry-After`: the upstream's own value when it
    sent one, else `UPSTREAM_RATE_LIMIT_RETRY_S`."""

    status = 429
    type = "rate_limit_error"
    code = "upstream_rate_limited"

    def __init__(self, message: str, *, retry_after_s: float | None = None, **kwargs: object) -> None:
        super().__init__(message, retry_after_s=retry_after_s, **kwargs)
        self.headers.setdefault("retry-after", retry_after_header(retry_after_s, UPSTREAM_RATE_LIMIT_RETRY_S))


class UpstreamTooLarge(UpstreamError):
    """The upstream's answer exceeds `limits.max_upstream_response_bytes`; asking again would not help."""

    code = "upstream_too_large"
    retryable = False

    def __init__(self, message: str = "The upstream response exceeds the gateway's size limit") -> None:
        super().__init__(message)


class UpstreamRejected(UpstreamError):
    """A 4xx from the provider about the request itself: retrying or moving would not help."""

    type = "invalid_request_error"
    code = "upstream_rejected"
    retryable = False


class UpstreamMisconfigured(UpstreamError):
    """The request cannot be sent as configured (a bad URL, a header with a line break)."""

    code = "upstream_misconfigured"
    retryable = False


class PinnedProviderUnavailable(UpstreamError):
    status = 503
    code = "pinned_provider_unavailable"
    retryable = False


_WRONG_TYPE = re.compile(r"Expected `[^`]+`, got `")


def schema_error_code(message: str) -> str:
    """OpenAI's code for a body that does not fit its schema, read from msgspec's message."""
    if message.startswith("Object missing required field"):
        return "missing_required_parameter"
    if message.startswith("Object contains unknown field"):
        return "unknown_parameter"
    if _WRONG_TYPE.match(message):
        return "invalid_type"
    return "invalid_value"


def retry_after_header(seconds: float | None, default: int) -> str:
    """`Retry-After` in whole seconds (rounded up, at least 1), or `default` when none is known."""
    if seconds is None:
        return str(default)
    return str(max(1, math.ceil(seconds)))
