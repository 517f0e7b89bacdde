"""The `/_mock/*` control endpoints: read or change the behaviour, read or clear the record.

| method, path               | effect                                                  |
|----------------------------|---------------------------------------------------------|
| GET /_mock/behaviour       | the current behaviour                                   |
| PUT /_mock/behaviour       | replace it (missing fields take their defaults)         |
| PATCH /_mock/behaviour     | change only the fields given                            |
| GET /_mock/requests        | recorded requests, in arrival order                     |
| DELETE /_mock/requests     | clear the record and the stats                          |
| GET /_mock/stats           | `{"total": n, "paths": {path: count}}`                  |
| DELETE /_mock/cache        | forget every prompt-cache prefix                        |
| /_mock/reports/...         | admin reports' prices, drift (usage_reports)            |
"""

from __future__ import annotations

from typing import Protocol

import msgspec

from gateway.schemas.nesting import TOO_DEEP
from mock_upstream import openai_format
from mock_upstream.behaviour import (
    BehaviourError,
    MockBehaviour,
    decode_behaviour,
    encode_behaviour,
    with_overrides,
)
from mock_upstream.cache import PromptCache
from mock_upstream.recorder import BodyTooDeep, RequestRecorder, parse_body
from mock_upstream.replies import MockReply, json_reply
from mock_upstream.usage_reports import MockBill


class Controlled(Protocol):
    """What the control endpoints read and change of a mock upstream (`MockUpstream`)."""

    behaviour: MockBehaviour
    recorder: RequestRecorder
    cache: PromptCache
    bill: MockBill

    def set_behaviour(self, behaviour: MockBehaviour) -> None: ...


def _behaviour(upstream: Controlled, method: str, body: bytes) -> MockReply:
    try:
        if method == "PUT":
            upstream.set_behaviour(decode_behaviour(body))
        elif method == "PATCH":
            upstream.set_behaviour(with_overrides(upstream.behaviour, parse_body(body)))
    except BehaviourError as exc:
        return json_reply(400, openai_format.error_body(400, str(exc)))
    except BodyTooDeep:
        return json_reply(400, openai_format.error_body(400, TOO_DEEP))
    return json_reply(200, encode_behaviour(upstream.behaviour))


def control_reply(upstream: Controlled, method: str, path: str, body: bytes) -> MockReply:
    if path == "/_mock/behaviour" and method in ("GET", "PUT", "PATCH"):
        return _behaviour(upstream, method, body)
    if path == "/_mock/requests" and method == "GET":
        return json_reply(200, msgspec.json.encode(upstream.recorder.requests()))
    if path == "/_mock/requests" and method == "DELETE":
        upstream.recorder.clear()
        return MockReply(204, [])
    if path == "/_mock/stats" and method == "GET":
        return json_reply(200, msgspec.json.encode(upstream.recorder.stats()))
    if path.startswith("/_mock/reports"):
        return upstream.bill.control(method, path, body)
    if path == "/_mock/cache" and method == "DELETE":
        upstream.cache.clear()
        return MockReply(204, [])
    return json_reply(404, openai_format.error_body(404, f"Unknown control request: {method} {path}"))
