"""Chat completion chunks assembled into one chat completion: hand-made chunks, expected answers."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.errors import UpstreamError
from gateway.providers.openai.chat_assembly import ChatAssembly

HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000, "model": "m",
        "system_fingerprint": "fp_1"}  # fmt: skip
USAGE = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12,
         "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens_details": {"reasoning_tokens": 0}}  # fmt: skip


def chunk(*choices: dict[str, Any], **fields: Any) -> bytes:
    return msgspec.json.encode({**HEAD, "choices": list(choices), **fields})


def delta(index: int = 0, finish: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"index": index, "delta": fields, "logprobs": None, "finish_reason": finish}


def assembled(*events: bytes) -> tuple[dict[str, Any], list[bool]]:
    assembly = ChatAssembly()
    firsts = [assembly.feed(event) for event in events]
    body: dict[str, Any] = msgspec.json.decode(assembly.body())
    return body, firsts


def test_content_is_joined_and_the_first_token_is_the_first_non_empty_content() -> None:
    body, firsts = assembled(
        chunk(delta(role="assistant", content="")),
        chunk(delta(content="Hel")),
        chunk(delta(content="lo")),
        chunk(delta(finish="stop")),
        chunk(usage=USAGE),
        b"[DONE]",
    )

    assert firsts == [False, True, False, False, False, False]
    assert body == {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello", "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "system_fingerprint": "fp_1",
        "usage": USAGE,  # verbatim, details included
    }


def test_tool_calls_are_assembled_per_index_and_choices_per_index() -> None:
    opening = {"index": 0, "id": "call_a", "type": "function", "function": {"name": "look", "arguments": ""}}
    second = {"index": 1, "id": "call_b", "type": "function", "function": {"name": "find", "arguments": "{}"}}
    body, firsts = assembled(
        chunk(delta(role="assistant", content=None, tool_calls=[opening])),
        chunk(delta(tool_calls=[{"index": 0, "function": {"arguments": '{"q":'}}])),
        chunk(delta(1, role="assistant", content="other")),
        chunk(delta(tool_calls=[second, {"index": 0, "function": {"arguments": '"x"}'}}])),
        chunk(delta(finish="tool_calls"), delta(1, finish="length")),
    )

    assert firsts == [True, False, False, False, False]  # a tool call is output too
    tool_calls, other = body["choices"]
    assert tool_calls["message"] == {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "look", "arguments": '{"q":"x"}'}},
            {"id": "call_b", "type": "function", "function": {"name": "find", "arguments": "{}"}},
        ],
    }
    assert tool_calls["finish_reason"] == "tool_calls"
    assert (other["index"], other["message"]["content"], other["finish_reason"]) == (1, "other", "length")
    assert "usage" not in body  # the upstream sent none


def test_a_refusal_is_assembled() -> None:
    body, _ = assembled(
        chunk(delta(role="assistant", refusal="I can")), chunk(delta(refusal="not.", finish="stop"))
    )

    assert body["choices"][0]["message"]["refusal"] == "I cannot."
    assert body["choices"][0]["message"]["content"] is None


def test_an_error_chunk_or_an_unreadable_one_fails_the_answer() -> None:
    with pytest.raises(UpstreamError, match="overloaded"):
        ChatAssembly().feed(msgspec.json.encode({"error": {"message": "overloaded"}}))
    with pytest.raises(UpstreamError) as unreadable:
        ChatAssembly().feed(b"{not json")
    assert unreadable.value.code == "upstream_bad_response"


def test_a_stream_without_chunks_has_no_answer() -> None:
    assembly = ChatAssembly()
    assembly.feed(b"[DONE]")
    with pytest.raises(UpstreamError):
        assembly.body()
