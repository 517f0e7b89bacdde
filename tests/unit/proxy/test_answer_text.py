"""The output text of an answer in each wire format: what was generated, not the envelope."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.providers.base import Endpoint
from gateway.proxy.answer_text import answer_bytes


def measured(endpoint: Endpoint, answer: dict[str, Any]) -> int:
    return answer_bytes(endpoint, msgspec.json.encode(answer))


def utf8(*texts: str) -> int:
    return sum(len(text.encode()) for text in texts)


def test_chat_choices_content_refusal_reasoning_and_tool_calls() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Paris"}'}}
    answer = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Il fait beau.",
                                     "reasoning_content": "Paris first."}, "finish_reason": "stop"},
            {"index": 1, "message": {"role": "assistant", "content": None, "tool_calls": [call]}},
            {"index": 2, "message": {"role": "assistant", "content": None, "refusal": "No."}},
        ],
    }  # fmt: skip

    assert measured(Endpoint.CHAT, answer) == utf8(
        "Il fait beau.", "Paris first.", "weather", '{"city":"Paris"}', "No."
    )


def test_completions_texts() -> None:
    answer = {"object": "text_completion", "choices": [{"text": "one"}, {"text": "two three"}]}

    assert measured(Endpoint.COMPLETIONS, answer) == utf8("one", "two three")


def test_an_embedding_has_no_output() -> None:
    answer = {"object": "list", "data": [{"object": "embedding", "embedding": [0.1] * 1536, "index": 0}]}

    assert measured(Endpoint.EMBEDDINGS, answer) == 0


def test_a_response_counts_its_output_not_the_instructions_and_tools_it_repeats() -> None:
    answer = {
        "id": "resp_1",
        "object": "response",
        "instructions": "a very long system prompt " * 1000,
        "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}}],
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Thought."}]},
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Sunny.", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "weather", "arguments": "{}"},
        ],
    }  # fmt: skip

    assert measured(Endpoint.RESPONSES, answer) == utf8("Thought.", "Sunny.", "weather", "{}")


def test_a_message_counts_its_content_blocks() -> None:
    answer = {
        "id": "msg_1",
        "type": "message",
        "content": [
            {"type": "thinking", "thinking": "Hmm.", "signature": "sig"},
            {"type": "text", "text": "Sunny."},
            {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Paris"}},
        ],
    }

    assert measured(Endpoint.MESSAGES, answer) == utf8("Hmm.", "Sunny.", "weather", '{"city":"Paris"}')


def test_an_answer_it_cannot_read_counts_whole() -> None:
    body = b'{"choices": "not a list"}'

    assert answer_bytes(Endpoint.CHAT, body) == len(body)
    assert answer_bytes(Endpoint.MESSAGES, b"not json") == len(b"not json")
