"""The golden Anthropic fixtures are real Anthropic shapes, as the official anthropic SDK types them.

This keeps the golden files honest: a translated request the SDK would not accept, or an event
the API would never send, fails here rather than in production.
"""

from __future__ import annotations

from typing import Any

import anthropic.types
import pytest
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from pydantic import TypeAdapter

from tests.unit.providers.calls import fixture_cases

REQUESTS = TypeAdapter(MessageCreateParamsNonStreaming)
EVENTS: TypeAdapter[Any] = TypeAdapter(anthropic.types.RawMessageStreamEvent)


@pytest.mark.parametrize(("name", "case"), fixture_cases("providers/anthropic/requests"))
def test_expected_requests_are_valid_message_create_params(name: str, case: dict[str, Any]) -> None:
    body = {k: v for k, v in case["anthropic"].items() if k != "stream"}
    REQUESTS.validate_python(body)


@pytest.mark.parametrize(("name", "case"), fixture_cases("providers/anthropic/responses"))
def test_responses_are_valid_messages(name: str, case: dict[str, Any]) -> None:
    anthropic.types.Message.model_validate(case["anthropic"])


@pytest.mark.parametrize(("name", "case"), fixture_cases("providers/anthropic/streams"))
def test_stream_events_are_valid_events(name: str, case: dict[str, Any]) -> None:
    for event in case["events"]:
        if event["type"] != "ping":  # the SDK has no type for ping; the API sends it
            EVENTS.validate_python(event)
