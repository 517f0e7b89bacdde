"""Translate an Anthropic Messages API event stream into OpenAI `chat.completion.chunk` frames.

message_start opens the assistant turn; text and tool-use blocks become content and tool_calls
deltas; message_delta carries the stop reason and output usage; message_stop ends the stream with
the finish chunk, the usage chunk (only if the client asked for it) and `[DONE]`. When the client
asked for JSON, the answer tool's input_json_delta pieces become content deltas instead.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import msgspec
from msgspec import UNSET, UnsetType

from gateway.errors import UpstreamError
from gateway.providers.anthropic.response import (
    FinishReason,
    ReplyContext,
    finish_reason,
    merged_usage,
    normalise_usage,
    served_tier,
    stream_error,
    usage_object,
)
from gateway.providers.base import TokenUsage
from gateway.providers.errors import bad_response
from gateway.providers.openai.adapter import DONE_FRAME, sse_frame
from gateway.providers.usage_bounds import UntrustedUsage
from gateway.schemas.anthropic import UpstreamErrorObject, UpstreamEvent, UpstreamUsage
from gateway.schemas.openai import (
    ChatCompletionChunk,
    ChunkChoice,
    ChunkDelta,
    FunctionDelta,
    ToolCallDelta,
    Usage,
)


class AnthropicStreamTranslator:
    """One stream's state: the message id, which blocks are tool calls or the answer, the usage seen
    so far."""

    def __init__(self, reply: ReplyContext, wants_usage: bool, clock: Callable[[], float]) -> None:
        self.usage: TokenUsage | None = None
        self.untrusted_usage: str | None = None
        self.cost: Decimal | None = None  # what `usage` costs: the usage chunk's and the record's
        self.service_tier: str | None = None  # the tier message_start's usage says served it
        self._reply = reply
        self._wants_usage = wants_usage
        self._id = ""
        self._created = int(clock())
        self._start_usage = UpstreamUsage()
        self._tool_calls: dict[int, int] = {}  # content block index -> OpenAI tool_calls index
        self._answer: int | None = None  # the content block index of the answer tool's call
        self._answered = False  # some of the answer's JSON was sent
        self._stop_reason: str | None = None
        self._finished = False

    def feed(self, data: bytes) -> list[bytes]:
        try:
            event = msgspec.json.decode(data, type=UpstreamEvent)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise bad_response("a stream event is not an Anthropic event") from None
        if event.type == "message_start":
            return self._message_start(event)
        if event.type == "content_block_start":
            return self._block_start(event)
        if event.type == "content_block_delta":
            return self._block_delta(event)
        if event.type == "content_block_stop":
            return self._block_stop(event)
        if event.type == "message_delta":
            return self._message_delta(event)
        if event.type == "message_stop":
            return self._final_frames()
        if event.type == "error":
            raise stream_error(event.error or UpstreamErrorObject())
        return []  # ping, and event types added after this was written

    def finish(self) -> list[bytes]:
        if self._finished:
            return []
        if self._stop_reason is not None:
            return self._final_frames()  # message_delta arrived: the message itself is complete
        raise UpstreamError("the upstream stream ended before the message was complete")

    def _message_start(self, event: UpstreamEvent) -> list[bytes]:
        if event.message is not None:
            self._id = event.message.id
            if event.message.usage is not None:  # none at all is no count of 0: it is estimated
                self._start_usage = event.message.usage
                self._note_usage(self._start_usage)
        return [self._chunk(ChunkDelta(role="assistant", content=""))]

    def _block_start(self, event: UpstreamEvent) -> list[bytes]:
        block = event.content_block
        if block is None or event.index is None:
            return []
        answering = self._reply.answer_tool is not None
        if block.type == "text" and block.text and not answering:
            return [self._chunk(ChunkDelta(content=block.text))]
        if block.type != "tool_use":
            return []
        if answering and block.name == self._reply.answer_tool:
            if self._answer is None:  # a second answer would make the content two JSON values
                self._answer = event.index
            return []
        position = self._tool_calls[event.index] = len(self._tool_calls)
        call = ToolCallDelta(
            index=position,
            id=block.id or "",
            type="function",
            function=FunctionDelta(name=block.name or "", arguments=""),
        )
        return [self._chunk(ChunkDelta(tool_calls=[call]))]

    def _block_delta(self, event: UpstreamEvent) -> list[bytes]:
        delta = event.delta
        if delta is None:
            return []
        if delta.type == "text_delta" and delta.text and self._reply.answer_tool is None:
            return [self._chunk(ChunkDelta(content=delta.text))]
        if delta.type == "input_json_delta" and delta.partial_json and self._is_answer(event):
            self._answered = True
            return [self._chunk(ChunkDelta(content=delta.partial_json))]
        position = self._tool_calls.get(event.index) if event.index is not None else None
        if delta.type == "input_json_delta" and delta.partial_json and position is not None:
            call = ToolCallDelta(index=position, function=FunctionDelta(arguments=delta.partial_json))
            return [self._chunk(ChunkDelta(tool_calls=[call]))]
        return []  # thinking and signature deltas have no OpenAI chat equivalent

    def _block_stop(self, event: UpstreamEvent) -> list[bytes]:
        if not self._is_answer(event) or self._answered:
            return []
        self._answered = True  # an empty input streams no JSON at all; the content must still parse
        return [self._chunk(ChunkDelta(content="{}"))]

    def _is_answer(self, event: UpstreamEvent) -> bool:
        return self._answer is not None and event.index == self._answer

    def _message_delta(self, event: UpstreamEvent) -> list[bytes]:
        if event.delta is not None and event.delta.stop_reason is not None:
            self._stop_reason = event.delta.stop_reason
        if event.usage is not None:
            self._note_usage(merged_usage(self._start_usage, event.usage))
        return []

    def _note_usage(self, usage: UpstreamUsage) -> None:
        try:
            self.usage, self.untrusted_usage = normalise_usage(usage), None
        except UntrustedUsage as exc:
            self.usage, self.untrusted_usage = None, str(exc)
        self.service_tier = served_tier(usage) or self.service_tier
        self.cost = self._reply.cost(self.usage, self.service_tier)

    def _final_frames(self) -> list[bytes]:
        if self._finished:
            return []
        self._finished = True
        frames = [self._chunk(ChunkDelta(), finish_reason(self._stop_reason, bool(self._tool_calls)))]
        if self._wants_usage:
            frames.append(self._frame([], usage_object(self.usage or TokenUsage(), self.cost)))
        frames.append(DONE_FRAME)
        return frames

    def _chunk(self, delta: ChunkDelta, reason: FinishReason | None = None) -> bytes:
        return self._frame([ChunkChoice(delta=delta, finish_reason=reason)])

    def _frame(self, choices: list[ChunkChoice], usage: Usage | UnsetType = UNSET) -> bytes:
        chunk = ChatCompletionChunk(
            id=self._id, created=self._created, model=self._reply.model, choices=choices, usage=usage
        )
        return sse_frame(msgspec.json.encode(chunk))
