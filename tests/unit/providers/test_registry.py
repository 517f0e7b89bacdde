"""Each provider kind maps to its adapter; mock providers speak OpenAI."""

from __future__ import annotations

from gateway.providers.anthropic.adapter import AnthropicAdapter
from gateway.providers.openai.adapter import OpenAIAdapter
from gateway.providers.openai.azure import AzureAdapter
from gateway.providers.registry import adapter_for
from gateway.settings import ProviderKind


def test_adapter_for_each_kind() -> None:
    assert type(adapter_for(ProviderKind.MOCK)) is OpenAIAdapter
    assert type(adapter_for(ProviderKind.OPENAI)) is OpenAIAdapter
    assert type(adapter_for(ProviderKind.AZURE)) is AzureAdapter
    assert type(adapter_for(ProviderKind.ANTHROPIC)) is AnthropicAdapter
