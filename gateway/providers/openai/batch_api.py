"""OpenAI's and Azure's files and batches as a job submitted to them sees them: the requests to
build and the answers to read, without I/O (`gateway.jobs.provider_batch_api` sends them).

The gateway's own Batch API is OpenAI's, so what every provider's batch is read into is declared
here too: a line's `Submission`, a batch's `BatchState`, a line's `LineResult` in OpenAI's format.
The provider's custom_id of a line is `line-<line_no>`: a client's custom_id may not fit
Anthropic's pattern, and the line number is what the ledger keys outcomes by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import quote

import msgspec

from gateway.errors import UpstreamError
from gateway.providers.base import UpstreamCall, UpstreamResponse
from gateway.providers.openai.adapter import OpenAIAdapter, openai_auth_headers
from gateway.providers.openai.azure import azure_auth_headers
from gateway.schemas.batch_api import (
    BatchCreate,
    BatchOutputLine,
    BatchRequestLine,
    UpstreamBatch,
    UpstreamFile,
)
from gateway.settings import Provider, ProviderKind

LINE_PREFIX = "line-"
ENDED = ("completed", "failed", "expired", "cancelled")  # a Batch's statuses once it has stopped
T = TypeVar("T")


class ProviderBatchError(Exception):
    """A provider's batch API could not be reached, refused a call, or answered what cannot be
    read; the message names the call and the status, never a request's text."""


@dataclass(frozen=True, slots=True)
class Submission:
    """One line as the provider is asked to run it."""

    line_no: int
    call: UpstreamCall
    body: msgspec.Raw  # the provider's request body for the line (its adapter's translation)


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


def custom_id(line_no: int) -> str:
    return f"{LINE_PREFIX}{line_no}"


def line_no_of(custom_id: object) -> int | None:
    if not isinstance(custom_id, str) or not custom_id.startswith(LINE_PREFIX):
        return None
    number = custom_id.removeprefix(LINE_PREFIX)
    return int(number) if number.isdigit() else None


def refused(line_no: int, error: UpstreamError) -> LineResult | None:
    """A refused line's result; None when the provider itself is at fault (the line runs again)."""
    if error.retryable or not 400 <= error.status < 500:
        return None
    return LineResult(line_no, error.status, None, error)


def read(body: bytes, kind: type[T], what: str) -> T:
    """`body` as `kind`; ProviderBatchError naming `what` when it is not one."""
    try:
        return msgspec.json.decode(body, type=kind)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise ProviderBatchError(f"{what}: the answer is not what the batch API answers") from None


def jsonl_lines(data: bytes, kind: type[T]) -> list[T]:
    """The lines of a JSONL file that are a `kind`; the others (blank lines too) are left out."""
    decoder = msgspec.json.Decoder(kind)
    lines = []
    for line in data.splitlines():
        try:
            lines.append(decoder.decode(line))
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
    return lines


@dataclass(frozen=True, slots=True)
class OpenAIBatchFormat:
    """OpenAI's files and batches; Azure's are the same under `/openai/...?api-version=`."""

    provider: Provider

    @property
    def _azure(self) -> bool:
        return self.provider.kind is ProviderKind.AZURE

    def url(self, path: str) -> str:
        base = self.provider.urls[0]
        if self._azure:
            return f"{base}/openai/{path}?api-version={quote(self.provider.api_version, safe='')}"
        return f"{base}/{path}"

    def files_url(self) -> str:
        return self.url("files")

    def batches_url(self) -> str:
        return self.url("batches")

    def batch_url(self, batch_id: str) -> str:
        return self.url(f"batches/{quote(batch_id, safe='')}")

    def cancel_url(self, batch_id: str) -> str:
        return self.url(f"batches/{quote(batch_id, safe='')}/cancel")

    def content_url(self, file_id: str) -> str:
        return self.url(f"files/{quote(file_id, safe='')}/content")

    def headers(self) -> dict[str, str]:
        auth = azure_auth_headers(self.provider) if self._azure else openai_auth_headers(self.provider)
        return {**auth, **self.provider.headers}

    @property
    def endpoint(self) -> str:
        """The chat completions path the input file's lines name (Azure's has no `/v1`)."""
        return "/chat/completions" if self._azure else "/v1/chat/completions"

    def input_file(self, lines: Sequence[Submission]) -> bytes:
        """The JSONL input file of the lines, uploaded with purpose `batch`."""
        encoder = msgspec.json.Encoder()
        rows = (BatchRequestLine(custom_id(s.line_no), "POST", self.endpoint, s.body) for s in lines)
        return b"".join(encoder.encode(row) + b"\n" for row in rows)

    @staticmethod
    def uploaded_file_id(body: bytes) -> str:
        return read(body, UpstreamFile, "upload").id

    def create_batch(self, input_file_id: str) -> bytes:
        return msgspec.json.encode(BatchCreate(input_file_id, self.endpoint, "24h"))

    @staticmethod
    def created_batch_id(body: bytes) -> str:
        return read(body, UpstreamBatch, "create batch").id

    @staticmethod
    def state(batch_id: str, body: bytes) -> BatchState:
        batch = read(body, UpstreamBatch, "read batch")
        return BatchState(
            batch_id,
            ended=batch.status in ENDED,
            output_file_id=batch.output_file_id,
            error_file_id=batch.error_file_id,
        )

    @staticmethod
    def results(data: bytes, calls: Mapping[int, UpstreamCall]) -> list[LineResult]:
        """The lines an output or error file answers (`line_result`)."""
        found = (line_result(line, calls) for line in jsonl_lines(data, BatchOutputLine))
        return [result for result in found if result is not None]


def line_result(line: BatchOutputLine, calls: Mapping[int, UpstreamCall]) -> LineResult | None:
    """A line of OpenAI's output or error file; None for a line that never ran, or one the
    provider failed (it runs again), or one that is not the job's."""
    line_no, response = line_no_of(line.custom_id), line.response
    if line_no is None or line_no not in calls or response is None:
        return None
    adapter = OpenAIAdapter()
    if response.status_code == 200:
        try:
            return LineResult(line_no, 200, adapter.parse_response(calls[line_no], bytes(response.body)))
        except UpstreamError:
            return None
    if response.status_code is None:
        return None
    return refused(line_no, adapter.classify_error(response.status_code, bytes(response.body), {}))
