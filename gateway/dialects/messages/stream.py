"""Translate an OpenAI chat completion stream into Anthropic's Messages event stream.

The chat adapter's own translator reads the upstream's chunks first (usage, in-band errors); its
frames are then re-told as message_start and ping, a content block per text run or tool call
(content_block_start, text_delta / input_json_delta deltas, content_block_stop), and once the
stream is over message_delta (stop reason, the whole usage, its cost) and message_stop.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.dialects.messages.response import message_id, message_usage, stop_reason
from gateway.dialects.messages.sse import event_frame
from gateway.errors import UpstreamError
from gateway.providers.base import Pricing, StreamTranslator, TokenUsage
from gateway.providers.errors import bad_response
from gateway.schemas.anthropic import (
    ContentBlockDelta,
    ContentBlockStart,
    ContentBlockStop,
    InputJsonDelta,
    MessageDelta,
    MessageDeltaBody,
    MessageOut,
    MessageStart,
    MessageStop,
    MessageUsage,
    Ping,
    TextDelta,
    TextOut,
    ToolUseOut,
)
from gateway.schemas.openai import ChatCompletionChunk, ChunkDelta, FunctionDelta, ToolCallDelta

_DONE = b"[DONE]"


class TranslatedMessageStream:
    """One stream's state: which content block is open, which tool call each block is."""

    def __init__(
        self, chat: StreamTranslator, model: str, tariff: Pricing | None, stop_sequences: list[str] | None
    ) -> None:
        self._chat = chat
        self.usage: TokenUsage | None = None
        self.untrusted_usage: str | None = None
        self._model = model
        self._tariff = tariff
        self._stop_sequences = stop_sequences
        self._started = False
        self._blocks = 0  # content blocks started so far
        self._open: int | None = None  # the block being written
        self._text_block: int | None = None  # the open block, when it is text
        self._tool_blocks: dict[int, int] = {}  # chat tool_calls index -> content block index
        self._finish: tuple[str | None, Any] | None = None  # the finish reason and stop string
        self._refused = False
        self._done = False

    def feed(self, data: bytes) -> list[bytes]:
        try:
            return self._retell(self._chat.feed(data))
        finally:
            self._sync_usage()

    def _sync_usage(self) -> None:
        """The chat translator judges the counts; this stream reports what it kept."""
        self.usage, self.untrusted_usage = self._chat.usage, self._chat.untrusted_usage

    def finish(self) -> list[bytes]:
        if self._done:
            return []
        if self._finish is None:  # no finish reason, no [DONE]: the message was cut short
            raise UpstreamError("the upstream stream ended before the message was complete")
        try:
            frames = self._retell(self._chat.finish())
        finally:
            self._sync_usage()
        return frames + self._final()

    def _retell(self, chat_frames: list[bytes]) -> list[bytes]:
        frames: list[bytes] = []
        for frame in chat_frames:
            data = frame.removeprefix(b"data: ").rstrip(b"\n")
            if data == _DONE:
                frames += self._final()
            elif not self._done:
                frames += self._chunk(_decode(data))
        return frames

    def _chunk(self, chunk: ChatCompletionChunk) -> list[bytes]:
        frames = self._start(chunk.id or "")
        for choice in chunk.choices:
            if choice.index != 0:
                continue  # Messages has no `n`: only the first choice is told
            delta = choice.delta or ChunkDelta()
            text = delta.content or delta.refusal
            if delta.refusal:
                self._refused = True
            if text:
                frames += self._text(text)
            for call in delta.tool_calls or ():
                frames += self._tool_call(call)
            if choice.finish_reason is not None:
                self._finish = (choice.finish_reason, choice.stop_reason)
        return frames

    def _start(self, chat_id: str) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        message = MessageOut(id=message_id(chat_id), model=self._model, content=[], usage=MessageUsage())
        return [event_frame(MessageStart(message=message)), event_frame(Ping())]

    def _text(self, text: str) -> list[bytes]:
        frames: list[bytes] = []
        if self._text_block is None:
            frames += self._close()
            self._text_block = self._open = self._blocks
            self._blocks += 1
            frames.append(event_frame(ContentBlockStart(index=self._open, content_block=TextOut(text=""))))
        return [*frames, event_frame(ContentBlockDelta(index=self._text_block, delta=TextDelta(text=text)))]

    def _tool_call(self, call: ToolCallDelta) -> list[bytes]:
        frames: list[bytes] = []
        function = call.function or FunctionDelta()
        block = self._tool_blocks.get(call.index)
        if block is None:
            frames += self._close()
            block = self._tool_blocks[call.index] = self._open = self._blocks
            self._blocks += 1
            started = ToolUseOut(id=call.id or "", name=function.name or "", input={})
            frames.append(event_frame(ContentBlockStart(index=block, content_block=started)))
        if function.arguments:
            delta = InputJsonDelta(partial_json=function.arguments)
            frames.append(event_frame(ContentBlockDelta(index=block, delta=delta)))
        return frames

    def _close(self) -> list[bytes]:
        if self._open is None:
            return []
        closed, self._open, self._text_block = self._open, None, None
        return [event_frame(ContentBlockStop(index=closed))]

    def _final(self) -> list[bytes]:
        if self._done:
            return []
        frames = self._start("") + self._close()
        self._done = True
        finish_reason, stop_string = self._finish or (None, None)
        if self._refused and finish_reason == "stop":
            finish_reason = "content_filter"
        reason, sequence = stop_reason(
            finish_reason, stop_string, self._stop_sequences, bool(self._tool_blocks)
        )
        usage = message_usage(self._chat.usage, self._tariff)
        delta = MessageDelta(delta=MessageDeltaBody(stop_reason=reason, stop_sequence=sequence), usage=usage)
        return [*frames, event_frame(delta), event_frame(MessageStop())]


def _decode(data: bytes) -> ChatCompletionChunk:
    try:
        return msgspec.json.decode(data, type=ChatCompletionChunk)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise bad_response("a stream chunk is not a chat completion chunk") from None
