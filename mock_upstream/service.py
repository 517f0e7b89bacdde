"""The mock upstream itself, independent of how it is served: one request in, one reply out.

`MockUpstream.handle` is shared by the ASGI app (`server.py`) and the in-process httpx transport
(`transport.py`). It records the request, applies the effective behaviour (latency, failures,
garbage, hangs) and builds the OpenAI- or Anthropic-shaped answer.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

import msgspec

from gateway.schemas.nesting import TOO_DEEP
from mock_upstream import anthropic_format, openai_format
from mock_upstream.answers import answer
from mock_upstream.batch_api import MockBatches
from mock_upstream.behaviour import BehaviourError, MockBehaviour, header_overrides, with_overrides
from mock_upstream.cache import PromptCache
from mock_upstream.control import control_reply
from mock_upstream.recorder import MAX_RECORDED, BodyTooDeep, RequestRecorder, parse_body
from mock_upstream.replies import MockReply, json_reply
from mock_upstream.routes import (
    BATCH_OPERATIONS,
    Api,
    Operation,
    Route,
    api_of_path,
    has_api_version,
    match_route,
    request_problem,
)
from mock_upstream.usage_reports import MockBill, report_route

GARBAGE_BODY = b"<html><body><h1>502 Bad Gateway</h1></body></html>"


@dataclass(frozen=True, slots=True)
class MockRequest:
    method: str
    path: str
    query: str  # the raw query string, without `?`
    headers: dict[str, str]  # names in lower case
    body: bytes


def error_reply(
    api: Api, status: int, message: str, headers: list[tuple[str, str]] | None = None
) -> MockReply:
    body = (
        anthropic_format.error_body(status, message)
        if api is Api.ANTHROPIC
        else openai_format.error_body(status, message)
    )
    return json_reply(status, body, headers)


@dataclass
class MockUpstream:
    """A fake provider: its current behaviour, prompt cache, recorded requests and random source."""

    behaviour: MockBehaviour = field(default_factory=MockBehaviour)
    record_limit: int = MAX_RECORDED
    cache: PromptCache = field(default_factory=PromptCache)
    batches: MockBatches = field(default_factory=MockBatches)  # the batch APIs' files and batches
    bill: MockBill = field(default_factory=MockBill)  # what it served, as its admin reports tell it

    def __post_init__(self) -> None:
        self.recorder = RequestRecorder(self.record_limit)
        self._random = random.Random(self.behaviour.seed)

    def set_behaviour(self, behaviour: MockBehaviour) -> None:
        """Replace the behaviour; the failure sequence restarts from its seed."""
        self.behaviour = behaviour
        self._random = random.Random(behaviour.seed)

    async def handle(self, request: MockRequest) -> MockReply:
        control_at = request.path.find("/_mock/")
        if control_at >= 0:  # under any base URL prefix, as the in-process transport is used
            return control_reply(self, request.method, request.path[control_at:], request.body)
        try:
            body = parse_body(request.body)
        except BodyTooDeep:
            self.recorder.record(request.method, request.path, request.query, request.headers, None)
            return error_reply(api_of_path(request.path), 400, TOO_DEEP)
        self.recorder.record(request.method, request.path, request.query, request.headers, body)
        report = report_route(request.method, request.path)
        if report is not None:
            return self.bill.reply(*report, request.headers, request.query)
        route = match_route(request.method, request.path)
        if route is None:
            return error_reply(
                api_of_path(request.path), 404, f"Unknown request URL: {request.method} {request.path}"
            )
        try:
            behaviour = self._effective(request, body)
        except BehaviourError as exc:
            return error_reply(route.api, 400, str(exc))
        if behaviour.hang:
            return MockReply(200, [], hang=True)
        if behaviour.latency_ms:
            await asyncio.sleep(behaviour.latency_ms / 1000)
        reply = self._answer(route, request, body, behaviour)
        self.bill.count(route, body, reply)
        return reply

    def _effective(self, request: MockRequest, body: Any) -> MockBehaviour:
        behaviour = with_overrides(self.behaviour, header_overrides(request.headers.get("x-mock-behaviour")))
        return with_overrides(behaviour, body.get("mock") if isinstance(body, dict) else None)

    def _answer(self, route: Route, request: MockRequest, body: Any, behaviour: MockBehaviour) -> MockReply:
        if behaviour.fail_rate and self._random.random() < behaviour.fail_rate:
            return self._failure(route.api, behaviour)
        if behaviour.garbage:
            return MockReply(200, [("content-type", "application/json")], GARBAGE_BODY)
        if route.operation in BATCH_OPERATIONS:
            return self.batches.reply(route, request.headers, request.body, behaviour, self.cache)
        if route.deployment is not None and not has_api_version(request.query):
            return error_reply(route.api, 404, "Resource not found")
        problem = request_problem(route, body)
        if problem is not None:
            return error_reply(route.api, 400, problem)
        if route.operation is Operation.MODELS:
            return json_reply(200, openai_format.models_list())
        if route.operation is Operation.MODEL:
            return json_reply(200, msgspec.json.encode(openai_format.model_object(route.model_id or "")))
        return answer(self.cache, route, body, behaviour)

    def _failure(self, api: Api, behaviour: MockBehaviour) -> MockReply:
        headers = [("x-mock-failure", "injected")]
        if behaviour.retry_after is not None:
            headers.append(("retry-after", format(behaviour.retry_after, "g")))
            headers.append(("retry-after-ms", str(round(behaviour.retry_after * 1000))))
        message = f"mock upstream failure (status {behaviour.fail_status})"
        return error_reply(api, behaviour.fail_status, message, headers)
