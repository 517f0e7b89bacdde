"""The providers' own batch APIs, as a job submitted to them sees them: OpenAI's and Azure's files
and batches, Anthropic's Message Batches.

Each kind submits a job's lines as one provider batch, reads its state, cancels it, and reads its
results back as `LineResult`s in OpenAI's format. A line's request body is built by the kind's
ordinary adapter (`gateway.providers`), so that it is exactly what the gateway would have sent for
it alone; a result is parsed by the same adapter. The provider's custom_id of a line is
`line-<line_no>`: a client's custom_id may not fit Anthropic's pattern, and the line number is
what the ledger keys outcomes by. HTTP goes through one `httpx.AsyncClient` the caller owns; every
failure of it is a `ProviderBatchError`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import SplitResult, quote, unquote, urlsplit, urlunsplit

import httpx
import msgspec

from gateway.errors import UpstreamError
from gateway.providers.anthropic.adapter import reply_context
from gateway.providers.anthropic.response import anthropic_error_detail, parse_messages_response
from gateway.providers.base import Endpoint, UpstreamCall, UpstreamResponse
from gateway.providers.errors import classify_status
from gateway.providers.openai.adapter import OpenAIAdapter
from gateway.providers.registry import adapter_for
from gateway.schemas.openai import ChatCompletionRequest
from gateway.settings import Provider, ProviderKind

LINE_PREFIX = "line-"
_OPENAI_ENDED = ("completed", "failed", "expired", "cancelled")
# The status of an Anthropic `errored` result, by its error type; other types (api_error,
# overloaded_error) are the provider's trouble, and the line runs again.
_ANTHROPIC_STATUSES = {"invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
                       "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429}  # fmt: skip


class ProviderBatchError(Exception):
    """The provider's batch API could not be reached or refused a call; the message names the
    call and the status, never a request's text."""


class ForeignResultsUrl(ProviderBatchError):
    """The provider named a results_url outside its own base URL: never read with its key."""


@dataclass(frozen=True, slots=True)
class Submission:
    """One line as the provider is asked to run it."""

    line_no: int
    call: UpstreamCall
    body: dict[str, Any]  # the provider's request body for the line (the adapter's translation)


@dataclass(frozen=True, slots=True)
class BatchState:
    """What the provider says of a submitted batch."""

    id: str
    ended: bool
    output_file_id: str | None = None  # OpenAI, Azure
    error_file_id: str | None = None
    results_url: str | None = None  # Anthropic


@dataclass(frozen=True, slots=True)
class LineResult:
    """A line the provider answered: a chat completion (200) or the error it refused the line with."""

    line_no: int
    status_code: int
    response: UpstreamResponse | None  # the completion and its usage; None for a refused line
    error: UpstreamError | None = None


def line_no_of(custom_id: object) -> int | None:
    if not isinstance(custom_id, str) or not custom_id.startswith(LINE_PREFIX):
        return None
    number = custom_id.removeprefix(LINE_PREFIX)
    return int(number) if number.isdigit() else None


def jsonl_objects(data: bytes) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file; lines that are not objects are left out."""
    objects = []
    for line in data.splitlines():
        try:
            value = msgspec.json.decode(line) if line.strip() else None
        except msgspec.DecodeError:
            continue
        if isinstance(value, dict):
            objects.append(value)
    return objects


async def exchange(
    http: httpx.AsyncClient, method: str, url: str, headers: Mapping[str, str], **content: Any
) -> bytes:
    """The body of a 2xx answer; ProviderBatchError for anything else."""
    what = f"{method} {url.split('?')[0]}"
    try:
        reply = await http.request(method, url, headers=dict(headers), **content)
    except httpx.HTTPError as exc:
        raise ProviderBatchError(f"{what}: {type(exc).__name__}") from exc
    if not 200 <= reply.status_code < 300:
        raise ProviderBatchError(f"{what}: HTTP {reply.status_code}")
    return reply.content


def check_under_base(url: str, bases: Sequence[str]) -> None:
    """ProviderBatchError unless `url` is under one of the provider's base URLs: the same scheme,
    host and port, and a path inside the base's path (no `.` or `..` segment to climb out of it).
    The error names the URL without its query, which may hold a signature."""
    target = urlsplit(url)
    try:
        target_port = _port(target)
    except ValueError:
        target_port = None
    path = target.path or "/"
    climbs = any(unquote(segment) in (".", "..") for segment in path.split("/"))
    for base in bases:
        allowed = urlsplit(base)
        prefix = allowed.path.rstrip("/") + "/"
        if (
            not climbs
            and target.scheme.lower() == allowed.scheme.lower()
            and (target.hostname or "") == (allowed.hostname or "")
            and target_port is not None
            and target_port == _port(allowed)
            and target.username is None
            and (path + "/").startswith(prefix)
        ):
            return
    shown = urlunsplit((target.scheme, target.netloc.rpartition("@")[2], target.path, "", ""))
    raise ForeignResultsUrl(
        f"the provider's results_url {shown} is not under its base URL; the results are not fetched"
    )


def _port(url: SplitResult) -> int | None:
    return url.port or {"http": 80, "https": 443}.get(url.scheme.lower())


def _decoded(body: bytes, what: str) -> dict[str, Any]:
    try:
        value = msgspec.json.decode(body)
    except msgspec.DecodeError:
        value = None
    if not isinstance(value, dict):
        raise ProviderBatchError(f"{what}: the answer is not a JSON object")
    return value


def line_body(call: UpstreamCall, provider: Provider) -> dict[str, Any]:
    """The request body the kind's adapter builds for one line (InvalidRequest if it cannot)."""
    request = adapter_for(provider.kind).build_request(call, provider, provider.urls[0])
    body: dict[str, Any] = msgspec.json.decode(request.content)
    return body


