"""Throughput: a job pinned to the simulator (X-Gateway-Provider) against the simulator's saturated
throughput, both as generation tokens/s from `/_sim/stats` (from its first request to its last step).

Saturated is the same kind of lines sent straight at the simulator, at twice the sequences it runs
at once. The two passes' lines differ in their opening words only (the same token counts), so the
second pass finds nothing of the first in the prefix cache. The simulator is slowed down (time scale
0.5, 128-token answers) so that it, not the CPU the bench's own client takes on a small machine, is
what saturates in the direct pass."""

from __future__ import annotations

import time
from typing import Any

from bench.batch_jobs.lines import Line, input_file, prompt_tokens
from bench.batch_jobs.stack import PROVIDER, BatchClient, JobsRun, jobs_catalog
from bench.scheduling.figures import Figure, context, judged
from bench.scheduling.load import error_text, run_all
from bench.scheduling.processes import UPSTREAM_MODEL
from bench.scheduling.prompts import chat, text

NAME = "throughput"
LINES = 1500
PROMPT_TOKENS, OUTPUT_TOKENS = 256, 128
MAX_NUM_SEQS = 128
DIRECT_CONCURRENCY = 2 * MAX_NUM_SEQS
JOB_CONCURRENCY = 256  # jobs.concurrency, the default
TIME_SCALE = 0.5
TARGET = 0.95
JOB_TIMEOUT_S = 300.0


def lines(opening: str) -> list[Line]:
    return [
        Line(f"{opening}-{n}", chat(text(PROMPT_TOKENS, f"{opening} {n}."), OUTPUT_TOKENS))
        for n in range(LINES)
    ]


def rates(stats: dict[str, Any]) -> str:
    """Generation tokens/s and requests/s over the simulator's span of work."""
    per_s = stats["requests_finished"] / stats["elapsed_s"] if stats["elapsed_s"] else 0.0
    return f"{stats['generation_tokens_per_s']:,.0f}, {per_s:.0f}"


async def run(bench: JobsRun) -> list[Figure]:
    simulator = await bench.simulator(time_scale=TIME_SCALE, max_num_seqs=MAX_NUM_SEQS)
    gateway = await bench.job_gateway("throughput", jobs_catalog(simulator, concurrency=JOB_CONCURRENCY))
    _, key = await gateway.team("throughput")

    direct_lines = lines("Direct")
    direct = bench.target(simulator.base_url(), "unused", UPSTREAM_MODEL)
    await simulator.reset()
    outcomes = await run_all(
        direct, [(line.custom_id, line.chat) for line in direct_lines], DIRECT_CONCURRENCY
    )
    saturated = await simulator.stats()

    await simulator.reset()
    client = BatchClient(bench, gateway, key)
    started = time.monotonic()
    batch = await client.submit(input_file(PROVIDER, lines("Job")), {"X-Gateway-Provider": PROVIDER})
    final = await client.finished(batch.id, JOB_TIMEOUT_S, 0.1)
    seconds = time.monotonic() - started
    job = await simulator.stats()

    share = job["generation_tokens_per_s"] / saturated["generation_tokens_per_s"]
    counts = final.request_counts
    done = f"{counts.completed}/{counts.total} completed, {counts.failed} failed" if counts else "no counts"
    return [
        context(
            NAME,
            "setup",
            f"{LINES:,} lines of {prompt_tokens(direct_lines[0].chat)} prompt + {OUTPUT_TOKENS} output tokens, "
            f"max_num_seqs {MAX_NUM_SEQS}, time scale {TIME_SCALE}",
        ),
        context(
            NAME,
            f"saturated: straight at the simulator, {DIRECT_CONCURRENCY} at once: tokens/s, lines/s, max running, errors",
            f"{rates(saturated)}, {saturated['max_running']}, {error_text(outcomes)}",
        ),
        context(
            NAME,
            f"job (jobs.concurrency {JOB_CONCURRENCY}): tokens/s, lines/s, max running, status, wall clock",
            f"{rates(job)}, {job['max_running']}, {final.status} ({done}), {seconds:.1f} s",
        ),
        judged(
            NAME, "job / saturated generation tokens/s", f">= {TARGET:.0%}", share * 100, share >= TARGET, "%"
        ),
    ]
