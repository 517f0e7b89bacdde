"""The Messages API (`POST /v1/messages`) at any provider: which adapter serves it there.

Anthropic-kind providers get the request as the client sent it (`native`); every other kind gets
it translated to a chat completion for its own chat adapter (`request`), and the chat answer
translated back (`response`, `stream`). Either way the reply names the alias asked for and carries
its cost (`usage.cost`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import msgspec

from gateway.dialects.messages.native import NativeMessagesAdapter, typed_request
from gateway.dialects.messages.request import to_chat_body, typed_chat
from gateway.dialects.messages.response import message_usage, to_message
from gateway.dialects.messages.stream import TranslatedMessageStream
from gateway.errors import UpstreamError
from gateway.providers.base import Endpoint, ProviderAdapter, UpstreamCall, UpstreamRequest, UpstreamResponse
from gateway.providers.cache_hints import derive_cache_key
from gateway.providers.openai.adapter import is_openai_api
from gateway.settings import Provider, ProviderKind


def messages_adapter(provider: Provider, chat_adapter: ProviderAdapter) -> ProviderAdapter:
    if provider.kind is ProviderKind.ANTHROPIC:
        return NativeMessagesAdapter()
    return TranslatedMessagesAdapter(chat_adapter, provider)


def _openai_own(provider: Provider, base_url: str) -> bool:
    """OpenAI's own API (and Azure's), as against an OpenAI-compatible server."""
    return provider.kind is ProviderKind.AZURE or is_openai_api(base_url)


def _max_tokens_field(provider: Provider, base_url: str) -> str:
    """OpenAI's own API wants `max_completion_tokens` (its reasoning models refuse `max_tokens`);
    OpenAI-compatible servers are sure to know `max_tokens`."""
    return "max_completion_tokens" if _openai_own(provider, base_url) else "max_tokens"


def _turn_role(provider: Provider, base_url: str) -> str:
    """The chat role of a system turn inside `messages`: OpenAI's own API names instructions given
    mid-conversation `developer`; every chat template knows `system`."""
    return "developer" if _openai_own(provider, base_url) else "system"


@dataclasses.dataclass(frozen=True, slots=True)
class TranslatedMessagesAdapter:
    """A Messages request served by a provider's chat adapter, translated both ways."""

    chat: ProviderAdapter
    provider: Provider

    def chat_call(self, call: UpstreamCall, base_url: str) -> UpstreamCall:
        """The chat completion call for `call`; it asks for usage (to meter and to answer with)."""
        body = to_chat_body(
            typed_request(call),
            call.body,
            max_tokens_field=_max_tokens_field(self.provider, base_url),
            turn_role=_turn_role(self.provider, base_url),
        )
        chat = typed_chat(body)
        return dataclasses.replace(
            call,
            endpoint=Endpoint.CHAT,
            body=body,
            chat=chat,
            client_wants_usage=True,
            cache_key=call.cache_key or derive_cache_key(call.team_id, chat),
        )

    def build_request(self, call: UpstreamCall, provider: Provider, base_url: str) -> UpstreamRequest:
        return self.chat.build_request(self.chat_call(call, base_url), provider, base_url)

    def parse_response(self, call: UpstreamCall, body: bytes) -> UpstreamResponse:
        inner = dataclasses.replace(call, endpoint=Endpoint.CHAT, client_wants_usage=True)
        answer = self.chat.parse_response(inner, body)
        usage = message_usage(answer.usage, call.tariff)
        message = to_message(answer.body, call.body["model"], usage, call.body.get("stop_sequences"))
        return UpstreamResponse(msgspec.json.encode(message), answer.usage, answer.untrusted_usage)

    def stream_translator(self, call: UpstreamCall) -> TranslatedMessageStream:
        inner = dataclasses.replace(call, endpoint=Endpoint.CHAT, client_wants_usage=True)
        return TranslatedMessageStream(
            self.chat.stream_translator(inner),
            call.body["model"],
            call.tariff,
            call.body.get("stop_sequences"),
        )

    def classify_error(self, status: int, body: bytes, headers: Mapping[str, str]) -> UpstreamError:
        return self.chat.classify_error(status, body, headers)
