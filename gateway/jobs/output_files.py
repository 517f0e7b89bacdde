"""A finished job's output and error files in OpenAI's Batch line format (`BatchOutputLine`).

Succeeded lines go to the output file; lines the upstream refused, and lines never run (the job
was cancelled or expired first), go to the error file. Both are in input order, and every
custom_id appears exactly once across the two.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import msgspec

from gateway.schemas.batch_api import NULL, BatchLineError, BatchLineResponse, BatchOutputLine

BATCH_CANCELLED = "batch_cancelled"
BATCH_EXPIRED = "batch_expired"
_NEVER_RUN_MESSAGES = {
    BATCH_CANCELLED: "The batch was cancelled before this request ran.",
    BATCH_EXPIRED: "The batch expired before this request ran.",
    # the job stopped because the key that created it may no longer send anything (ledger.Standing)
    "api_key_revoked": "The API key that created the batch was revoked before this request ran.",
    "api_key_expired": "The API key that created the batch expired before this request ran.",
    "team_deleted": "The team of the batch was deleted before this request ran.",
    "api_key_not_found": "The API key that created the batch no longer exists; this request never ran.",
    # a provider-run job whose estimated cost did not fit its key's or team's budget
    "insufficient_quota": "The batch's estimated cost exceeded what was left of its budget; this request "
    "was not submitted.",
}
_ENCODER = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class LineRecord:
    """One line as the ledger holds it when the job is finalized."""

    line_no: int
    custom_id: str
    state: str  # pending (never run), succeeded, failed
    status_code: int | None = None
    response: str | None = None  # the body the upstream (or the gateway) answered, as JSON text
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class JobFiles:
    output: bytes  # the succeeded lines
    errors: bytes  # the failed and never-run lines; empty when there are none


def output_line_id(job_id: str, line_no: int) -> str:
    """`batch_req_` and a digest of the line's place: the same id however often a file is built."""
    return "batch_req_" + hashlib.sha256(f"{job_id}:{line_no}".encode()).hexdigest()[:32]


def _answered(job_id: str, line: LineRecord) -> BatchOutputLine:
    body = msgspec.Raw(line.response.encode()) if line.response is not None else NULL
    response = BatchLineResponse(line.status_code, line.request_id, body)
    return BatchOutputLine(
        id=output_line_id(job_id, line.line_no), custom_id=line.custom_id, response=response
    )


def _never_run(job_id: str, line: LineRecord, code: str) -> BatchOutputLine:
    error = BatchLineError(code, _NEVER_RUN_MESSAGES[code])
    return BatchOutputLine(id=output_line_id(job_id, line.line_no), custom_id=line.custom_id, error=error)


def build_job_files(job_id: str, lines: list[LineRecord], never_run_code: str | None) -> JobFiles:
    """The two files of a job from all its lines; `never_run_code` (batch_cancelled, batch_expired,
    or why the job's key stopped it) names why lines still pending never ran, None when none may be
    pending."""
    output: list[bytes] = []
    errors: list[bytes] = []
    for line in sorted(lines, key=lambda line: line.line_no):
        if line.state == "succeeded":
            output.append(_ENCODER.encode(_answered(job_id, line)))
        elif line.state == "failed":
            errors.append(_ENCODER.encode(_answered(job_id, line)))
        elif never_run_code is not None:
            errors.append(_ENCODER.encode(_never_run(job_id, line, never_run_code)))
        else:
            raise ValueError(f"line {line.line_no} of {job_id} has no outcome")
    return JobFiles(output=_jsonl(output), errors=_jsonl(errors))


def _jsonl(lines: list[bytes]) -> bytes:
    return b"".join(line + b"\n" for line in lines)
