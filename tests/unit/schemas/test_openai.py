"""OpenAI's reply Structs serve both directions: what servers send parses, and what the gateway
writes carries OpenAI's members and none of those only a reader needs."""

from __future__ import annotations

import json

import msgspec

from gateway.schemas.openai import (
    ChatCompletion,
    ChatCompletionChunk,
    Choice,
    ChunkChoice,
    ChunkDelta,
    FunctionCall,
    FunctionDelta,
    MessageToolCall,
    ResponseMessage,
    ToolCallDelta,
    Usage,
)


def test_a_chunk_as_servers_send_it() -> None:
    data = (
        b'{"id":"c","object":"chat.completion.chunk","created":1,"model":7,"choices":[{"index":0,'
        b'"delta":{"role":null,"content":null,"tool_calls":[{"index":1,"function":{"arguments":"{"}}]},'
        b'"logprobs":{"content":[]},"finish_reason":"stop","stop_reason":"END"}],'
        b'"usage":{"prompt_tokens":"12","completion_tokens":3}}'
    )
    chunk = msgspec.json.decode(data, type=ChatCompletionChunk)
    choice = chunk.choices[0]
    assert choice.stop_reason == "END" and choice.finish_reason == "stop"
    assert choice.delta is not None and choice.delta.content is None
    assert choice.delta.tool_calls == [ToolCallDelta(index=1, function=FunctionDelta(arguments="{"))]
    assert chunk.usage == Usage(prompt_tokens="12", completion_tokens=3)  # judged later, not here


def test_a_written_chunk_has_openais_members_only() -> None:
    call = ToolCallDelta(
        index=0, id="call_1", type="function", function=FunctionDelta(name="f", arguments="")
    )
    chunk = ChatCompletionChunk(
        id="c",
        created=1,
        model="alias",
        choices=[ChunkChoice(delta=ChunkDelta(tool_calls=[call]))],
    )
    assert json.loads(msgspec.json.encode(chunk)) == {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "alias",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "f", "arguments": ""},
                        }
                    ]
                },
                "logprobs": None,
                "finish_reason": None,
            }
        ],
    }


def test_a_written_completion_has_openais_members_only() -> None:
    message = ResponseMessage(
        content=None,
        tool_calls=[MessageToolCall(id="call_1", function=FunctionCall(name="f", arguments="{}"))],
    )
    completion = ChatCompletion(
        id="chatcmpl-1",
        created=1,
        model="alias",
        choices=[Choice(message=message, finish_reason="tool_calls")],
        usage=Usage(prompt_tokens=3, completion_tokens=1, total_tokens=4, cost="0.1"),
    )
    assert json.loads(msgspec.json.encode(completion)) == {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "alias",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "refusal": None,
                    "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    ],
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4, "cost": "0.1"},
    }
