"""OpenAI wire bodies the mock sends: chat and text completions (whole and as SSE), embeddings,
models and errors, shaped as OpenAI's OpenAPI schemas require."""

from __future__ import annotations

import base64
import time
import uuid
from dataclasses import dataclass
from typing import Any

import msgspec

from mock_upstream.cache import PromptUsage
from mock_upstream.content import embedding_vector, pack_float32, split_pieces
from mock_upstream.generation import Generation
from mock_upstream.prompt import plain_texts, plain_tokens

SYSTEM_FINGERPRINT = "fp_mock"
MOCK_MODELS = ("mock-chat", "mock-embedding")
DONE_FRAME = b"data: [DONE]\n\n"
_ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 403: "invalid_request_error",
                404: "invalid_request_error", 429: "requests"}  # fmt: skip
_ERROR_CODES = {401: "invalid_api_key", 404: "not_found", 429: "rate_limit_exceeded"}


@dataclass(frozen=True, slots=True)
class ReplyHeader:
    """The fields every body or chunk of one reply repeats."""

    id: str
    created: int
    model: str
    service_tier: str | None = None  # the tier it says served it (OpenAI's `service_tier`)

    @classmethod
    def new(cls, prefix: str, model: str, service_tier: str | None = None) -> ReplyHeader:
        return cls(f"{prefix}{uuid.uuid4().hex[:24]}", int(time.time()), model, service_tier)

    def envelope(self, object_type: str) -> dict[str, Any]:
        """The fields an OpenAI body or chunk opens with."""
        envelope = {"id": self.id, "object": object_type, "created": self.created, "model": self.model,
                    "system_fingerprint": SYSTEM_FINGERPRINT}  # fmt: skip
        if self.service_tier is not None:
            envelope["service_tier"] = self.service_tier
        return envelope


def served_tier(body: dict[str, Any], serve_tier: str | None) -> str | None:
    """The tier an answer names as OpenAI's do: `serve_tier` when the mock is told one, else the
    tier asked for (`auto` served as `default`); None when neither (the answer names none)."""
    if serve_tier is not None:
        return serve_tier
    asked = body.get("service_tier")
    if not isinstance(asked, str):
        return None
    return "default" if asked == "auto" else asked


def error_body(status: int, message: str, code: str | None = None) -> bytes:
    error_type = _ERROR_TYPES.get(status, "server_error")
    error = {"message": message, "type": error_type, "param": None, "code": code or _ERROR_CODES.get(status)}
    return msgspec.json.encode({"error": error})


