"""Azure OpenAI: the OpenAI adapter with Azure's deployment URLs and `api-key` header."""

from __future__ import annotations

from urllib.parse import quote

from gateway.providers.base import UpstreamCall
from gateway.providers.openai.adapter import OpenAIAdapter
from gateway.settings import Provider


class AzureAdapter(OpenAIAdapter):
    """Azure names the deployment in the path; the body's `model` is ignored there but harmless."""

    def url(self, call: UpstreamCall, provider: Provider, base_url: str) -> str:
        deployment = quote(call.upstream_model, safe="")
        api_version = quote(provider.api_version, safe="")
        return f"{base_url}/openai/deployments/{deployment}/{call.endpoint.value}?api-version={api_version}"

    def auth_headers(self, provider: Provider) -> dict[str, str]:
        return azure_auth_headers(provider)


def azure_auth_headers(provider: Provider) -> dict[str, str]:
    """Azure OpenAI takes the key in `api-key`, not as a bearer token."""
    return {"api-key": provider.api_key} if provider.api_key else {}
