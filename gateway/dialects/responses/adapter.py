"""OpenAI's Responses API at any provider: passed through where the upstream serves it, translated
to the provider's chat API elsewhere.

The provider's `responses_api` setting chooses: `native` (gateway.dialects.responses.native),
`chat` (this module's TranslatedResponsesAdapter, which hands a chat completion request to the
provider's own chat adapter and turns its answer into a Response), or `auto`: native for Azure and
for api.openai.com, chat for every other server (vLLM, SGLang, TGI and most OpenAI-compatible
servers have no Responses API), the mock kind and Anthropic.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import msgspec

from gateway.dialects.responses.native import NativeResponsesAdapter
from gateway.dialects.responses.request import responses_request, to_chat_request
from gateway.dialects.responses.response import IdSource, random_id, response_from_chat
from gateway.dialects.responses.stream import ChatToResponsesStream
from gateway.dialects.responses.tools import dropped_header, dropped_tools
from gateway.errors import UpstreamError
from gateway.providers.base import (
    Endpoint,
    ProviderAdapter,
    StreamTranslator,
    UpstreamCall,
    UpstreamRequest,
    UpstreamResponse,
)
from gateway.providers.cache_hints import derive_cache_key
from gateway.providers.openai.adapter import OpenAIAdapter, is_openai_api
from gateway.schemas.responses import ResponsesRequest
from gateway.settings import Provider, ProviderKind


def serves_responses_natively(provider: Provider) -> bool:
    """Whether /v1/responses goes to the provider's own Responses API (its `responses_api`)."""
    if provider.responses_api != "auto":
        return provider.responses_api == "native"
    if provider.kind is ProviderKind.AZURE:
        return True
    return (
        provider.kind is ProviderKind.OPENAI
        and bool(provider.urls)
        and all(is_openai_api(url) for url in provider.urls)
    )


def responses_adapter(provider: Provider, chat_adapter: ProviderAdapter) -> ProviderAdapter:
    """The adapter serving /v1/responses at `provider`, whose chat adapter is `chat_adapter`."""
    if serves_responses_natively(provider):
        # The catalog allows `native` on the OpenAI and Azure kinds only, whose adapters these are.
        assert isinstance(chat_adapter, OpenAIAdapter)
        return NativeResponsesAdapter(chat_adapter)
    return TranslatedResponsesAdapter(chat_adapter, drop_builtin_tools=_drops_builtin_tools(provider))


def dropped_tools_header(request: ResponsesRequest, provider: Provider) -> dict[str, str]:
    """`x-gateway-dropped-tools` for a request `provider` served: the built-in tools its chat
    translation left out (gateway.dialects.responses.tools); none when passed through."""
    if serves_responses_natively(provider) or not request.tools:
        return {}
    dropped = dropped_tools(request, drop_builtin=_drops_builtin_tools(provider))
    return dropped_header(dropped, provider.name)


def _drops_builtin_tools(provider: Provider) -> bool:
    return provider.responses_builtin_tools == "drop"


@dataclass(frozen=True, slots=True)
class TranslatedResponsesAdapter:
    """A Responses request as a chat completion at the provider's chat adapter, and back.
    `drop_builtin_tools`: the provider's `responses_builtin_tools` is `drop`. `clock` and `new_id`
    give translated Responses their `created_at` and ids."""

    chat: ProviderAdapter
    drop_builtin_tools: bool = False
    clock: Callable[[], float] = time.time
    new_id: IdSource = random_id

    def build_request(self, call: UpstreamCall, provider: Provider, base_url: str) -> UpstreamRequest:
        return self.chat.build_request(self._chat_call(call), provider, base_url)

    def parse_response(self, call: UpstreamCall, body: bytes) -> UpstreamResponse:
        answer = self.chat.parse_response(self._chat_call(call), body)
        response = response_from_chat(call, answer, clock_s=self.clock(), new_id=self.new_id)
        return UpstreamResponse(
            body=msgspec.json.encode(response), usage=answer.usage, untrusted_usage=answer.untrusted_usage
        )

    def stream_translator(self, call: UpstreamCall) -> StreamTranslator:
        chat_stream = self.chat.stream_translator(self._chat_call(call))
        return ChatToResponsesStream(call, chat_stream, clock=self.clock, new_id=self.new_id)

    def classify_error(self, status: int, body: bytes, headers: Mapping[str, str]) -> UpstreamError:
        return self.chat.classify_error(status, body, headers)

    def _chat_call(self, call: UpstreamCall) -> UpstreamCall:
        """The chat completion call that answers the Responses call `call`. The chat stream's usage
        chunk is always asked for: the Response's usage is made from it."""
        body, chat = to_chat_request(
            responses_request(call.body), stream=call.stream, drop_builtin_tools=self.drop_builtin_tools
        )
        cache_key = call.cache_key if call.cache_key is not None else derive_cache_key(call.team_id, chat)
        return dataclasses.replace(
            call, endpoint=Endpoint.CHAT, body=body, chat=chat, client_wants_usage=True, cache_key=cache_key
        )
