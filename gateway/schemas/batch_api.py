"""The batch APIs' wire format, as msgspec Structs: OpenAI's Files and Batches (File and Batch
objects, their lists, the batch create request, the lines of input and output files), which the
gateway serves and submits to, and Anthropic's Message Batches, which it submits to and serves.

OpenAI's own document types the optional members of File and Batch (`expires_at`, `errors`,
`output_file_id`, every `*_at`) as plain strings and integers, never null: the gateway leaves an
absent one out (`UNSET`), which OpenAI's SDKs read as None. Only the list cursors are sent as null
when a page is empty, as OpenAI does.
"""

from __future__ import annotations

from typing import TypeVar

from msgspec import UNSET, Raw, Struct, UnsetType

from gateway.schemas.admin import Id
from gateway.schemas.quotes import JobPlacement

# A Batch's usage has the Responses API's shape; its details are declared there, named here too
# for the modules that build a Batch.
from gateway.schemas.responses import InputTokensDetails as InputTokensDetails
from gateway.schemas.responses import OutputTokensDetails as OutputTokensDetails

T = TypeVar("T")
NULL = Raw(b"null")  # a JSON member read or written as it is, absent or null


def present(value: T | None) -> T | UnsetType:
    """None as an absent member."""
    return UNSET if value is None else value


class OpenAIFile(Struct):
    id: str
    bytes: int
    created_at: int
    filename: str
    purpose: str
    object: str = "file"
    status: str = "processed"
    expires_at: int | UnsetType = UNSET


class FileList(Struct):
    data: list[OpenAIFile]
    first_id: str | None
    last_id: str | None
    has_more: bool
    object: str = "list"


class FileDeleted(Struct):
    id: str
    object: str = "file"
    deleted: bool = True


class BatchCreate(Struct):
    """POST /v1/batches. Fields OpenAI added since (`output_expires_after`) are accepted and ignored."""

    input_file_id: Id
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None = None


class BatchError(Struct):
    code: str
    message: str
    param: str | None = None
    line: int | None = None  # 1-based, as OpenAI counts the input file's lines


class BatchErrors(Struct):
    data: list[BatchError]
    object: str = "list"


class RequestCounts(Struct):
    total: int
    completed: int
    failed: int


class BatchUsage(Struct):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens_details: OutputTokensDetails


class GatewayPlacement(Struct):
    """The gateway's own member of a Batch (OpenAI's clients ignore it): where the job is pinned,
    and why it waits, if it does."""

    deployment: str | None
    paused_reason: str | None
    # a job placed by `metadata.gateway_placement`: the rule, the lane and its quote (absent otherwise)
    placement: JobPlacement | UnsetType = UNSET


class Batch(Struct):
    id: str
    endpoint: str
    input_file_id: str
    completion_window: str
    status: str
    created_at: int
    expires_at: int
    request_counts: RequestCounts
    usage: BatchUsage
    gateway: GatewayPlacement
    object: str = "batch"
    model: str | UnsetType = UNSET
    errors: BatchErrors | UnsetType = UNSET
    output_file_id: str | UnsetType = UNSET
    error_file_id: str | UnsetType = UNSET
    in_progress_at: int | UnsetType = UNSET
    finalizing_at: int | UnsetType = UNSET
    completed_at: int | UnsetType = UNSET
    failed_at: int | UnsetType = UNSET
    expired_at: int | UnsetType = UNSET
    cancelling_at: int | UnsetType = UNSET
    cancelled_at: int | UnsetType = UNSET
    metadata: dict[str, str] | None = None


class BatchList(Struct):
    data: list[Batch]
    first_id: str | None
    last_id: str | None
    has_more: bool
    object: str = "list"


# --- the lines of a batch's files ---------------------------------------------------------------


class BatchRequestLine(Struct):
    """A line of an input file: one request, its body as the JSON it is."""

    custom_id: str
    method: str
    url: str
    body: Raw


class BatchLineResponse(Struct):
    status_code: int | None
    request_id: str | None = None
    body: Raw = NULL


class BatchLineError(Struct):
    code: str
    message: str


class BatchOutputLine(Struct, kw_only=True):
    """A line of an output or error file: the answer to one request, or why it never ran."""

    id: str | None = None
    custom_id: str
    response: BatchLineResponse | None = None
    error: BatchLineError | None = None


class UpstreamFile(Struct):
    """What the gateway reads of the File a provider's Files API answers: its id. (`OpenAIFile` is
    the one the gateway answers, every member set; a provider's is read for no other member.)"""

    id: str


class UpstreamBatch(Struct):
    """What the gateway reads of the Batch a provider's Batch API answers (`Batch` is the one the
    gateway answers, with its own `gateway` member)."""

    id: str
    status: str | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None


# --- Anthropic's Message Batches ----------------------------------------------------------------


class MessageBatchRequest(Struct):
    custom_id: str
    params: Raw  # a Messages request body


class MessageBatchCreate(Struct):
    """POST /v1/messages/batches, as the gateway submits it and as it serves it."""

    requests: list[MessageBatchRequest]


class MessageBatch(Struct):
    """What the gateway reads of the Message Batch Anthropic answers (`ServedMessageBatch` is the
    one the gateway answers)."""

    id: str
    processing_status: str | None = None
    results_url: str | None = None


class MessageBatchResult(Struct):
    type: str  # succeeded, errored, canceled, expired
    message: Raw = NULL  # a Messages response, when it succeeded
    error: Raw = NULL  # an Anthropic error body, when it errored


class MessageBatchResultLine(Struct):
    """A line of a Message Batch's results."""

    custom_id: str
    result: MessageBatchResult


# Anthropic's Message Batches as the gateway serves them (gateway.api.anthropic.batches): a batch
# job whose lines are Messages requests. Times are RFC 3339 strings; absent ones are null.


class MessageBatchRequestCounts(Struct):
    """Every request in exactly one count: the sum is the batch's number of requests."""

    processing: int
    succeeded: int
    errored: int
    canceled: int
    expired: int


class ServedMessageBatch(Struct):
    id: str
    processing_status: str  # in_progress, canceling, ended
    request_counts: MessageBatchRequestCounts
    created_at: str
    expires_at: str
    ended_at: str | None = None
    cancel_initiated_at: str | None = None
    archived_at: str | None = None
    results_url: str | None = None  # once ended
    type: str = "message_batch"


class MessageBatchList(Struct):
    data: list[ServedMessageBatch]
    has_more: bool
    first_id: str | None
    last_id: str | None


class MessageBatchDeleted(Struct):
    id: str
    type: str = "message_batch_deleted"


class MessageBatchOutcome(Struct):
    """A result as the gateway serves it: `message` when it succeeded, `error` (Anthropic's error
    envelope) when it errored, neither when it was canceled or expired."""

    type: str  # succeeded, errored, canceled, expired
    message: Raw | UnsetType = UNSET
    error: Raw | UnsetType = UNSET


class MessageBatchOutcomeLine(Struct):
    """A line of the results the gateway serves."""

    custom_id: str
    result: MessageBatchOutcome
