"""What ties a request to the client's own records: its `X-Request-ID` and its W3C trace context.

Both are optional and never refuse a request. An `X-Request-ID` of 1-128 printable ASCII
characters is kept (on the usage record and the log line); any other is ignored. A `traceparent`
is forwarded to the upstream, with its `tracestate`, only when it is valid as W3C Trace Context
(https://www.w3.org/TR/trace-context/) defines it; an invalid one is dropped, its tracestate too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

MAX_CLIENT_REQUEST_ID = 128
MAX_TRACESTATE = 512  # what W3C asks every vendor to propagate at least
MAX_TRACESTATE_MEMBERS = 32

_CLIENT_REQUEST_ID = re.compile(rf"[\x20-\x7e]{{1,{MAX_CLIENT_REQUEST_ID}}}")
# version-traceid-parentid-flags, lower-case hex; a later version may append fields after a dash
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-[\x20-\x7e]*)?")
_TRACESTATE = re.compile(rf"[\x20-\x7e]{{0,{MAX_TRACESTATE}}}")
_ZERO_TRACE, _ZERO_PARENT = "0" * 32, "0" * 16


@dataclass(frozen=True, slots=True)
class Correlation:
    """The client's ids for one request, as far as they are valid."""

    client_request_id: str | None = None
    trace_id: str | None = None  # the traceparent's trace id, for the log line
    upstream_headers: dict[str, str] | None = None  # traceparent (and tracestate), as sent


NO_CORRELATION = Correlation()


def read_correlation(headers: Mapping[str, str]) -> Correlation:
    """The correlation of a request from its headers (lower-case names)."""
    request_id = headers.get("x-request-id")
    traceparent = headers.get("traceparent")
    if request_id is None and traceparent is None:
        return NO_CORRELATION
    if request_id is not None and _CLIENT_REQUEST_ID.fullmatch(request_id) is None:
        request_id = None
    trace_id = None if traceparent is None else valid_trace_id(traceparent)
    if trace_id is None:
        return Correlation(request_id) if request_id is not None else NO_CORRELATION
    assert traceparent is not None
    forwarded = {"traceparent": traceparent}
    tracestate = headers.get("tracestate")
    if tracestate is not None and valid_tracestate(tracestate):
        forwarded["tracestate"] = tracestate
    return Correlation(request_id, trace_id, forwarded)


def valid_trace_id(traceparent: str) -> str | None:
    """The trace id of a valid traceparent, else None.

    Invalid: not the four fields of lower-case hex; version `ff`; version `00` with anything
    after the flags; a trace id or parent id of all zeros."""
    match = _TRACEPARENT.fullmatch(traceparent)
    if match is None:
        return None
    version, trace_id, parent_id, extra = match.groups()
    if version == "ff" or (version == "00" and extra is not None):
        return None
    if trace_id == _ZERO_TRACE or parent_id == _ZERO_PARENT:
        return None
    return trace_id


def valid_tracestate(tracestate: str) -> bool:
    """Printable ASCII, at most MAX_TRACESTATE characters in at most MAX_TRACESTATE_MEMBERS members:
    passed on as it came, or not at all."""
    return _TRACESTATE.fullmatch(tracestate) is not None and tracestate.count(",") < MAX_TRACESTATE_MEMBERS