class ProviderBatchApi(Protocol):
    async def submit(self, lines: list[Submission]) -> str: ...

    async def state(self, batch_id: str) -> BatchState: ...

    async def cancel(self, batch_id: str) -> None: ...

    async def results(self, state: BatchState, calls: Mapping[int, UpstreamCall]) -> list[LineResult]: ...


@dataclass(frozen=True, slots=True)
class OpenAIBatchApi:
    """OpenAI's files and batches; Azure's are the same under `/openai/...?api-version=`."""

    http: httpx.AsyncClient
    provider: Provider

    @property
    def _azure(self) -> bool:
        return self.provider.kind is ProviderKind.AZURE

    def _url(self, path: str) -> str:
        base = self.provider.urls[0]
        if self._azure:
            return f"{base}/openai/{path}?api-version={quote(self.provider.api_version, safe='')}"
        return f"{base}/{path}"

    def _headers(self) -> dict[str, str]:
        auth = {"api-key": self.provider.api_key} if self._azure and self.provider.api_key else {}
        if not self._azure:
            auth = OpenAIAdapter().auth_headers(self.provider)
        return {**auth, **self.provider.headers}

    @property
    def _endpoint(self) -> str:
        return "/chat/completions" if self._azure else "/v1/chat/completions"

    async def submit(self, lines: list[Submission]) -> str:
        rows = [
            {
                "custom_id": f"{LINE_PREFIX}{line.line_no}",
                "method": "POST",
                "url": self._endpoint,
                "body": line.body,
            }
            for line in lines
        ]
        data = b"".join(msgspec.json.encode(row) + b"\n" for row in rows)
        files = {"file": (f"gateway-{uuid.uuid4().hex[:12]}.jsonl", data, "application/jsonl")}
        uploaded = await exchange(
            self.http, "POST", self._url("files"), self._headers(), data={"purpose": "batch"}, files=files
        )
        file_id = _decoded(uploaded, "upload").get("id")
        create = {"input_file_id": file_id, "endpoint": self._endpoint, "completion_window": "24h"}
        created = await exchange(self.http, "POST", self._url("batches"), self._headers(), json=create)
        return str(_decoded(created, "create batch")["id"])

    async def state(self, batch_id: str) -> BatchState:
        body = await exchange(
            self.http, "GET", self._url(f"batches/{quote(batch_id, safe='')}"), self._headers()
        )
        batch = _decoded(body, "read batch")
        return BatchState(
            batch_id,
            ended=batch.get("status") in _OPENAI_ENDED,
            output_file_id=batch.get("output_file_id"),
            error_file_id=batch.get("error_file_id"),
        )

    async def cancel(self, batch_id: str) -> None:
        await exchange(
            self.http, "POST", self._url(f"batches/{quote(batch_id, safe='')}/cancel"), self._headers()
        )

    async def results(self, state: BatchState, calls: Mapping[int, UpstreamCall]) -> list[LineResult]:
        results = []
        for file_id in (state.output_file_id, state.error_file_id):
            if file_id is None:
                continue
            url = self._url(f"files/{quote(file_id, safe='')}/content")
            for row in jsonl_objects(await exchange(self.http, "GET", url, self._headers())):
                result = openai_line_result(row, calls)
                if result is not None:
                    results.append(result)
        return results


