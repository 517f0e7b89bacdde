"""Which adapter serves which provider kind, and which serves an endpoint there: adding a provider
kind is one line here."""

from __future__ import annotations

from gateway.providers.anthropic import AnthropicAdapter
from gateway.providers.azure import AzureAdapter
from gateway.providers.base import Endpoint, ProviderAdapter
from gateway.providers.openai import OpenAIAdapter
from gateway.settings import Provider, ProviderKind


def adapter_for(kind: ProviderKind) -> ProviderAdapter:
    """The adapter for `kind`; mock providers are served by an in-process OpenAI-compatible fake."""
    if kind is ProviderKind.ANTHROPIC:
        return AnthropicAdapter()
    if kind is ProviderKind.AZURE:
        return AzureAdapter()
    return OpenAIAdapter()


def endpoint_adapter(provider: Provider, endpoint: Endpoint) -> ProviderAdapter:
    """The adapter for one endpoint at `provider`: the Responses and Messages APIs are served
    natively where the provider speaks them, and translated to its chat API elsewhere."""
    chat = adapter_for(provider.kind)
    if endpoint is Endpoint.RESPONSES:
        from gateway.providers.responses_adapter import responses_adapter

        return responses_adapter(provider, chat)
    if endpoint is Endpoint.MESSAGES:
        from gateway.providers.messages_adapter import messages_adapter

        return messages_adapter(provider, chat)
    return chat
