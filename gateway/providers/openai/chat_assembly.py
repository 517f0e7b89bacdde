"""OpenAI chat completion chunks assembled into the one chat completion a non-streaming upstream
would have answered, for providers with `measure_ttft` (the gateway streams from them to see the
first token). Pure: `feed` each SSE event's data, then take the `body()`.

The choices' content, refusal, tool calls and finish reason are assembled, and the usage chunk is
kept verbatim; `logprobs` are not (the executor does not stream a request that asks for them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from gateway.errors import UpstreamError
from gateway.providers.errors import bad_response
from gateway.schemas.openai import ChunkDelta, ChunkWithRawUsage, FunctionDelta


@dataclass(slots=True)
class _AssembledToolCall:
    id: str | None = None
    type: str = "function"
    name: str = ""
    arguments: list[str] = field(default_factory=list)

    def message_part(self) -> dict[str, Any]:
        function = {"name": self.name, "arguments": "".join(self.arguments)}
        return {"id": self.id, "type": self.type, "function": function}


@dataclass(slots=True)
class _AssembledChoice:
    role: str = "assistant"
    content: list[str] | None = None  # None until a content delta came (then "" is a real answer)
    refusal: list[str] | None = None
    tool_calls: dict[int, _AssembledToolCall] = field(default_factory=dict)
    finish_reason: str | None = None

    def add(self, delta: ChunkDelta) -> bool:
        """Take one delta; True when it carried output (a token of content, refusal or a tool call)."""
        self.role = delta.role or self.role
        if delta.content is not None:  # appended in place: a copy a token is quadratic in the answer
            if self.content is None:
                self.content = []
            self.content.append(delta.content)
        if delta.refusal is not None:
            if self.refusal is None:
                self.refusal = []
            self.refusal.append(delta.refusal)
        for part in delta.tool_calls or []:
            call = self.tool_calls.setdefault(part.index, _AssembledToolCall())
            call.id = part.id or call.id
            call.type = part.type or call.type
            if isinstance(part.function, FunctionDelta):
                call.name += part.function.name or ""
                call.arguments.append(part.function.arguments or "")
        return bool(delta.content or delta.refusal or delta.tool_calls)

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": self.role,
            "content": None if self.content is None else "".join(self.content),
            "refusal": None if self.refusal is None else "".join(self.refusal),
        }
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[i].message_part() for i in sorted(self.tool_calls)]
        return message


class ChatAssembly:
    """The chunks of one streamed chat completion, assembled as they are fed."""

    def __init__(self) -> None:
        self._head: dict[str, Any] = {}
        self._choices: dict[int, _AssembledChoice] = {}
        self._usage: msgspec.Raw | None = None
        self.has_output = False  # a chunk with a first token has been fed

    def feed(self, data: bytes) -> bool:
        """Take one SSE event's data; True when it is the first to carry output (the first token)."""
        if data.strip() == b"[DONE]":
            return False
        try:
            chunk = msgspec.json.decode(data, type=ChunkWithRawUsage)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise bad_response("a stream chunk is not a JSON object") from None
        if chunk.error is not None and not chunk.choices:
            message = chunk.error if isinstance(chunk.error, str) else chunk.error.message
            raise UpstreamError(f"the upstream reported an error: {message or 'no message'}")
        self._note_head(chunk)
        if bytes(chunk.usage) != b"null":
            self._usage = chunk.usage
        output = False
        for part in chunk.choices:
            choice = self._choices.setdefault(part.index, _AssembledChoice())
            if part.delta is not None:
                output = choice.add(part.delta) or output
            choice.finish_reason = part.finish_reason or choice.finish_reason
        first = output and not self.has_output
        self.has_output = self.has_output or output
        return first

    def _note_head(self, chunk: ChunkWithRawUsage) -> None:
        for name in ("id", "created", "model", "system_fingerprint", "service_tier"):
            value = getattr(chunk, name)
            if value is not None:
                self._head.setdefault(name, value)

    def body(self) -> bytes:
        """The chat completion as JSON, in the order of OpenAI's own non-streaming answer."""
        if "id" not in self._head:
            raise bad_response("the stream ended before its first chunk")
        completion: dict[str, Any] = {
            "id": self._head["id"],
            "object": "chat.completion",
            "created": self._head.get("created", 0),
            "model": self._head.get("model", ""),
            "choices": [
                {
                    "index": index,
                    "message": choice.message(),
                    "logprobs": None,
                    "finish_reason": choice.finish_reason,
                }
                for index, choice in sorted(self._choices.items())
            ],
        }
        for name in ("system_fingerprint", "service_tier"):
            if name in self._head:
                completion[name] = self._head[name]
        if self._usage is not None:
            completion["usage"] = self._usage
        return msgspec.json.encode(completion)
