"""Builders for the adapter inputs the provider tests share: providers, calls and fixtures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from gateway.providers.base import Endpoint, UpstreamCall
from gateway.schemas.openai import ChatCompletionRequest
from gateway.settings import Provider, ProviderKind
from tests.support import catalogs

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SECRET = "sk-upstream-secret-0123456789"


def provider(kind: ProviderKind = ProviderKind.OPENAI, **fields: Any) -> Provider:
    """A provider as its adapter sees it: an upstream URL and a secret key, either replaceable."""
    defaults = {"name": f"{kind.value}-test", "base_url": "https://upstream.example/v1", "api_key": SECRET}
    return catalogs.provider(kind=kind, **{**defaults, **fields})


def call(
    body: dict[str, Any],
    *,
    endpoint: Endpoint = Endpoint.CHAT,
    upstream_model: str = "upstream-model",
    client_wants_usage: bool = False,
    cache_key: str | None = None,
    typed: bool = True,
) -> UpstreamCall:
    chat = msgspec.convert(body, ChatCompletionRequest) if typed and endpoint is Endpoint.CHAT else None
    return UpstreamCall(
        endpoint=endpoint,
        body=body,
        upstream_model=upstream_model,
        stream=bool(body.get("stream")),
        client_wants_usage=client_wants_usage,
        team_id="team-1",
        chat=chat,
        cache_key=cache_key,
    )


def fixture_cases(folder: str) -> list[tuple[str, dict[str, Any]]]:
    paths = sorted((FIXTURES / folder).glob("*.json"))
    return [(path.stem, json.loads(path.read_text())) for path in paths]


def sse_payloads(frames: list[bytes]) -> list[Any]:
    """Each `data: ...` frame's payload, JSON-decoded (`[DONE]` stays a string)."""
    payloads: list[Any] = []
    for frame in frames:
        assert frame.startswith(b"data: "), frame
        assert frame.endswith(b"\n\n"), frame
        data = frame[len(b"data: ") : -2]
        payloads.append("[DONE]" if data == b"[DONE]" else json.loads(data))
    return payloads
