"""The Batch API end to end (SPEC section 9): the openai SDK -> `gateway serve` -> the simulated vLLM.

A job's round trip from upload to output file, with counts, usage and the usage report agreeing
with its lines; a bad input file; one team's files and batches out of another's sight; a cancel
that stops new lines and accounts for every line; a process killed mid-job whose job another
process finishes, each line metered once. Deadlines are generous; the figures are printed.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types import Batch

from tests.e2e.stacks.jobs import (
    FINAL,
    TAKEOVER_JOBS,
    Gateway,
    JobsStack,
    chat_line,
    file_lines,
    jobs_stack,
    jsonl,
    kill,
    reset_replica,
    started_requests,
    wait_for_batch,
    wait_until,
)
from tests.support.openapi import validate

pytestmark = pytest.mark.e2e

SYSTEMS = ("You are a terse assistant.", "You translate everything into French.")
DEADLINE_S = 60.0
CANCEL_DEADLINE_S = 10.0  # from the cancel until no new line starts


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobsStack]:
    with jobs_stack(tmp_path_factory.mktemp("jobs")) as running:
        yield running


def input_lines(model: str, count: int, max_tokens: int, *, prefix: str = "req") -> list[dict[str, Any]]:
    """`count` lines under two system prompts, each asking for `max_tokens` plus up to two."""
    return [
        chat_line(f"{prefix}-{i}", model, SYSTEMS[i % 2], f"question {i}", max_tokens + i % 3)
        for i in range(count)
    ]


def submit(client: openai.OpenAI, lines: list[dict[str, Any]]) -> Batch:
    uploaded = client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
    return client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )


def batch_json(client: openai.OpenAI, batch_id: str) -> dict[str, Any]:
    """The Batch object exactly as the gateway sent it."""
    reply: dict[str, Any] = client.batches.with_raw_response.retrieve(batch_id).http_response.json()
    return reply


def custom_ids(lines: list[dict[str, Any]]) -> list[str]:
    return [line["custom_id"] for line in lines]


def line_usage(output: list[dict[str, Any]]) -> Counter[str]:
    """The usage summed over the output lines' chat completions."""
    total: Counter[str] = Counter()
    for line in output:
        usage = line["response"]["body"]["usage"]
        total["prompt_tokens"] += usage["prompt_tokens"]
        total["completion_tokens"] += usage["completion_tokens"]
        total["cached_tokens"] += usage["prompt_tokens_details"]["cached_tokens"]
    return total


def one_line_per_custom_id(sent: list[dict[str, Any]], *files: list[dict[str, Any]]) -> None:
    """Every custom_id once across the files, each file in input order."""
    order = {custom_id: index for index, custom_id in enumerate(custom_ids(sent))}
    found = [custom_id for lines in files for custom_id in custom_ids(lines)]
    assert sorted(found) == sorted(order), "each custom_id exactly once across the files"
    for lines in files:
        places = [order[custom_id] for custom_id in custom_ids(lines)]
        assert places == sorted(places), "a file's lines in input order"


def assert_metered(gateway: Gateway, batch: Batch, output: list[dict[str, Any]], lost: int = 0) -> None:
    """The job's usage, its one report row and its records all equal the sum over its lines; `lost`
    runs (cut off in flight by a kill) have an estimated record each besides."""
    summed = line_usage(output)
    assert batch.usage is not None
    assert batch.usage.input_tokens == summed["prompt_tokens"]
    assert batch.usage.output_tokens == summed["completion_tokens"]
    assert batch.usage.input_tokens_details.cached_tokens == summed["cached_tokens"]
    assert batch.usage.total_tokens == summed["prompt_tokens"] + summed["completion_tokens"]
    [row] = gateway.batch_usage(batch.id)
    assert row["batch_id"] == batch.id
    assert row["requests"] == len(output) + lost
    if not lost:
        assert {name: row[name] for name in summed} == dict(summed)
    every = gateway.batch_events(batch.id)
    events = {event["request_id"]: event for event in every if event["error_code"] != "attempt_lost"}
    assert len(every) - len(events) == lost
    assert sorted(events) == sorted(line["response"]["request_id"] for line in output)
    for line in output:
        event, usage = events[line["response"]["request_id"]], line["response"]["body"]["usage"]
        assert (event["prompt_tokens"], event["completion_tokens"]) == (
            usage["prompt_tokens"],
            usage["completion_tokens"],
        )


