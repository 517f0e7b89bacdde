"""Anthropic's Message Batches as a job submitted to them sees them: the requests to build and the
answers to read (a result as an OpenAI chat completion), without I/O (`gateway.jobs.provider_batch_api`
sends them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import SplitResult, quote, unquote, urlsplit, urlunsplit

import msgspec

from gateway.errors import UpstreamError
from gateway.providers.anthropic.adapter import anthropic_headers, reply_context
from gateway.providers.anthropic.response import anthropic_error_detail, parse_messages_response
from gateway.providers.base import UpstreamCall
from gateway.providers.errors import classify_status
from gateway.providers.openai.batch_api import (
    BatchState,
    LineResult,
    ProviderBatchError,
    Submission,
    custom_id,
    jsonl_lines,
    line_no_of,
    read,
    refused,
)
from gateway.schemas.batch_api import (
    MessageBatch,
    MessageBatchCreate,
    MessageBatchRequest,
    MessageBatchResultLine,
)
from gateway.settings import Provider

# The status of an `errored` result, by its error type; other types (api_error, overloaded_error)
# are the provider's trouble, and the line runs again.
STATUSES = {"invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
            "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429}  # fmt: skip


class ForeignResultsUrl(ProviderBatchError):
    """The provider named a results_url outside its own base URL: never read with its key."""


@dataclass(frozen=True, slots=True)
class AnthropicBatchFormat:
    """Anthropic's Message Batches: the lines' Messages requests in one JSON body."""

    provider: Provider

    def batches_url(self, path: str = "") -> str:
        return f"{self.provider.urls[0]}/v1/messages/batches{path}"

    def batch_url(self, batch_id: str) -> str:
        return self.batches_url(f"/{quote(batch_id, safe='')}")

    def cancel_url(self, batch_id: str) -> str:
        return self.batches_url(f"/{quote(batch_id, safe='')}/cancel")

    def results_url(self, state: BatchState) -> str:
        """Where the batch's results are read: the results_url it named, which must be under the
        provider's base URL, since the request carries the provider's key (ForeignResultsUrl)."""
        url = state.results_url or self.batches_url(f"/{quote(state.id, safe='')}/results")
        check_under_base(url, self.provider.urls)
        return url

    def headers(self) -> dict[str, str]:
        return anthropic_headers(self.provider)

    @staticmethod
    def create_batch(lines: Sequence[Submission]) -> bytes:
        requests = [MessageBatchRequest(custom_id(line.line_no), line.body) for line in lines]
        return msgspec.json.encode(MessageBatchCreate(requests))

    @staticmethod
    def created_batch_id(body: bytes) -> str:
        return read(body, MessageBatch, "create message batch").id

    @staticmethod
    def state(batch_id: str, body: bytes) -> BatchState:
        batch = read(body, MessageBatch, "read message batch")
        return BatchState(batch_id, ended=batch.processing_status == "ended", results_url=batch.results_url)

    @staticmethod
    def results(data: bytes, calls: Mapping[int, UpstreamCall], created: int) -> list[LineResult]:
        """The lines the results answer (`line_result`); `created`: the completions' timestamp."""
        found = (line_result(line, calls, created) for line in jsonl_lines(data, MessageBatchResultLine))
        return [result for result in found if result is not None]


def line_result(
    line: MessageBatchResultLine, calls: Mapping[int, UpstreamCall], created: int
) -> LineResult | None:
    """A line of Anthropic's results, translated to a chat completion; None for a line that never
    ran (canceled, expired), or one the provider failed (it runs again), or one not the job's."""
    line_no, result = line_no_of(line.custom_id), line.result
    if line_no is None or line_no not in calls:
        return None
    if result.type == "succeeded":
        try:
            completion = parse_messages_response(
                bytes(result.message), created, reply_context(calls[line_no])
            )
        except UpstreamError:
            return None
        return LineResult(line_no, 200, completion)
    if result.type != "errored":
        return None
    detail = anthropic_error_detail(bytes(result.error))
    return refused(line_no, classify_status(STATUSES.get(detail.type or "", 500), detail, {}))


def check_under_base(url: str, bases: Sequence[str]) -> None:
    """ForeignResultsUrl unless `url` is under one of the provider's base URLs: the same scheme,
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
