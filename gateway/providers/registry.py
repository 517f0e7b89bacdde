"""Which adapter serves which provider kind: adding a provider kind is one line here (which serves
each endpoint there: `gateway.dialects.endpoints`)."""

from __future__ import annotations

from gateway.providers.anthropic.adapter import AnthropicAdapter
from gateway.providers.base import ProviderAdapter
from gateway.providers.openai.adapter import OpenAIAdapter
from gateway.providers.openai.azure import AzureAdapter
from gateway.settings import ProviderKind


def adapter_for(kind: ProviderKind) -> ProviderAdapter:
    """The adapter for `kind`; mock providers are served by an in-process OpenAI-compatible fake."""
    if kind is ProviderKind.ANTHROPIC:
        return AnthropicAdapter()
    if kind is ProviderKind.AZURE:
        return AzureAdapter()
    return OpenAIAdapter()
