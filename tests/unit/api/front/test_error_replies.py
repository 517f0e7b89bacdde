"""Error answers in the envelope of the API asked: Anthropic's on the Messages API (every path under
/v1/messages, whatever refused the request), OpenAI's error object everywhere else."""

from __future__ import annotations

import json

import pytest

from gateway.api.front.error_replies import (
    Asker,
    gateway_error_reply,
    http_error_reply,
    internal_error_reply,
    unrouted_reply,
)
from gateway.errors import AuthenticationFailed, GatewayError, InvalidRequest

MESSAGES_PATHS = ["/v1/messages", "/v1/messages/count_tokens", "/v1/messages/nothing/here"]


def _anthropic(body: bytes) -> dict[str, str | None]:
    decoded = json.loads(body)
    assert decoded["type"] == "error"
    assert set(decoded) == {"type", "error"}
    error: dict[str, str | None] = decoded["error"]
    assert isinstance(error["message"], str) and error["message"]
    return error


@pytest.mark.parametrize("path", MESSAGES_PATHS)
def test_every_reply_on_the_messages_api_is_in_anthropics_envelope(path: str) -> None:
    asker = Asker("req-1", path)
    refused = gateway_error_reply(AuthenticationFailed("Invalid API key"), asker)
    assert (refused.status, _anthropic(refused.body)["type"]) == (401, "authentication_error")
    bad = gateway_error_reply(InvalidRequest("no", param="max_tokens"), asker)
    assert _anthropic(bad.body) == {
        "type": "invalid_request_error",
        "message": "no",
        "param": "max_tokens",
        "code": "invalid_request",
    }
    assert _anthropic(http_error_reply(413, None, asker).body)["type"] == "request_too_large"
    assert _anthropic(internal_error_reply(RuntimeError("x"), asker).body)["type"] == "api_error"
    limited = gateway_error_reply(GatewayError("slow down", status=429, code="rate_limit_exceeded"), asker)
    assert _anthropic(limited.body)["type"] == "rate_limit_error"


def test_an_unserved_path_under_messages_is_a_404_in_anthropics_envelope() -> None:
    reply = unrouted_reply(404, "POST", Asker("req-1", "/v1/messages/nothing/here"))
    assert reply is not None and reply.status == 404
    error = _anthropic(reply.body)
    assert (error["type"], error["code"]) == ("not_found_error", "unsupported_endpoint")


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messagesx", "/v1/responses"])
def test_other_apis_keep_openais_error_object(path: str) -> None:
    reply = gateway_error_reply(AuthenticationFailed("Invalid API key"), Asker("req-1", path))
    assert json.loads(reply.body) == {
        "error": {
            "message": "Invalid API key",
            "type": "authentication_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
