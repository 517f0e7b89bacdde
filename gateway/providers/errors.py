"""Turn an upstream HTTP failure (status, parsed error detail, headers) into the gateway's errors.

Each adapter parses its provider's error body into an `UpstreamErrorDetail`; the mapping from
status to retryable or final error is the same for every provider and lives here.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

from gateway.errors import (
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)

_MAX_MESSAGE_CHARS = 1000
# Upstreams sometimes echo (part of) a key in a message; never pass anything key-shaped on.
_KEY_SHAPED = re.compile(r"\b(sk|key|sess)-[A-Za-z0-9_\-*]{6,}")


@dataclass(frozen=True, slots=True)
class UpstreamErrorDetail:
    """What an upstream said about its failure, as far as its body could be read."""

    message: str | None = None
    type: str | None = None
    param: str | None = None
    code: str | None = None


def classify_status(
    status: int, detail: UpstreamErrorDetail, headers: Mapping[str, str], *, now: float | None = None
) -> UpstreamError:
    """The gateway error for an upstream's non-2xx answer; see the status table in the body."""
    retry_after_s = parse_retry_after(headers, now=now)
    said = _clean(detail.message)
    if status == 429:
        return UpstreamRateLimited(
            _describe("the upstream rate-limited the request", said), retry_after_s=retry_after_s
        )
    if status in (401, 403):
        error = UpstreamError(
            f"the upstream rejected the gateway's credentials (HTTP {status}); "
            "the provider's configuration needs attention",
            code="upstream_auth_failed",
        )
        error.retryable = False
        return error
    if status in (503, 529):
        return UpstreamUnavailable(
            _describe(f"the upstream is unavailable (HTTP {status})", said), retry_after_s=retry_after_s
        )
    if status == 504:
        return UpstreamTimeout(
            _describe("the upstream timed out (HTTP 504)", said), retry_after_s=retry_after_s
        )
    if status in (408, 409) or status >= 500:
        return UpstreamError(
            _describe(f"the upstream failed (HTTP {status})", said), retry_after_s=retry_after_s
        )
    if 400 <= status < 500:
        return UpstreamRejected(
            said or f"the upstream rejected the request (HTTP {status})",
            param=detail.param,
            code=detail.code or "upstream_rejected",
            status=status,
        )
    return UpstreamError(f"unexpected HTTP {status} from the upstream", code="upstream_bad_response")


def bad_response(what: str) -> UpstreamError:
    """The upstream answered 2xx with a body the gateway cannot read."""
    return UpstreamError(f"the upstream sent an unreadable response: {what}", code="upstream_bad_response")


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `retry-after` (seconds or an HTTP date)."""
    millis = _header(headers, "retry-after-ms")
    if millis is not None:
        try:
            return max(float(millis) / 1000.0, 0.0)
        except ValueError:
            pass
    value = _header(headers, "retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    current = time.time() if now is None else now
    return max(when.timestamp() - current, 0.0)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is not None:
        return value
    return next((v for k, v in headers.items() if k.lower() == name), None)


def _clean(message: str | None) -> str | None:
    if not message:
        return None
    return _KEY_SHAPED.sub("[redacted]", message)[:_MAX_MESSAGE_CHARS]


def _describe(summary: str, said: str | None) -> str:
    return f"{summary}: {said}" if said else summary
