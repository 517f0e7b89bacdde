"""Which adapter serves an endpoint at a provider: chat completions, completions and embeddings at the
provider kind's own adapter; the Responses and Messages APIs natively where the provider speaks them,
translated to its chat API elsewhere."""

from __future__ import annotations

from gateway.dialects.messages.adapter import messages_adapter
from gateway.dialects.responses.adapter import responses_adapter
from gateway.providers.base import Endpoint, ProviderAdapter
from gateway.providers.registry import adapter_for
from gateway.settings import Provider


def endpoint_adapter(provider: Provider, endpoint: Endpoint) -> ProviderAdapter:
    """The adapter for one endpoint at `provider`."""
    chat = adapter_for(provider.kind)
    if endpoint is Endpoint.RESPONSES:
        return responses_adapter(provider, chat)
    if endpoint is Endpoint.MESSAGES:
        return messages_adapter(provider, chat)
    return chat