def usage_object(prompt: PromptUsage, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt.tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt.tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": prompt.cache_read, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def frame(payload: dict[str, Any]) -> bytes:
    return b"data: " + msgspec.json.encode(payload) + b"\n\n"


def _finish_reason(generation: Generation) -> str:
    if generation.tool is not None:
        return "tool_calls"
    return "length" if generation.truncated else "stop"


def _message(generation: Generation, words: list[str]) -> dict[str, Any]:
    if generation.tool is None:
        return {"role": "assistant", "content": " ".join(words), "refusal": None, "annotations": []}
    tool = generation.tool
    call = {
        "id": tool.call_id,
        "type": "function",
        "function": {"name": tool.name, "arguments": tool.arguments},
    }
    return {"role": "assistant", "content": None, "refusal": None, "tool_calls": [call], "annotations": []}


def chat_completion(head: ReplyHeader, generation: Generation, usage: PromptUsage | None) -> bytes:
    choices = [
        {
            "index": i,
            "message": _message(generation, words),
            "logprobs": None,
            "finish_reason": _finish_reason(generation),
        }
        for i, words in enumerate(generation.choices)
    ]
    body = {**head.envelope("chat.completion"), "choices": choices}
    if usage is not None:
        body["usage"] = usage_object(usage, generation.total_tokens)
    return msgspec.json.encode(body)


def _chat_deltas(generation: Generation, words: list[str], chunks: int) -> list[dict[str, Any]]:
    """The deltas of one choice, from the role delta to the last content or arguments piece."""
    tool = generation.tool
    if tool is None:
        first: dict[str, Any] = {"role": "assistant", "content": "", "refusal": None}
        return [first, *({"content": piece} for piece in split_pieces(words, chunks))]
    opening = {
        "index": 0,
        "id": tool.call_id,
        "type": "function",
        "function": {"name": tool.name, "arguments": ""},
    }
    pieces = [tool.arguments[i : i + 16] for i in range(0, len(tool.arguments), 16)]
    rest = [{"tool_calls": [{"index": 0, "function": {"arguments": piece}}]} for piece in pieces]
    return [{"role": "assistant", "content": None, "tool_calls": [opening]}, *rest]


def chat_stream(
    head: ReplyHeader, generation: Generation, usage: PromptUsage | None, chunks: int, include_usage: bool
) -> list[bytes]:
    """Every SSE frame of a streamed chat completion, `data: [DONE]` included."""
    base = head.envelope("chat.completion.chunk")
    if include_usage:
        base["usage"] = None
    per_choice = [_chat_deltas(generation, words, chunks) for words in generation.choices]
    frames: list[bytes] = []
    for position in range(max(len(deltas) for deltas in per_choice)):
        for index, deltas in enumerate(per_choice):
            if position < len(deltas):
                choice = {"index": index, "delta": deltas[position], "logprobs": None, "finish_reason": None}
                frames.append(frame({**base, "choices": [choice]}))
    finish = _finish_reason(generation)
    for index in range(len(per_choice)):
        frames.append(
            frame(
                {
                    **base,
                    "choices": [{"index": index, "delta": {}, "logprobs": None, "finish_reason": finish}],
                }
            )
        )
    if include_usage and usage is not None:
        frames.append(frame({**base, "choices": [], "usage": usage_object(usage, generation.total_tokens)}))
    frames.append(DONE_FRAME)
    return frames


def text_completion(head: ReplyHeader, generation: Generation, usage: PromptUsage | None) -> bytes:
    finish = _finish_reason(generation)
    choices = [
        {"index": i, "text": " ".join(words), "logprobs": None, "finish_reason": finish}
        for i, words in enumerate(generation.choices)
    ]
    body = {**head.envelope("text_completion"), "choices": choices}
    if usage is not None:
        body["usage"] = usage_object(usage, generation.total_tokens)
    return msgspec.json.encode(body)


def completion_stream(
    head: ReplyHeader, generation: Generation, usage: PromptUsage | None, chunks: int, include_usage: bool
) -> list[bytes]:
    base = head.envelope("text_completion")
    if include_usage:
        base["usage"] = None
    frames: list[bytes] = []
    for index, words in enumerate(generation.choices):
        for piece in split_pieces(words, chunks):
            choice = {"index": index, "text": piece, "logprobs": None, "finish_reason": None}
            frames.append(frame({**base, "choices": [choice]}))
        last = {"index": index, "text": "", "logprobs": None, "finish_reason": _finish_reason(generation)}
        frames.append(frame({**base, "choices": [last]}))
    if include_usage and usage is not None:
        frames.append(frame({**base, "choices": [], "usage": usage_object(usage, generation.total_tokens)}))
    frames.append(DONE_FRAME)
    return frames


def embeddings(body: dict[str, Any], model: str, prompt_tokens: int | None, omit_usage: bool) -> bytes:
    inputs = plain_texts(body.get("input"))
    requested = body.get("dimensions")
    dimensions = requested if isinstance(requested, int) and requested > 0 else 8
    as_base64 = body.get("encoding_format") == "base64"
    data = []
    for index, item in enumerate(inputs):
        vector = embedding_vector(item if isinstance(item, str) else repr(item), dimensions)
        encoded: Any = base64.b64encode(pack_float32(vector)).decode() if as_base64 else vector
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    result: dict[str, Any] = {"object": "list", "data": data, "model": model}
    tokens = plain_tokens(inputs) if prompt_tokens is None else prompt_tokens
    if not omit_usage:
        result["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
    return msgspec.json.encode(result)


def model_object(model_id: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": 1700000000, "owned_by": "mock"}


def models_list() -> bytes:
    return msgspec.json.encode({"object": "list", "data": [model_object(name) for name in MOCK_MODELS]})
