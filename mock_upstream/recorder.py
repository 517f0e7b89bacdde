"""The record of requests the mock received, for tests to inspect (bounded, oldest dropped)."""

from __future__ import annotations

from collections import Counter, deque
from typing import Any
from urllib.parse import parse_qsl

import msgspec

from gateway.schemas.nesting import too_deep

MAX_RECORDED = 10_000


class BodyTooDeep(ValueError):
    """A JSON body nested past the gateway's bound (gateway.schemas.nesting): answered with a 400
    and recorded without its body, which `/_mock/requests` could not encode again past Python's
    recursion limit."""


class RecordedRequest(msgspec.Struct, frozen=True):
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # names in lower case
    body: Any  # the parsed JSON, else the raw text, else None when empty


def parse_body(raw: bytes) -> Any:
    """The body as JSON when it is JSON, else as text (None when empty); BodyTooDeep when it nests
    past the bound."""
    if not raw:
        return None
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return raw.decode("utf-8", "replace")
    except RecursionError:  # msgspec's guard: thousands of levels
        raise BodyTooDeep from None
    if too_deep(body, raw):
        raise BodyTooDeep
    return body


class RequestRecorder:
    """Requests in arrival order, at most `limit` of them, plus a count per path of all requests."""

    def __init__(self, limit: int = MAX_RECORDED) -> None:
        self._requests: deque[RecordedRequest] = deque(maxlen=limit)
        self._per_path: Counter[str] = Counter()

    def record(self, method: str, path: str, query: str, headers: dict[str, str], body: Any) -> None:
        self._per_path[path] += 1
        if self._requests.maxlen:
            self._requests.append(RecordedRequest(method, path, dict(parse_qsl(query)), headers, body))

    def requests(self) -> list[RecordedRequest]:
        return list(self._requests)

    def stats(self) -> dict[str, Any]:
        return {"total": sum(self._per_path.values()), "paths": dict(self._per_path)}

    def clear(self) -> None:
        self._requests.clear()
        self._per_path.clear()
