"""Translate an Anthropic Messages API event stream into OpenAI `chat.completion.chunk` frames.

message_start opens the assistant turn; text and tool-use blocks become content and tool_calls
deltas; message_delta carries the stop reason and output usage; message_stop ends the stream with
the finish chunk, the usage chunk (only if the client asked for it) and `[DONE]`.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec
from msgspec import UNSET, UnsetType

from gateway.errors import UpstreamError
from gateway.providers.anthropic_response import finish_reason, normalise_usage, stream_error
from gateway.providers.anthropic_wire import ErrorObject, StreamEvent, Usage
from gateway.providers.base import TokenUsage, UpstreamCall
from gateway.providers.chat_output import (
    ChatCompletionChunk,
    ChunkChoice,
    ChunkDelta,
    CompletionUsage,
    FinishReason,
    FunctionDelta,
    ToolCallDelta,
)
from gateway.providers.openai import DONE_FRAME, sse_frame
from gateway.providers.upstream_errors import bad_response
from gateway.providers.usage_bounds import UntrustedUsage


class AnthropicStreamTranslator:
    """One stream's state: the message id, which blocks are tool calls, the usage seen so far."""

    def __init__(self, call: UpstreamCall, clock: Callable[[], float]) -> None:
        self.usage: TokenUsage | None = None
        self.untrusted_usage: str | None = None
        self._wants_usage = call.client_wants_usage
        self._id = ""
        self._model = call.upstream_model
        self._created = int(clock())
        self._start_usage = Usage()
        self._tool_calls: dict[int, int] = {}  # content block index -> OpenAI tool_calls index
        self._stop_reason: str | None = None
        self._finished = False

    def feed(self, data: bytes) -> list[bytes]:
        try:
            event = msgspec.json.decode(data, type=StreamEvent)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise bad_response("a stream event is not an Anthropic event") from None
        if event.type == "message_start":
            return self._message_start(event)
        if event.type == "content_block_start":
            return self._block_start(event)
        if event.type == "content_block_delta":
            return self._block_delta(event)
        if event.type == "message_delta":
            return self._message_delta(event)
        if event.type == "message_stop":
            return self._final_frames()
        if event.type == "error":
            raise stream_error(event.error or ErrorObject())
        return []  # ping, content_block_stop, and event types added after this was written

    def finish(self) -> list[bytes]:
        if self._finished:
            return []
        if self._stop_reason is not None:
            return self._final_frames()  # message_delta arrived: the message itself is complete
        raise UpstreamError("the upstream stream ended before the message was complete")

    def _message_start(self, event: StreamEvent) -> list[bytes]:
        if event.message is not None:
            self._id = event.message.id
            self._model = event.message.model or self._model
            self._start_usage = event.message.usage or Usage()
            self._note_usage(self._start_usage)
        return [self._chunk(ChunkDelta(role="assistant", content=""))]

    def _block_start(self, event: StreamEvent) -> list[bytes]:
        block = event.content_block
        if block is None or event.index is None:
            return []
        if block.type == "text" and block.text:
            return [self._chunk(ChunkDelta(content=block.text))]
        if block.type != "tool_use":
            return []
        position = self._tool_calls[event.index] = len(self._tool_calls)
        call = ToolCallDelta(
            index=position,
            id=block.id or "",
            type="function",
            function=FunctionDelta(name=block.name or "", arguments=""),
        )
        return [self._chunk(ChunkDelta(tool_calls=[call]))]

    def _block_delta(self, event: StreamEvent) -> list[bytes]:
        delta = event.delta
        if delta is None:
            return []
        if delta.type == "text_delta" and delta.text:
            return [self._chunk(ChunkDelta(content=delta.text))]
        position = self._tool_calls.get(event.index) if event.index is not None else None
        if delta.type == "input_json_delta" and delta.partial_json and position is not None:
            call = ToolCallDelta(index=position, function=FunctionDelta(arguments=delta.partial_json))
            return [self._chunk(ChunkDelta(tool_calls=[call]))]
        return []  # thinking and signature deltas have no OpenAI chat equivalent

    def _message_delta(self, event: StreamEvent) -> list[bytes]:
        if event.delta is not None and event.delta.stop_reason is not None:
            self._stop_reason = event.delta.stop_reason
        if event.usage is not None:
            self._note_usage(_merged(self._start_usage, event.usage))
        return []

    def _note_usage(self, usage: Usage) -> None:
        try:
            self.usage, self.untrusted_usage = normalise_usage(usage), None
        except UntrustedUsage as exc:
            self.usage, self.untrusted_usage = None, str(exc)

    def _final_frames(self) -> list[bytes]:
        if self._finished:
            return []
        self._finished = True
        frames = [self._chunk(ChunkDelta(), finish_reason(self._stop_reason))]
        if self._wants_usage:
            frames.append(self._frame([], CompletionUsage.of(self.usage or TokenUsage())))
        frames.append(DONE_FRAME)
        return frames

    def _chunk(self, delta: ChunkDelta, reason: FinishReason | None = None) -> bytes:
        return self._frame([ChunkChoice(delta=delta, finish_reason=reason)])

    def _frame(self, choices: list[ChunkChoice], usage: CompletionUsage | UnsetType = UNSET) -> bytes:
        chunk = ChatCompletionChunk(
            id=self._id, created=self._created, model=self._model, choices=choices, usage=usage
        )
        return sse_frame(msgspec.json.encode(chunk))


def _merged(start: Usage, delta: Usage) -> Usage:
    """message_delta's counts are cumulative; fields it leaves out keep message_start's value."""
    return Usage(
        input_tokens=delta.input_tokens if delta.input_tokens is not None else start.input_tokens,
        output_tokens=delta.output_tokens if delta.output_tokens is not None else start.output_tokens,
        cache_read_input_tokens=(
            delta.cache_read_input_tokens
            if delta.cache_read_input_tokens is not None
            else start.cache_read_input_tokens
        ),
        cache_creation_input_tokens=(
            delta.cache_creation_input_tokens
            if delta.cache_creation_input_tokens is not None
            else start.cache_creation_input_tokens
        ),
    )
