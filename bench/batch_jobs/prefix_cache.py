"""The prefix cache: one job of lines over 50 shared system prompts, in shuffled order, against a
simulator whose KV cache holds only a fifth of the prompts at once. Sent in input order, most
lines would find their prompt evicted; the runner sends the lines sharing a prefix together, so
that each prefix is missed about once.

The best possible hit ratio is computed from the lines (`lines.cache_ceiling`: each prefix missed
once); the measured one is the simulator's own (`/_sim/stats`: hits over queries)."""

from __future__ import annotations

import random

from bench.batch_jobs.lines import Line, cache_ceiling, input_file
from bench.batch_jobs.stack import PROVIDER, BatchClient, JobsRun, jobs_catalog
from bench.scheduling.figures import Figure, context, judged
from bench.scheduling.load import Target, run_all
from bench.scheduling.processes import UPSTREAM_MODEL, Simulator
from bench.scheduling.prompts import chat, text

NAME = "prefix-cache"
PREFIXES, PER_PREFIX = 50, 24
PREFIX_TOKENS, QUESTION_TOKENS, OUTPUT_TOKENS = 1024, 32, 16
BLOCK_SIZE = 16
HELD_PREFIXES = 10  # what the KV cache holds beside the sequences running
JOB_CONCURRENCY = 64
TIME_SCALE = 0.25
TARGET = 0.95
JOB_TIMEOUT_S = 300.0


def job_lines(salt: str) -> list[Line]:
    """PER_PREFIX questions on each system prompt, shuffled (seeded: every run sends the same order);
    prompts of another `salt` share no block with these."""
    prefixes = [text(PREFIX_TOKENS, f"{salt} {p}.") for p in range(PREFIXES)]
    order = [p for p in range(PREFIXES) for _ in range(PER_PREFIX)]
    random.Random(7).shuffle(order)
    return [
        Line(
            f"q-{n}", chat(text(QUESTION_TOKENS, f"Question {n}."), OUTPUT_TOKENS, system=prefixes[p]), str(p)
        )
        for n, p in enumerate(order)
    ]


def kv_blocks() -> int:
    """HELD_PREFIXES prompts, plus each running line's own blocks (question, answer, a spare)."""
    own = -(-(QUESTION_TOKENS + OUTPUT_TOKENS) // BLOCK_SIZE) + 1
    return HELD_PREFIXES * PREFIX_TOKENS // BLOCK_SIZE + JOB_CONCURRENCY * own


async def sent_in_order(simulator: Simulator, target: Target) -> float:
    """The hit ratio of lines like the job's sent straight at the simulator in their input order, at
    the job's concurrency: what the runner's grouping saves."""
    await simulator.reset()
    await run_all(target, [(line.group, line.chat) for line in job_lines("Guide")], JOB_CONCURRENCY)
    stats = await simulator.stats()
    return (
        float(stats["prefix_cache_hits"] / stats["prefix_cache_queries"])
        if stats["prefix_cache_queries"]
        else 0.0
    )


async def run(bench: JobsRun) -> list[Figure]:
    blocks = kv_blocks()
    simulator = await bench.simulator(time_scale=TIME_SCALE, num_gpu_blocks=blocks, block_size=BLOCK_SIZE)
    gateway = await bench.job_gateway("prefix-cache", jobs_catalog(simulator, concurrency=JOB_CONCURRENCY))
    _, key = await gateway.team("prefix-cache")
    lines = job_lines("Manual")
    ceiling = cache_ceiling(lines, BLOCK_SIZE)
    in_order = await sent_in_order(simulator, bench.target(simulator.base_url(), "unused", UPSTREAM_MODEL))

    await simulator.reset()
    client = BatchClient(bench, gateway, key)
    batch = await client.submit(input_file(PROVIDER, lines))
    final = await client.finished(batch.id, JOB_TIMEOUT_S)
    stats = await simulator.stats()
    hits, queries = stats["prefix_cache_hits"], stats["prefix_cache_queries"]
    measured = hits / queries if queries else 0.0
    share = measured / ceiling.ratio if ceiling.ratio else 0.0
    return [
        context(
            NAME,
            "setup",
            f"{PREFIXES} system prompts of {PREFIX_TOKENS} tokens x {PER_PREFIX} questions, shuffled; "
            f"{blocks} KV blocks of {BLOCK_SIZE} (about {HELD_PREFIXES} prompts), "
            f"jobs.concurrency {JOB_CONCURRENCY}, time scale {TIME_SCALE}",
        ),
        context(
            NAME,
            "job: status; simulator: hits / queries (tokens), preemptions",
            f"{final.status}; {hits:,} / {queries:,}, {stats['preemptions']}",
        ),
        context(
            NAME,
            "hit ratio: sent straight in input order / each prefix missed once (best) / the job",
            f"{in_order:.1%} / {ceiling.ratio:.1%} / {measured:.1%}",
        ),
        judged(NAME, "hit ratio / best", f">= {TARGET:.0%}", share * 100, share >= TARGET, "%"),
    ]
