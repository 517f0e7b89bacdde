"""The providers' own batch APIs over HTTP, as a job submitted to them uses them: OpenAI's and
Azure's files and batches, Anthropic's Message Batches.

Each kind submits a job's lines as one provider batch, reads its state, cancels it, and reads its
results back as `LineResult`s in OpenAI's format. What goes over the wire, and how an answer is
read, is the provider's (`gateway.providers.openai.batch_api`, `gateway.providers.anthropic.batch_api`);
here are the calls. A line's request body is built by the kind's ordinary adapter
(`gateway.providers`), so that it is exactly what the gateway would have sent for it alone. HTTP
goes through one `httpx.AsyncClient` the caller owns; every failure of it is a `ProviderBatchError`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
import msgspec

from gateway.providers.anthropic.batch_api import AnthropicBatchFormat
from gateway.providers.base import Endpoint, UpstreamCall
from gateway.providers.openai.batch_api import (
    BatchState,
    LineResult,
    OpenAIBatchFormat,
    ProviderBatchError,
    Submission,
)
from gateway.providers.registry import adapter_for
from gateway.schemas.openai import ChatCompletionRequest
from gateway.settings import Provider, ProviderKind


async def exchange(
    http: httpx.AsyncClient,
    method: str,
    url: str,
    headers: Mapping[str, str],
    *,
    json_body: bool = False,
    **content: Any,
) -> bytes:
    """The body of a 2xx answer; ProviderBatchError for anything else. `json_body`: the content is
    JSON (a content-type the provider's own headers may still override)."""
    what = f"{method} {url.split('?')[0]}"
    sent = {"content-type": "application/json", **headers} if json_body else dict(headers)
    try:
        reply = await http.request(method, url, headers=sent, **content)
    except httpx.HTTPError as exc:
        raise ProviderBatchError(f"{what}: {type(exc).__name__}") from exc
    if not 200 <= reply.status_code < 300:
        raise ProviderBatchError(f"{what}: HTTP {reply.status_code}")
    return reply.content


def line_body(call: UpstreamCall, provider: Provider) -> msgspec.Raw:
    """The request body the kind's adapter builds for one line (InvalidRequest if it cannot)."""
    return msgspec.Raw(adapter_for(provider.kind).build_request(call, provider, provider.urls[0]).content)


class ProviderBatchApi(Protocol):
    async def submit(self, lines: list[Submission]) -> str: ...

    async def state(self, batch_id: str) -> BatchState: ...

    async def cancel(self, batch_id: str) -> None: ...

    async def results(self, state: BatchState, calls: Mapping[int, UpstreamCall]) -> list[LineResult]: ...


@dataclass(frozen=True, slots=True)
class OpenAIBatchApi:
    """OpenAI's (and Azure's) files and batches: the lines uploaded as a file, then a batch of it."""

    http: httpx.AsyncClient
    wire: OpenAIBatchFormat

    async def _call(self, method: str, url: str, *, json_body: bool = False, **content: Any) -> bytes:
        return await exchange(self.http, method, url, self.wire.headers(), json_body=json_body, **content)

    async def submit(self, lines: list[Submission]) -> str:
        name = f"gateway-{uuid.uuid4().hex[:12]}.jsonl"
        files = {"file": (name, self.wire.input_file(lines), "application/jsonl")}
        uploaded = await self._call("POST", self.wire.files_url(), data={"purpose": "batch"}, files=files)
        create = self.wire.create_batch(self.wire.uploaded_file_id(uploaded))
        created = await self._call("POST", self.wire.batches_url(), content=create, json_body=True)
        return self.wire.created_batch_id(created)

    async def state(self, batch_id: str) -> BatchState:
        return self.wire.state(batch_id, await self._call("GET", self.wire.batch_url(batch_id)))

    async def cancel(self, batch_id: str) -> None:
        await self._call("POST", self.wire.cancel_url(batch_id))

    async def results(self, state: BatchState, calls: Mapping[int, UpstreamCall]) -> list[LineResult]:
        results = []
        for file_id in (state.output_file_id, state.error_file_id):
            if file_id is not None:
                content = await self._call("GET", self.wire.content_url(file_id))
                results.extend(self.wire.results(content, calls))
        return results


@dataclass(frozen=True, slots=True)
class AnthropicBatchApi:
    """Anthropic's Message Batches: the lines' Messages requests in one JSON body."""

    http: httpx.AsyncClient
    wire: AnthropicBatchFormat

    async def _call(self, method: str, url: str, *, json_body: bool = False, **content: Any) -> bytes:
        return await exchange(self.http, method, url, self.wire.headers(), json_body=json_body, **content)

    async def submit(self, lines: list[Submission]) -> str:
        create = self.wire.create_batch(lines)
        created = await self._call("POST", self.wire.batches_url(), content=create, json_body=True)
        return self.wire.created_batch_id(created)

    async def state(self, batch_id: str) -> BatchState:
        return self.wire.state(batch_id, await self._call("GET", self.wire.batch_url(batch_id)))

    async def cancel(self, batch_id: str) -> None:
        await self._call("POST", self.wire.cancel_url(batch_id))

    async def results(self, state: BatchState, calls: Mapping[int, UpstreamCall]) -> list[LineResult]:
        content = await self._call("GET", self.wire.results_url(state))
        return self.wire.results(content, calls, int(time.time()))


def batch_api_for(http: httpx.AsyncClient, provider: Provider) -> ProviderBatchApi:
    if provider.kind is ProviderKind.ANTHROPIC:
        return AnthropicBatchApi(http, AnthropicBatchFormat(provider))
    return OpenAIBatchApi(http, OpenAIBatchFormat(provider))


def chat_call(
    body: dict[str, Any],
    upstream_model: str,
    team_id: str,
    chat: ChatCompletionRequest | None,
    cache_key: str | None,
) -> UpstreamCall:
    """The call of one line: its body as parsed (`gateway.proxy.request`), never streamed."""
    return UpstreamCall(
        endpoint=Endpoint.CHAT,
        body=body,
        upstream_model=upstream_model,
        stream=False,
        client_wants_usage=False,
        team_id=team_id,
        chat=chat,
        cache_key=cache_key,
    )
