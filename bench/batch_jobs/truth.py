"""Truth: a job's throughput as the gateway reports it (`GET /v1/gateway/batches/{id}`, computed
from its usage records) against the simulator's own ground truth (`/_sim/stats`, reset before the
job): prefill and generation tokens/s, and the prefix-cache hit ratio.

The simulator divides its tokens by the wall-clock time from its first request to its last step;
the gateway divides them by the time covered by the records' intervals at the upstream, from each
line's send to its end. The two agree when the job keeps the simulator busy from start to end;
what is left apart is at the edges (the first send before the simulator sees it, the last answer's
way back), well under a percent of a run of seconds. Time in which none of the job's lines was at
the upstream is left out on the gateway's side and counted on the simulator's, so a job that
leaves the simulator idle between lines reads the higher here.

The provider has `measure_ttft: true` and the lines do not stream, so every line has a TTFT."""

from __future__ import annotations

from typing import Any

import asyncpg

from bench.batch_jobs.lines import Line, input_file, prompt_tokens
from bench.batch_jobs.stack import DATABASE_URL, PROVIDER, BatchClient, JobsRun, jobs_catalog
from bench.scheduling.figures import Figure, context, judged
from bench.scheduling.prompts import chat, text

NAME = "truth"
PREFIXES, PER_PREFIX = 4, 400
PREFIX_TOKENS, QUESTION_TOKENS, OUTPUT_TOKENS = 512, 48, 24
MAX_NUM_SEQS = 32
JOB_CONCURRENCY = 128  # four times the simulator's sequences: a queue at the simulator throughout
TIME_SCALE = 0.5
RATE_TOLERANCE = 0.05  # +-5% of the simulator's rate
RATIO_TOLERANCE = 0.01  # +-1 point of the simulator's hit ratio
JOB_TIMEOUT_S = 300.0


def job_lines() -> list[Line]:
    """PER_PREFIX questions on each of PREFIXES system prompts, the prompts' lines together."""
    prefixes = [text(PREFIX_TOKENS, f"Handbook {p}.") for p in range(PREFIXES)]
    return [
        Line(
            f"q-{p}-{n}",
            chat(text(QUESTION_TOKENS, f"Question {n}."), OUTPUT_TOKENS, system=prefixes[p]),
            str(p),
        )
        for p in range(PREFIXES)
        for n in range(PER_PREFIX)
    ]


def simulated_hit_ratio(stats: dict[str, Any]) -> float | None:
    queries = stats["prefix_cache_queries"]
    return stats["prefix_cache_hits"] / queries if queries else None


def percent(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2%}"


def relative_error(reported: float | None, truth: float) -> float | None:
    """reported / truth - 1; None when either is missing or the truth is 0."""
    if reported is None or not truth:
        return None
    return reported / truth - 1


def agreement(throughput: dict[str, Any], stats: dict[str, Any]) -> list[Figure]:
    """The gateway's figures against the simulator's: each within its tolerance."""
    figures = []
    for field, truth_field in (
        ("prefill_tokens_per_s", "prefill_tokens_per_s"),
        ("decode_tokens_per_s", "generation_tokens_per_s"),
    ):
        reported, truth = throughput.get(field), float(stats[truth_field])
        error = relative_error(reported, truth)
        shown = "-" if reported is None else f"{reported:,.1f}"
        figures.append(
            context(NAME, f"{field}: gateway / simulator ({truth_field})", f"{shown} / {truth:,.1f}")
        )
        figures.append(
            judged(
                NAME,
                f"{field}: gateway vs simulator",
                f"within +-{RATE_TOLERANCE:.0%}",
                None if error is None else error * 100,
                error is not None and abs(error) <= RATE_TOLERANCE,
                "%",
            )
        )
    reported_ratio, true_ratio = throughput.get("cache_hit_ratio"), simulated_hit_ratio(stats)
    gap = None if reported_ratio is None or true_ratio is None else reported_ratio - true_ratio
    figures.append(
        context(
            NAME,
            "cache hit ratio: gateway / simulator (hits / queries)",
            f"{percent(reported_ratio)} / {percent(true_ratio)}",
        )
    )
    figures.append(
        judged(
            NAME,
            "cache hit ratio: gateway - simulator",
            f"within +-{RATIO_TOLERANCE * 100:.0f} point",
            None if gap is None else gap * 100,
            gap is not None and abs(gap) <= RATIO_TOLERANCE,
            " points",
        )
    )
    return figures


