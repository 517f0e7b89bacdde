"""A batch job as Anthropic's Message Batch: its processing status and request counts for each job
status, and its result lines for each line outcome (gateway/api/anthropic/batches.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from gateway.api.anthropic.batches import request_counts, results
from gateway.db.models import BatchJob
from gateway.errors import InvalidRequest
from gateway.jobs.output_files import LineRecord

CREATED = datetime(2026, 12, 4, 3, 0, tzinfo=UTC)
MESSAGE = '{"id":"msg_1","type":"message","role":"assistant","content":[]}'
REFUSED = InvalidRequest("messages: must be a list", param="messages").to_json().decode()


def job(
    status: str, *, completed: int = 0, failed: int = 0, errors: list[dict[str, object]] | None = None
) -> BatchJob:
    return BatchJob(
        id="batch_1",
        status=status,
        request_total=4,
        request_completed=completed,
        request_failed=failed,
        created_at=CREATED,
        expires_at=CREATED + timedelta(hours=24),
        errors=errors,
    )


@pytest.mark.parametrize(
    ("status", "left_as"),
    [
        ("validating", "processing"),
        ("in_progress", "processing"),
        ("cancelling", "processing"),
        ("cancelled", "canceled"),
        ("expired", "expired"),
        ("failed", "errored"),  # its key stopped it: with the line that failed, 3
    ],
)
def test_the_counts_sum_to_the_requests_and_unfinished_ones_count_as_the_job_ended(
    status: str, left_as: str
) -> None:
    counts = msgspec.structs.asdict(request_counts(job(status, completed=1, failed=1)))
    assert sum(counts.values()) == 4
    assert counts["succeeded"] == 1
    assert counts[left_as] == (3 if left_as == "errored" else 2)


def test_a_completed_job_counts_each_outcome_once() -> None:
    counts = request_counts(job("completed", completed=3, failed=1))
    assert msgspec.structs.asdict(counts) == {
        "processing": 0,
        "succeeded": 3,
        "errored": 1,
        "canceled": 0,
        "expired": 0,
    }


def lines() -> list[LineRecord]:
    return [
        LineRecord(0, "a", "succeeded", 200, MESSAGE, "batch_1-0"),
        LineRecord(1, "b", "failed", 400, REFUSED, "batch_1-1"),
        LineRecord(2, "c", "pending"),
    ]


def decoded(job: BatchJob) -> list[dict[str, object]]:
    return [msgspec.json.decode(line) for line in results(job, lines()).splitlines()]


def test_each_line_is_a_result_in_anthropics_format() -> None:
    succeeded, errored, canceled = decoded(job("cancelled", completed=1, failed=1))
    assert succeeded == {
        "custom_id": "a",
        "result": {"type": "succeeded", "message": msgspec.json.decode(MESSAGE)},
    }
    assert errored["result"] == {
        "type": "errored",
        "error": {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "messages: must be a list",
                "param": "messages",
                "code": "invalid_request",
            },
        },
    }
    assert canceled == {"custom_id": "c", "result": {"type": "canceled"}}


def test_a_line_never_run_is_expired_or_errored_with_why_its_job_stopped() -> None:
    assert decoded(job("expired"))[2]["result"] == {"type": "expired"}
    stopped = job("failed", errors=[{"code": "api_key_revoked", "message": "The key was revoked."}])
    result = decoded(stopped)[2]["result"]
    assert result == {
        "type": "errored",
        "error": {
            "type": "error",
            "error": {
                "type": "authentication_error",
                "message": "The key was revoked.",
                "param": None,
                "code": "api_key_revoked",
            },
        },
    }