def test_a_batch_runs_from_upload_to_output_file(stack: JobsStack) -> None:
    team = stack.main.new_team("round-trip")
    client = stack.main.client(team.key)
    sent = input_lines("quick", 12, max_tokens=4)

    created = submit(client, sent)
    assert created.status == "validating"
    assert created.request_counts is not None and created.request_counts.total == len(sent)
    batch = wait_for_batch(client, created.id, FINAL, DEADLINE_S)

    assert batch.status == "completed", batch.errors
    validate("Batch", batch_json(client, batch.id))
    assert batch.output_file_id is not None and batch.error_file_id is None
    assert None not in (batch.in_progress_at, batch.finalizing_at, batch.completed_at)
    output = file_lines(client, batch.output_file_id)
    assert custom_ids(output) == custom_ids(sent)
    for line, request in zip(output, sent, strict=True):
        assert set(line) == {"id", "custom_id", "response", "error"}
        assert line["id"].startswith("batch_req_") and line["error"] is None
        assert line["response"]["status_code"] == 200 and line["response"]["request_id"]
        body = line["response"]["body"]
        validate("CreateChatCompletionResponse", body)
        assert body["usage"]["completion_tokens"] == request["body"]["max_tokens"]
    assert len({line["id"] for line in output}) == len(output)
    assert batch.request_counts is not None
    counts = batch.request_counts
    assert (counts.total, counts.completed, counts.failed) == (len(sent), len(sent), 0)
    assert_metered(stack.main, batch, output)
    files = {stored.id: stored for stored in client.files.list(purpose="batch_output")}
    assert files[batch.output_file_id].filename == f"{batch.id}_output.jsonl"
    # Job lines are streamed from the upstream by default, so the job has a prefill/decode split
    # with nothing set on the provider (SPEC section 10)
    throughput = client.get(f"/gateway/batches/{batch.id}", cast_to=httpx.Response).json()["throughput"]
    assert throughput["requests_without_ttft"] == 0
    assert throughput["prefill_tokens_per_s"] > 0 and throughput["decode_tokens_per_s"] > 0
    assert throughput["ttft_ms"]["p50"] is not None


def test_a_bad_input_file_gives_a_failed_batch_naming_its_lines(stack: JobsStack) -> None:
    team = stack.main.new_team("bad-file")
    client = stack.main.client(team.key)
    good = chat_line("same", "quick", SYSTEMS[0], "hello", 4)
    duplicate = chat_line("same", "quick", SYSTEMS[0], "hello again", 4)
    elsewhere = chat_line("other", "quick", SYSTEMS[0], "hello", 4) | {"url": "/v1/embeddings"}

    batch = submit(client, [good, duplicate, elsewhere])

    assert batch.status == "failed" and batch.failed_at is not None
    assert batch.errors is not None and batch.errors.data is not None
    assert sorted((error.line, error.code) for error in batch.errors.data) == [
        (2, "duplicate_custom_id"),
        (3, "mismatched_endpoint"),
    ]
    assert batch.request_counts is not None and batch.request_counts.total == 0
    time.sleep(1.0)  # several of the runner's polls: a failed job is never claimed
    again = client.batches.retrieve(batch.id)
    assert (again.status, again.output_file_id, again.in_progress_at) == ("failed", None, None)


def test_a_team_never_sees_another_teams_files_or_batches(stack: JobsStack) -> None:
    owner, stranger = stack.main.new_team("owner"), stack.main.new_team("stranger")
    mine, theirs = stack.main.client(owner.key), stack.main.client(stranger.key)
    sent = input_lines("quick", 2, max_tokens=2, prefix="own")
    created = submit(mine, sent)
    batch = wait_for_batch(mine, created.id, FINAL, DEADLINE_S)
    assert batch.status == "completed" and batch.output_file_id is not None
    file_ids = (created.input_file_id, batch.output_file_id)

    for file_id in file_ids:
        with pytest.raises(openai.NotFoundError):
            theirs.files.retrieve(file_id)
        with pytest.raises(openai.NotFoundError):
            theirs.files.content(file_id)
        with pytest.raises(openai.NotFoundError):
            theirs.files.delete(file_id)
    with pytest.raises(openai.NotFoundError):
        theirs.batches.retrieve(batch.id)
    with pytest.raises(openai.NotFoundError):
        theirs.batches.cancel(batch.id)
    assert [stored.id for stored in theirs.files.list()] == []
    assert [listed.id for listed in theirs.batches.list()] == []

    # the owner still sees all of it, untouched
    assert {stored.id for stored in mine.files.list()} == set(file_ids)
    assert [listed.id for listed in mine.batches.list()] == [batch.id]
    assert custom_ids(file_lines(mine, batch.output_file_id)) == custom_ids(sent)


