"""Anthropic's `POST /v1/messages/count_tokens` as the mock answers it: the prompt's token count, the
same count a Messages request with that prompt is metered with."""

from __future__ import annotations

from typing import Any

import msgspec

from mock_upstream.behaviour import MockBehaviour
from mock_upstream.prompt import anthropic_prompt
from mock_upstream.replies import MockReply, json_reply


def count_tokens(body: dict[str, Any], behaviour: MockBehaviour) -> MockReply:
    tokens = anthropic_prompt(body).tokens if behaviour.prompt_tokens is None else behaviour.prompt_tokens
    return json_reply(200, msgspec.json.encode({"input_tokens": tokens}))
