"""Translate a chat completion stream into the Responses API's event sequence.

The chat adapter of the provider turns its upstream's events into chat chunks first (so an
Anthropic stream arrives here as chat chunks too); this translator turns those into
response.created and response.in_progress, then for each output item its output_item.added,
content_part.added and deltas, and, once the chat stream is over, every item's done events and
response.completed (or response.incomplete) carrying the usage. Every event has its
sequence_number, counted from 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypedDict

import msgspec
from msgspec import UNSET

from gateway.dialects.responses.request import responses_request
from gateway.dialects.responses.response import (
    IdSource,
    function_call_item,
    new_response,
    outcome,
    response_usage,
)
from gateway.dialects.responses.tools import NamespacedNames
from gateway.errors import UpstreamError
from gateway.providers.base import StreamTranslator, TokenUsage, UpstreamCall
from gateway.providers.errors import bad_response
from gateway.schemas.openai import ChatCompletionChunk, ChunkDelta, FunctionDelta, ToolCallDelta
from gateway.schemas.responses import (
    ContentPartAdded,
    ContentPartDone,
    FunctionCallArgumentsDelta,
    FunctionCallArgumentsDone,
    FunctionCallItem,
    OutputContent,
    OutputItem,
    OutputItemAdded,
    OutputItemDone,
    OutputMessage,
    OutputText,
    OutputTextDelta,
    OutputTextDone,
    Refusal,
    RefusalDelta,
    RefusalDone,
    ResponseCompleted,
    ResponseCreated,
    ResponseIncomplete,
    ResponseInProgress,
    ResponseStatus,
    StreamEvent,
)

_DONE = b"[DONE]"


def event_frame(event: StreamEvent) -> bytes:
    """One SSE frame as OpenAI sends Responses events: the `event:` line names the type."""
    tag = type(event).__struct_config__.tag
    return b"event: " + str(tag).encode() + b"\ndata: " + msgspec.json.encode(event) + b"\n\n"


# --- the output items being streamed ------------------------------------------------------------


@dataclass(slots=True)
class _StreamedPart:
    refusal: bool  # a refusal part, else output_text
    pieces: list[str] = field(default_factory=list)

    def content(self) -> OutputContent:
        text = "".join(self.pieces)
        return Refusal(refusal=text) if self.refusal else OutputText(text=text)


@dataclass(slots=True)
class _StreamedMessage:
    id: str
    output_index: int
    parts: list[_StreamedPart] = field(default_factory=list)
    open: bool = True
    status: ResponseStatus = "in_progress"  # set when the item is done

    def item(self, status: ResponseStatus) -> OutputMessage:
        return OutputMessage(id=self.id, status=status, content=[part.content() for part in self.parts])


@dataclass(slots=True)
class _StreamedFunctionCall:
    id: str
    output_index: int
    call_id: str
    name: str  # the chat call's: a namespace function's flattened name
    names: NamespacedNames
    arguments: list[str] = field(default_factory=list)
    open: bool = True

    def item(self, status: ResponseStatus) -> FunctionCallItem:
        return function_call_item(
            self.names,
            id=self.id,
            status=status,
            call_id=self.call_id,
            chat_name=self.name,
            arguments="".join(self.arguments),
        )


class _PartPosition(TypedDict):
    item_id: str
    output_index: int
    content_index: int


def _at(item_id: str, output_index: int, content_index: int) -> _PartPosition:
    return {"item_id": item_id, "output_index": output_index, "content_index": content_index}


class ChatToResponsesStream:
    """One stream's state: its output items, the chat finish reason, the next sequence number."""

    def __init__(
        self,
        call: UpstreamCall,
        chat: StreamTranslator,
        *,
        clock: Callable[[], float] = time.time,
        new_id: IdSource,
    ) -> None:
        self.usage: TokenUsage | None = None
        self.untrusted_usage: str | None = None
        self._call = call
        self._request = responses_request(call.body)
        self._names = NamespacedNames(self._request.tools)
        self._chat = chat
        self._clock = clock
        self._new_id = new_id
        self._id = new_id("resp_")
        self._created_at = 0
        self._sequence = 0
        self._started = False
        self._items: list[_StreamedMessage | _StreamedFunctionCall] = []
        self._message: _StreamedMessage | None = None  # the message item text is being added to
        self._calls: dict[int, _StreamedFunctionCall] = {}  # chat tool_calls index -> its item
        self._finish_reason: str | None = None
        self._done = False

    def feed(self, data: bytes) -> list[bytes]:
        frames = self._chat.feed(data)
        self.usage, self.untrusted_usage = self._chat.usage, self._chat.untrusted_usage
        events: list[StreamEvent] = []
        for frame in frames:
            events += self._chat_frame(frame)
        return [event_frame(event) for event in events]

    def finish(self) -> list[bytes]:
        if self._done:
            return []
        frames = self._chat.finish()  # an Anthropic stream cut short raises here
        self.usage, self.untrusted_usage = self._chat.usage, self._chat.untrusted_usage
        if self._finish_reason is None:
            raise UpstreamError("the upstream stream ended before the response was complete")
        events: list[StreamEvent] = []
        for frame in frames:
            events += self._chat_frame(frame)
        return [event_frame(event) for event in events + self._complete()]

    # --- chat chunks in -----------------------------------------------------------------------

    def _chat_frame(self, frame: bytes) -> list[StreamEvent]:
        if not frame.startswith(b"data: "):
            return []
        payload = frame[len(b"data: ") :].rstrip(b"\n")
        if payload == _DONE:
            return self._complete()
        try:
            chunk = msgspec.json.decode(payload, type=ChatCompletionChunk)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise bad_response("a stream chunk is not a chat completion chunk") from None
        events = self._start(chunk.created)
        for choice in chunk.choices:
            if choice.index != 0:
                continue  # n is never sent: one choice
            if choice.delta is not None:
                events += self._delta(choice.delta)
            self._finish_reason = choice.finish_reason or self._finish_reason
        return events

    def _delta(self, delta: ChunkDelta) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        if delta.content:
            events += self._text(delta.content, refusal=False)
        if delta.refusal:
            events += self._text(delta.refusal, refusal=True)
        for call in delta.tool_calls or ():
            events += self._tool_call(call)
        return events

    # --- events out ---------------------------------------------------------------------------

    def _next(self) -> int:
        self._sequence += 1
        return self._sequence - 1

    def _start(self, created: int | None) -> list[StreamEvent]:
        if self._started:
            return []
        self._started = True
        self._created_at = created or int(self._clock())
        response = new_response(
            self._request, response_id=self._id, created_at=self._created_at, status="in_progress", output=[]
        )
        return [
            ResponseCreated(sequence_number=self._next(), response=response),
            ResponseInProgress(sequence_number=self._next(), response=response),
        ]

    def _text(self, text: str, *, refusal: bool) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        message = self._message
        if message is None:
            message = self._message = _StreamedMessage(self._new_id("msg_"), len(self._items))
            self._items.append(message)
            item = message.item("in_progress")
            events.append(
                OutputItemAdded(sequence_number=self._next(), output_index=message.output_index, item=item)
            )
        if not message.parts or message.parts[-1].refusal != refusal:
            message.parts.append(_StreamedPart(refusal))
            events.append(
                ContentPartAdded(
                    sequence_number=self._next(),
                    item_id=message.id,
                    output_index=message.output_index,
                    content_index=len(message.parts) - 1,
                    part=Refusal(refusal="") if refusal else OutputText(text=""),
                )
            )
        message.parts[-1].pieces.append(text)
        index = len(message.parts) - 1
        delta = RefusalDelta if refusal else OutputTextDelta
        events.append(
            delta(
                sequence_number=self._next(),
                item_id=message.id,
                output_index=message.output_index,
                content_index=index,
                delta=text,
            )
        )
        return events

    def _tool_call(self, delta: ToolCallDelta) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        call = self._calls.get(delta.index)
        function = delta.function or FunctionDelta()
        if call is None:
            # Chat streams one call after the other, after any text: the items before are complete.
            for earlier in self._items:
                if earlier.open:
                    events += self._close(earlier, "completed")
            self._message = None
            call = _StreamedFunctionCall(
                id=self._new_id("fc_"),
                output_index=len(self._items),
                call_id=delta.id or self._new_id("call_"),
                name=function.name or "",
                names=self._names,
            )
            self._calls[delta.index] = call
            self._items.append(call)
            added = OutputItemAdded(
                sequence_number=self._next(), output_index=call.output_index, item=call.item("in_progress")
            )
            events.append(added)
        elif function.name:
            call.name += function.name
        if function.arguments:
            call.arguments.append(function.arguments)
            events.append(
                FunctionCallArgumentsDelta(
                    sequence_number=self._next(),
                    item_id=call.id,
                    output_index=call.output_index,
                    delta=function.arguments,
                )
            )
        return events

    def _close(
        self, item: _StreamedMessage | _StreamedFunctionCall, status: ResponseStatus
    ) -> list[StreamEvent]:
        """The done events of one output item."""
        item.open = False
        events: list[StreamEvent] = []
        if isinstance(item, _StreamedFunctionCall):
            done = item.item("completed")
            events.append(
                FunctionCallArgumentsDone(
                    sequence_number=self._next(),
                    item_id=item.id,
                    output_index=item.output_index,
                    name=done.name,
                    arguments=done.arguments,
                )
            )
            events.append(
                OutputItemDone(sequence_number=self._next(), output_index=item.output_index, item=done)
            )
            return events
        for index, part in enumerate(item.parts):
            content = part.content()
            at = (item.id, item.output_index, index)
            if isinstance(content, Refusal):
                events.append(RefusalDone(sequence_number=self._next(), refusal=content.refusal, **_at(*at)))
            else:
                events.append(OutputTextDone(sequence_number=self._next(), text=content.text, **_at(*at)))
            events.append(ContentPartDone(sequence_number=self._next(), part=content, **_at(*at)))
        item.status = status
        message = item.item(status)
        events.append(
            OutputItemDone(sequence_number=self._next(), output_index=item.output_index, item=message)
        )
        return events

    def _complete(self) -> list[StreamEvent]:
        if self._done:
            return []
        self._done = True
        events = self._start(None)
        status, incomplete = outcome(self._finish_reason)
        for item in self._items:
            if item.open:
                events += self._close(item, status)
        output: list[OutputItem] = [
            item.item("completed") if isinstance(item, _StreamedFunctionCall) else item.item(item.status)
            for item in self._items
        ]
        response = new_response(
            self._request,
            response_id=self._id,
            created_at=self._created_at,
            status=status,
            output=output,
            usage=response_usage(self._call, self.usage) if self.usage is not None else UNSET,
            incomplete=incomplete,
        )
        if status == "incomplete":
            events.append(ResponseIncomplete(sequence_number=self._next(), response=response))
        else:
            events.append(ResponseCompleted(sequence_number=self._next(), response=response))
        return events