def edges(throughput: dict[str, Any], stats: dict[str, Any]) -> str:
    """The time each side divided by: the simulator's elapsed, the gateway's span and the time its
    rates are over (tokens over rate, prefill and decode: the same time), in seconds."""
    tokens = throughput["tokens"]
    prefill_tokens = tokens["prompt"] - tokens["cached"]

    def covered(count: int, rate: float | None) -> str:
        return f"{count / rate:.2f}" if rate else "-"

    return (
        f"{stats['elapsed_s']:.2f} / {throughput['span_s']:.2f} / "
        f"{covered(prefill_tokens, throughput['prefill_tokens_per_s'])} / "
        f"{covered(tokens['completion'], throughput['decode_tokens_per_s'])}"
    )


async def per_request_rates(batch_id: str) -> str:
    """Prefill and decode tokens/s with each request's time summed instead of the wall clock they
    cover: what a batch's rates would read as per-request averages (lower by the concurrency)."""
    conn = await asyncpg.connect(DATABASE_URL)
    try:
        row = await conn.fetchrow(
            "SELECT sum(prompt_tokens - cached_tokens) AS prefill, sum(completion_tokens) AS decode,"
            " sum(ttft_ms) / 1000 AS prefill_s, sum(greatest(latency_ms - coalesce(queue_ms, 0) - ttft_ms, 0))"
            " / 1000 AS decode_s FROM usage_records"
            " WHERE batch_id = $1 AND status = 200 AND ttft_ms IS NOT NULL",
            batch_id,
        )
    finally:
        await conn.close()
    if row is None or not row["prefill_s"] or not row["decode_s"]:
        return "-"
    return f"{row['prefill'] / row['prefill_s']:,.1f} / {row['decode'] / row['decode_s']:,.1f}"


async def run(bench: JobsRun) -> list[Figure]:
    simulator = await bench.simulator(time_scale=TIME_SCALE, max_num_seqs=MAX_NUM_SEQS)
    document = jobs_catalog(simulator, concurrency=JOB_CONCURRENCY)
    document["providers"][0]["measure_ttft"] = True
    gateway = await bench.job_gateway(NAME, document)
    _, key = await gateway.team(NAME)
    lines = job_lines()

    await simulator.reset()
    client = BatchClient(bench, gateway, key)
    batch = await client.submit(input_file(PROVIDER, lines))
    final = await client.finished(batch.id, JOB_TIMEOUT_S, 0.1)
    stats = await simulator.stats()
    reply = await bench.http.get(
        f"{gateway.base_url}/v1/gateway/batches/{batch.id}", headers={"authorization": f"Bearer {key}"}
    )
    reply.raise_for_status()
    throughput: dict[str, Any] = reply.json()["throughput"] or {}
    counts = throughput.get("requests", {})
    return [
        context(
            NAME,
            "setup",
            f"{len(lines):,} lines over {PREFIXES} system prompts of {PREFIX_TOKENS} tokens "
            f"({prompt_tokens(lines[0].chat)} prompt + {OUTPUT_TOKENS} output tokens a line), "
            f"max_num_seqs {MAX_NUM_SEQS}, jobs.concurrency {JOB_CONCURRENCY}, time scale {TIME_SCALE}",
        ),
        context(
            NAME,
            "job: status, succeeded / failed, without TTFT; simulator: preemptions, max running",
            f"{final.status}, {counts.get('succeeded')} / {counts.get('failed')}, "
            f"{throughput.get('requests_without_ttft')}; {stats['preemptions']}, {stats['max_running']}",
        ),
        context(
            NAME,
            "seconds: simulator elapsed / gateway span / prefill covered / decode covered",
            edges(throughput, stats) if throughput else "no throughput",
        ),
        *agreement(throughput, stats),
        context(
            NAME,
            "for comparison, per request (times summed, not covered): prefill / decode tokens/s",
            await per_request_rates(batch.id),
        ),
    ]
