"""The pure parts of the batch jobs benchmark (bench/batch_jobs): the input files it writes, the
prefix-cache ceiling it computes, its reading of a finished job's files, and its verdicts on kills.

The ceiling is checked against the simulator's own engine, and the files against the runner's own
writer (gateway.jobs.output_files), so that the benchmark measures what those really do."""

from __future__ import annotations

import json
import os

from bench.batch_jobs.crash import CONCURRENCY, Kill, kill_figures
from bench.batch_jobs.lines import CHAT_URL, Line, cache_ceiling, input_file, prompt_tokens, read_job_files
from bench.batch_jobs.stack import owner_pid
from bench.scheduling.prompts import chat, text
from gateway.jobs.input_lines import check_input
from gateway.jobs.output_files import BATCH_CANCELLED, LineRecord, build_job_files
from gateway.jobs.runner import process_owner
from mock_upstream.vllm.engine import Engine, EngineConfig
from mock_upstream.vllm.tokens import prompt_blocks, prompt_text

BLOCK_SIZE = 16


def grouped_lines() -> list[Line]:
    """Two shared system prompts of different lengths, questions interleaved, and one lone line."""
    systems = {"a": text(150, "Manual A."), "b": text(77, "Guide B.")}
    lines = [
        Line(f"{group}-{n}", chat(text(10 + n, f"Question {n}."), 4, system=systems[group]), group)
        for n in range(6)
        for group in ("a", "b")
    ]
    return [*lines, Line("lone", chat(text(40, "Alone."), 4), "lone")]


def test_an_input_file_is_one_valid_request_per_line_for_the_gateways_own_check() -> None:
    lines = grouped_lines()
    data = input_file("sim", lines)
    checked = check_input(data, CHAT_URL)
    assert checked.errors == ()
    assert checked.model == "sim"
    assert [line.custom_id for line in checked.lines] == [line.custom_id for line in lines]
    first = json.loads(data.splitlines()[0])
    assert first["body"]["messages"] == lines[0].chat.messages
    assert first["body"]["max_tokens"] == 4


def test_prompt_tokens_are_counted_as_the_simulator_counts_them() -> None:
    for line in grouped_lines():
        simulated = prompt_blocks("sim", prompt_text(line.chat.messages), BLOCK_SIZE)
        assert prompt_tokens(line.chat) == simulated.tokens


def run_one_at_a_time(lines: list[Line]) -> Engine:
    """The simulator's engine given the lines one after another, each finished before the next,
    with a KV cache that never evicts: every prefix is then missed exactly once."""
    engine = Engine(EngineConfig(block_size=BLOCK_SIZE, num_gpu_blocks=100_000), clock=lambda: 0.0)
    for line in lines:
        engine.add(line.custom_id, prompt_blocks("sim", prompt_text(line.chat.messages), BLOCK_SIZE), 4)
        while engine.has_work():
            engine.step()
    return engine


def test_the_cache_ceiling_is_what_the_engine_hits_when_each_prefix_is_missed_once() -> None:
    lines = grouped_lines()
    ceiling = cache_ceiling(lines, BLOCK_SIZE)
    stats = run_one_at_a_time(sorted(lines, key=lambda line: line.group)).stats
    assert ceiling.hits > 0
    assert (ceiling.hits, ceiling.queries) == (stats.prefix_cache_hits, stats.prefix_cache_queries)
    assert 0 < ceiling.ratio < 1


def test_a_group_of_one_line_gets_no_hits() -> None:
    assert cache_ceiling([Line("lone", chat(text(200, "Alone."), 4), "lone")], BLOCK_SIZE).hits == 0


def completion(prompt: int, completion: int, cached: int) -> str:
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    return json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "choices": [], "usage": usage})


def test_a_jobs_files_are_read_by_custom_id_with_the_output_lines_usage_added_up() -> None:
    records = [
        LineRecord(0, "x-0", "succeeded", 200, completion(10, 3, 4), "req-0"),
        LineRecord(1, "x-1", "failed", 400, json.dumps({"error": {"code": "bad_request"}}), "req-1"),
        LineRecord(2, "x-2", "succeeded", 200, completion(7, 2, 0), "req-2"),
        LineRecord(3, "x-3", "pending"),
    ]
    files = build_job_files("batch_1", records, BATCH_CANCELLED)
    read = read_job_files(files.output, files.errors)
    assert (read.succeeded, read.failed, read.lines) == (2, 2, 4)
    assert (read.prompt_tokens, read.completion_tokens, read.cached_tokens) == (17, 5, 4)
    assert dict(read.error_codes) == {"bad_request": 1, BATCH_CANCELLED: 1}
    assert read.duplicates == 0
    assert read.missing(["x-0", "x-1", "x-2", "x-3", "x-4"]) == 1


def test_a_custom_id_in_both_files_is_a_duplicate() -> None:
    first = build_job_files(
        "batch_1", [LineRecord(0, "x-0", "succeeded", 200, completion(1, 1, 0), "r")], None
    )
    again = build_job_files("batch_1", [LineRecord(0, "x-0", "pending")], BATCH_CANCELLED)
    read = read_job_files(first.output, again.errors)
    assert read.duplicates == 1
    assert read.lines == 2


def test_the_pid_of_a_lease_owner_is_read_from_what_the_runner_writes() -> None:
    assert owner_pid(process_owner()) == os.getpid()


def verdicts(kills: list[Kill]) -> dict[str, str]:
    return {figure.name: figure.verdict for figure in kill_figures(kills) if figure.met is not None}


def test_kills_pass_when_each_reran_at_most_the_lines_in_flight_and_moved_soon() -> None:
    kills = [Kill("running", True, CONCURRENCY, 3.0), Kill("finalizing", True, 0, 2.0)]
    assert set(verdicts(kills).values()) == {"pass"}


def test_a_kill_that_reran_too_much_never_moved_or_missed_finalizing_is_a_miss() -> None:
    kills = [Kill("running", True, CONCURRENCY + 1, None), Kill("finalizing", False, 0, 1.0)]
    assert set(verdicts(kills).values()) == {"miss"}
