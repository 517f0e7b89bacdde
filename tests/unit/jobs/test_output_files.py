"""A finished job's output and error files: OpenAI's line format, one line per custom_id."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.jobs.output_files import (
    BATCH_CANCELLED,
    BATCH_EXPIRED,
    LineRecord,
    build_job_files,
    output_line_id,
)

COMPLETION = '{"object": "chat.completion", "usage": {"prompt_tokens": 3}}'
REFUSAL = '{"error": {"message": "bad", "type": "invalid_request_error", "param": null, "code": null}}'


def lines_of(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.decode().splitlines()]


def mixed() -> list[LineRecord]:
    """Four lines, stored out of input order: succeeded, failed, never run, succeeded."""
    return [
        LineRecord(3, "d", "succeeded", 200, COMPLETION, "batch_x-3"),
        LineRecord(1, "b", "failed", 400, REFUSAL, "batch_x-1"),
        LineRecord(0, "a", "succeeded", 200, COMPLETION, "batch_x-0"),
        LineRecord(2, "c", "pending"),
    ]


def test_succeeded_lines_go_to_the_output_file_in_input_order_with_their_body_as_sent() -> None:
    files = build_job_files("batch_x", mixed(), BATCH_CANCELLED)
    output = lines_of(files.output)
    assert [line["custom_id"] for line in output] == ["a", "d"]
    assert output[0] == {
        "id": output_line_id("batch_x", 0),
        "custom_id": "a",
        "response": {"status_code": 200, "request_id": "batch_x-0", "body": json.loads(COMPLETION)},
        "error": None,
    }


def test_refused_and_never_run_lines_go_to_the_error_file() -> None:
    errors = lines_of(build_job_files("batch_x", mixed(), BATCH_EXPIRED).errors)
    assert [line["custom_id"] for line in errors] == ["b", "c"]
    refused, never_run = errors
    assert refused["response"] == {"status_code": 400, "request_id": "batch_x-1", "body": json.loads(REFUSAL)}
    assert refused["error"] is None
    assert never_run["response"] is None
    assert never_run["error"]["code"] == "batch_expired" and never_run["error"]["message"]


def test_every_custom_id_is_in_exactly_one_file_with_a_distinct_line_id() -> None:
    files = build_job_files("batch_x", mixed(), BATCH_CANCELLED)
    every = lines_of(files.output) + lines_of(files.errors)
    assert sorted(line["custom_id"] for line in every) == ["a", "b", "c", "d"]
    assert len({line["id"] for line in every}) == 4
    assert all(line["id"].startswith("batch_req_") for line in every)


def test_a_job_where_every_line_succeeded_has_no_error_lines() -> None:
    records = [LineRecord(n, f"id-{n}", "succeeded", 200, COMPLETION, f"batch_y-{n}") for n in range(3)]
    files = build_job_files("batch_y", records, None)
    assert files.errors == b""
    assert len(lines_of(files.output)) == 3


def test_a_completed_job_may_not_have_a_line_without_an_outcome() -> None:
    with pytest.raises(ValueError, match="no outcome"):
        build_job_files("batch_x", mixed(), None)


def test_line_ids_are_the_same_each_time_and_differ_between_lines_and_jobs() -> None:
    assert output_line_id("batch_x", 0) == output_line_id("batch_x", 0)
    assert (
        len({output_line_id("batch_x", 0), output_line_id("batch_x", 1), output_line_id("batch_y", 0)}) == 3
    )