def openai_line_result(row: dict[str, Any], calls: Mapping[int, UpstreamCall]) -> LineResult | None:
    """A line of OpenAI's output or error file; None for a line that never ran, or one the
    provider failed (it runs again), or one that is not the job's."""
    line_no = line_no_of(row.get("custom_id"))
    response = row.get("response")
    if line_no is None or line_no not in calls or not isinstance(response, dict):
        return None
    status, body = response.get("status_code"), msgspec.json.encode(response.get("body"))
    if status == 200:
        try:
            return LineResult(line_no, 200, OpenAIAdapter().parse_response(calls[line_no], body))
        except UpstreamError:
            return None
    if not isinstance(status, int):
        return None
    return _refused(line_no, OpenAIAdapter().classify_error(status, body, {}))


def _refused(line_no: int, error: UpstreamError) -> LineResult | None:
    """A refused line's result; None when the provider itself is at fault (the line runs again)."""
    if error.retryable or not 400 <= error.status < 500:
        return None
    return LineResult(line_no, error.status, None, error)


@dataclass(frozen=True, slots=True)
class AnthropicBatchApi:
    """Anthropic's Message Batches: the lines' Messages requests in one JSON body."""

    http: httpx.AsyncClient
    provider: Provider

    def _url(self, path: str = "") -> str:
        return f"{self.provider.urls[0]}/v1/messages/batches{path}"

    def _headers(self) -> dict[str, str]:
        headers = {"anthropic-version": self.provider.anthropic_version}
        if self.provider.api_key:
            headers["x-api-key"] = self.provider.api_key
        return {**headers, **self.provider.headers}

    async def submit(self, lines: list[Submission]) -> str:
        requests = [{"custom_id": f"{LINE_PREFIX}{line.line_no}", "params": line.body} for line in lines]
        created = await exchange(self.http, "POST", self._url(), self._headers(), json={"requests": requests})
        return str(_decoded(created, "create message batch")["id"])

    async def state(self, batch_id: str) -> BatchState:
        body = await exchange(self.http, "GET", self._url(f"/{quote(batch_id, safe='')}"), self._headers())
        batch = _decoded(body, "read message batch")
        results_url = batch.get("results_url")
        return BatchState(
            batch_id,
            ended=batch.get("processing_status") == "ended",
            results_url=results_url if isinstance(results_url, str) else None,
        )

    async def cancel(self, batch_id: str) -> None:
        await exchange(self.http, "POST", self._url(f"/{quote(batch_id, safe='')}/cancel"), self._headers())

    async def results(self, state: BatchState, calls: Mapping[int, UpstreamCall]) -> list[LineResult]:
        url = state.results_url or self._url(f"/{quote(state.id, safe='')}/results")
        # The request carries the provider's key: it goes nowhere but to the provider itself.
        check_under_base(url, self.provider.urls)
        rows = jsonl_objects(await exchange(self.http, "GET", url, self._headers()))
        created = int(time.time())
        results = [anthropic_line_result(row, calls, created) for row in rows]
        return [result for result in results if result is not None]


def anthropic_line_result(
    row: dict[str, Any], calls: Mapping[int, UpstreamCall], created: int
) -> LineResult | None:
    """A line of Anthropic's results, translated to a chat completion; None as for OpenAI's."""
    line_no = line_no_of(row.get("custom_id"))
    result = row.get("result")
    if line_no is None or line_no not in calls or not isinstance(result, dict):
        return None
    if result.get("type") == "succeeded":
        try:
            return LineResult(
                line_no,
                200,
                parse_messages_response(
                    msgspec.json.encode(result.get("message")), created, reply_context(calls[line_no])
                ),
            )
        except UpstreamError:
            return None
    if result.get("type") != "errored":
        return None  # canceled or expired: it never ran
    body = msgspec.json.encode(result.get("error"))
    status = _ANTHROPIC_STATUSES.get(anthropic_error_detail(body).type or "", 500)
    return _refused(line_no, classify_status(status, anthropic_error_detail(body), {}))


def batch_api_for(http: httpx.AsyncClient, provider: Provider) -> ProviderBatchApi:
    if provider.kind is ProviderKind.ANTHROPIC:
        return AnthropicBatchApi(http, provider)
    return OpenAIBatchApi(http, provider)


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
