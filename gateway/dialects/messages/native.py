"""The Messages API passed through to an Anthropic-kind provider, as the client sent it.

Only `model` changes on the way up (the deployment's upstream model), and the client's
`anthropic-beta` header goes with it (`betas`); on the way down the reply
names the alias again and its usage carries the gateway's cost. Usage is read from the message, or
from a stream's message_start and message_delta events (cumulative counts).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec

from gateway.dialects.messages.betas import with_betas
from gateway.dialects.messages.sse import raw_frame
from gateway.errors import InvalidRequest, UpstreamError
from gateway.providers.anthropic.adapter import anthropic_headers
from gateway.providers.anthropic.cache import check_breakpoints
from gateway.providers.anthropic.response import (
    anthropic_error_detail,
    merged_usage,
    normalise_usage,
    served_tier,
    stream_error,
)
from gateway.providers.base import TokenUsage, UpstreamCall, UpstreamRequest, UpstreamResponse
from gateway.providers.errors import bad_response, classify_status
from gateway.providers.usage_bounds import UntrustedUsage
from gateway.schemas.anthropic import (
    MessagesRequest,
    UpstreamErrorObject,
    UpstreamEvent,
    UpstreamEventType,
    UpstreamMessage,
    UpstreamUsage,
)
from gateway.settings import Provider

_DECODER = msgspec.json.Decoder(dict[str, Any])


_TYPED = msgspec.json.Decoder(UpstreamEventType)  # most events need no more than their type
_EVENT_TYPE = re.compile(r"[a-z_]{1,64}")


def typed_request(call: UpstreamCall) -> MessagesRequest:
    try:
        return msgspec.convert(call.body, MessagesRequest)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(f"invalid Messages API request: {exc}") from None


class NativeMessagesAdapter:
    """Speaks the Messages API to a provider that serves it (kind anthropic)."""

    def build_request(self, call: UpstreamCall, provider: Provider, base_url: str) -> UpstreamRequest:
        check_breakpoints(typed_request(call))
        headers = with_betas(anthropic_headers(provider), call.anthropic_beta, provider)
        return UpstreamRequest(
            url=f"{base_url.rstrip('/')}/v1/messages",
            headers={"content-type": "application/json", **headers},
            content=msgspec.json.encode({**call.body, "model": call.upstream_model}),
        )

    def parse_response(self, call: UpstreamCall, body: bytes) -> UpstreamResponse:
        try:
            document = _DECODER.decode(body)
            response = msgspec.convert(document, UpstreamMessage)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise bad_response("not an Anthropic message") from None
        if response.type == "error" or response.error is not None:
            raise stream_error(response.error or UpstreamErrorObject())
        usage, untrusted = _believed(response.usage)
        tier = served_tier(response.usage)
        document["model"] = call.body["model"]
        if usage is not None and call.tariff is not None and isinstance(document.get("usage"), dict):
            tariff = call.tariff if tier is None else call.tariff.tier(tier)
            document["usage"]["cost"] = format(tariff.cost(usage), "f")
        return UpstreamResponse(
            body=msgspec.json.encode(document), usage=usage, untrusted_usage=untrusted, service_tier=tier
        )

    def stream_translator(self, call: UpstreamCall) -> NativeMessageStream:
        return NativeMessageStream(call)

    def classify_error(self, status: int, body: bytes, headers: Mapping[str, str]) -> UpstreamError:
        return classify_status(status, anthropic_error_detail(body), headers)


def _believed(usage: UpstreamUsage | None) -> tuple[TokenUsage | None, str | None]:
    """(the counts, None), or (None, why) when one cannot be true; (None, None) without any."""
    if usage is None:
        return None, None
    try:
        return normalise_usage(usage), None
    except UntrustedUsage as exc:
        return None, str(exc)


class NativeMessageStream:
    """Re-emits each event with its `event:` line; rewrites only message_start (the model) and
    message_delta (the cost of the whole message)."""

    def __init__(self, call: UpstreamCall) -> None:
        self.usage: TokenUsage | None = None
        self.untrusted_usage: str | None = None
        self.service_tier: str | None = None  # the tier message_start's usage says served it
        self._model = call.body["model"]
        self._tariff = call.tariff
        self._start_usage = UpstreamUsage()
        self._stop_reason: str | None = None
        self._done = False

    def feed(self, data: bytes) -> list[bytes]:
        try:
            kind = _TYPED.decode(data).type
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise bad_response("a stream event is not an Anthropic event") from None
        if not _EVENT_TYPE.fullmatch(kind):  # it becomes the frame's `event:` line
            raise bad_response("a stream event without a readable type")
        if kind == "message_start":
            return [raw_frame(b"message_start", self._message_start(*_event(data)))]
        if kind == "message_delta":
            return [raw_frame(b"message_delta", self._message_delta(*_event(data)))]
        if kind == "error":
            raise stream_error(_event(data)[1].error or UpstreamErrorObject())
        if kind == "message_stop":
            self._done = True
        return [raw_frame(kind.encode(), data)]

    def finish(self) -> list[bytes]:
        if self._done:
            return []
        if self._stop_reason is None:
            raise UpstreamError("the upstream stream ended before the message was complete")
        self._done = True  # message_delta arrived: the message itself is complete
        return [raw_frame(b"message_stop", b'{"type":"message_stop"}')]

    def _message_start(self, document: dict[str, Any], event: UpstreamEvent) -> bytes:
        if event.message is not None and isinstance(document.get("message"), dict):
            if event.message.usage is not None:  # none at all is no count of 0: it is estimated
                self._start_usage = event.message.usage
                self._note(self._start_usage)
            document["message"]["model"] = self._model
        return msgspec.json.encode(document)

    def _message_delta(self, document: dict[str, Any], event: UpstreamEvent) -> bytes:
        if event.delta is not None and event.delta.stop_reason is not None:
            self._stop_reason = event.delta.stop_reason
        if event.usage is not None:
            self._note(merged_usage(self._start_usage, event.usage))
            if (
                self.usage is not None
                and self._tariff is not None
                and isinstance(document.get("usage"), dict)
            ):
                tariff = self._tariff if self.service_tier is None else self._tariff.tier(self.service_tier)
                document["usage"]["cost"] = format(tariff.cost(self.usage), "f")
        return msgspec.json.encode(document)

    def _note(self, usage: UpstreamUsage) -> None:
        self.usage, self.untrusted_usage = _believed(usage)
        self.service_tier = served_tier(usage) or self.service_tier


def _event(data: bytes) -> tuple[dict[str, Any], UpstreamEvent]:
    """The event as a document to re-encode, and its typed view."""
    try:
        document = _DECODER.decode(data)
        return document, msgspec.convert(document, UpstreamEvent)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise bad_response("a stream event is not an Anthropic event") from None