def test_a_cancel_stops_new_lines_and_accounts_for_every_line(stack: JobsStack) -> None:
    team = stack.main.new_team("cancel")
    client = stack.main.client(team.key)
    reset_replica(stack.sim, "held")
    # 0.6 to 3 seconds a line, four at a time: a new line starts every half second or so
    sent = [
        chat_line(f"held-{i}", "held", SYSTEMS[i % 2], f"question {i}", 60 + i * 53 % 240) for i in range(32)
    ]
    created = submit(client, sent)
    wait_until(lambda: started_requests(stack.sim, "held") >= 8, DEADLINE_S, "eight lines start")

    cancelling = client.batches.cancel(created.id)
    cancelled_at = time.monotonic()
    assert cancelling.status == "cancelling" and cancelling.cancelling_at is not None
    last_start, started = cancelled_at, started_requests(stack.sim, "held")
    deadline = cancelled_at + DEADLINE_S
    while (batch := client.batches.retrieve(created.id)).status not in FINAL:
        assert batch.status == "cancelling", batch.status
        now_started = started_requests(stack.sim, "held")
        if now_started > started:
            last_start, started = time.monotonic(), now_started
        assert time.monotonic() < deadline, "the batch is still cancelling"
        time.sleep(0.05)
    quiet_after_s = last_start - cancelled_at
    print(
        f"\ncancel: the last new line started {quiet_after_s:.2f} s after the cancel; "
        f"cancelled {time.monotonic() - cancelled_at:.2f} s after it; {started} of {len(sent)} lines ran"
    )

    assert batch.status == "cancelled" and batch.cancelled_at is not None
    assert quiet_after_s < CANCEL_DEADLINE_S
    output, errors = file_lines(client, batch.output_file_id), file_lines(client, batch.error_file_id)
    one_line_per_custom_id(sent, output, errors)
    assert all(line["response"]["status_code"] == 200 for line in output)
    assert errors, "some lines never ran"
    for line in errors:
        assert line["response"] is None
        assert line["error"]["code"] == "batch_cancelled" and line["error"]["message"]
    # the lines that ran are exactly those the simulator saw (one attempt each), all stored
    assert started_requests(stack.sim, "held") == len(output) == started
    assert batch.request_counts is not None
    assert (batch.request_counts.completed, batch.request_counts.failed) == (len(output), 0)
    assert_metered(stack.main, batch, output)


def test_a_job_whose_process_is_killed_is_finished_by_another(stack: JobsStack) -> None:
    first = stack.takeover.start()
    team = first.new_team("takeover")
    reset_replica(stack.sim, "resumed")
    sent = input_lines("resumed", 16, max_tokens=100)  # about a second a line, four at a time
    created = submit(first.client(team.key), sent)

    stored: list[int] = []

    def some_stored() -> bool:
        counts = first.client(team.key).batches.retrieve(created.id).request_counts
        stored.append(0 if counts is None else counts.completed)
        return stored[-1] >= 4

    wait_until(some_stored, DEADLINE_S, "four lines of the job are stored")
    kill(first.process)
    killed_at = time.monotonic()
    assert stored[-1] < len(sent), "the job must still have lines to run when its process dies"
    second = stack.takeover.start()
    client = second.client(team.key)
    batch = wait_for_batch(client, created.id, FINAL, DEADLINE_S)
    ran = started_requests(stack.sim, "resumed")
    print(
        f"\ntakeover: completed {time.monotonic() - killed_at:.2f} s after the kill; "
        f"{ran - len(sent)} of {len(sent)} lines sent twice (in flight at the kill)"
    )

    assert batch.status == "completed", batch.errors
    assert batch.error_file_id is None
    output = file_lines(client, batch.output_file_id)
    assert custom_ids(output) == custom_ids(sent)
    assert batch.request_counts is not None
    assert (batch.request_counts.completed, batch.request_counts.failed) == (len(sent), 0)
    # only the lines in flight at the kill ran twice; their second outcome alone is stored, and
    # their first runs have a record each: every request the upstream started is metered
    assert len(sent) <= ran <= len(sent) + TAKEOVER_JOBS["concurrency"]
    assert_metered(second, batch, output, lost=ran - len(sent))
