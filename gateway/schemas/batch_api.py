"""The Files and Batch APIs' wire format: OpenAI's File and Batch objects, their lists, and the
batch create request, as msgspec Structs.

OpenAI's own document types the optional members of File and Batch (`expires_at`, `errors`,
`output_file_id`, every `*_at`) as plain strings and integers, never null: the gateway leaves an
absent one out (`UNSET`), which OpenAI's SDKs read as None. Only the list cursors are sent as null
when a page is empty, as OpenAI does.
"""

from __future__ import annotations

from typing import TypeVar

from msgspec import UNSET, Struct, UnsetType

from gateway.schemas.admin import Id

T = TypeVar("T")


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


class InputTokensDetails(Struct):
    cached_tokens: int


class OutputTokensDetails(Struct):
    reasoning_tokens: int = 0


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
