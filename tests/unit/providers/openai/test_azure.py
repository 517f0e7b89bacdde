"""Azure OpenAI: deployment URLs, api-key auth, OpenAI hints; everything else as OpenAI."""

from __future__ import annotations

import json

from gateway.providers.base import Endpoint, TokenUsage
from gateway.providers.openai.azure import AzureAdapter, azure_auth_headers
from gateway.settings import ProviderKind
from tests.unit.providers.calls import SECRET, call, provider

ADAPTER = AzureAdapter()
BASE = "https://contoso.openai.azure.com"
BODY = {
    "model": "alias",
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "u", "cache_control": {"type": "ephemeral"}}]}
    ],
}


def test_chat_url_and_api_key_header() -> None:
    settings = provider(ProviderKind.AZURE, base_url=BASE, api_version="2024-10-21")
    request = ADAPTER.build_request(call(BODY, upstream_model="gpt-4o-prod"), settings, BASE + "/")
    assert request.url == f"{BASE}/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21"
    assert request.headers["api-key"] == SECRET
    assert "authorization" not in request.headers


def test_embeddings_url_and_no_key() -> None:
    settings = provider(ProviderKind.AZURE, base_url=BASE, api_key=None)
    body = {"model": "alias", "input": "x"}
    request = ADAPTER.build_request(
        call(body, endpoint=Endpoint.EMBEDDINGS, upstream_model="emb"), settings, BASE
    )
    assert request.url == f"{BASE}/openai/deployments/emb/embeddings?api-version=2024-10-21"
    assert "api-key" not in request.headers


def test_auto_hints_are_openai_style() -> None:
    settings = provider(ProviderKind.AZURE, base_url=BASE)
    request = ADAPTER.build_request(call(BODY, cache_key="derived"), settings, BASE)
    forwarded = json.loads(request.content)
    assert forwarded["prompt_cache_key"] == "derived"
    assert "cache_control" not in request.content.decode()


def test_responses_parse_as_openai() -> None:
    body = b'{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":1,"total_tokens":5}}'
    response = ADAPTER.parse_response(call(BODY), body)
    assert response.usage == TokenUsage(prompt_tokens=4, completion_tokens=1)
    assert json.loads(response.body)["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}


def test_azure_auth_header() -> None:
    assert azure_auth_headers(provider(ProviderKind.AZURE)) == {"api-key": SECRET}
    assert azure_auth_headers(provider(ProviderKind.AZURE, api_key=None)) == {}
