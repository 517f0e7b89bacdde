"""Three job shapes, each quoted and run on one simulated vLLM (`tokenizer: chars4`, the
simulator's own count, and a cached-input price, so that the prefix cache's share is priced).

A shape first runs a warm-up job of its own kind (other texts, so the measured job's prefixes are
not cached yet) on a deployment of its own: the recent batch the quote's duration is estimated
from (`gateway.jobs.quotes.duration`).
Then the measured job's lines are quoted (`POST /v1/gateway/batches/quote`, inline), the job is
run through the Batch API, and its records (`GET /v1/gateway/batches/{id}`) are set beside the
quote's gateway-run lane: prompt, cached and output tokens and the cost must be equal; the
duration (the span of its records) is judged against the quote's p10-p90."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from bench.batch_jobs.lines import Line, input_file
from bench.batch_jobs.stack import PROVIDER, BatchClient, JobsRun, jobs_catalog
from bench.scheduling.figures import Figure, context, judged
from bench.scheduling.prompts import chat, text

MAX_NUM_SEQS = 64
JOB_CONCURRENCY = 64
NUM_GPU_BLOCKS = 16384  # room for every sequence in flight: no preemption
PRICE = {"input": "0.1", "output": "0.2", "cached_input": "0.05"}
JOB_TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True)
class Shape:
    name: str
    what: str
    lines: Callable[[str], list[Line]]  # the job's lines, their texts opening with the given tag

    async def run(self, bench: JobsRun) -> list[Figure]:
        return await quoted_and_run(bench, self)


def shared_prefix(tag: str) -> list[Line]:
    """4 system prompts of 512 tokens x 60 short questions, 32 output tokens."""
    prompts = [text(512, f"{tag} handbook {p}.") for p in range(4)]
    return [
        Line(f"{tag}-{p}-{n}", chat(text(24, f"{tag} question {n}."), 32, system=prompts[p]), str(p))
        for p in range(4)
        for n in range(60)
    ]


def long_output(tag: str) -> list[Line]:
    """150 distinct 64-token questions, 128 output tokens."""
    return [Line(f"{tag}-{n}", chat(text(64, f"{tag} story {n}."), 128)) for n in range(150)]


def long_prompt(tag: str) -> list[Line]:
    """60 distinct prompts of 1,500 tokens, 16 output tokens."""
    return [Line(f"{tag}-{n}", chat(text(1500, f"{tag} report {n}."), 16)) for n in range(60)]


SHAPES = (
    Shape("shared-prefix", "4 x 60 lines on 512-token system prompts, 32 output", shared_prefix),
    Shape("long-output", "150 lines of 64 tokens, 128 output", long_output),
    Shape("long-prompt", "60 lines of 1,500 tokens, 16 output", long_prompt),
)


def gateway_lane(quote: dict[str, Any]) -> dict[str, Any]:
    lane: dict[str, Any] = next(lane for lane in quote["lanes"] if lane["execution"] == "gateway")
    return lane


async def quoted_and_run(bench: JobsRun, shape: Shape) -> list[Figure]:
    simulator = await bench.simulator(max_num_seqs=MAX_NUM_SEQS, num_gpu_blocks=NUM_GPU_BLOCKS)
    document = jobs_catalog(simulator, concurrency=JOB_CONCURRENCY)
    deployment = document["models"][0]["deployments"][0]
    deployment["price"], deployment["tokenizer"] = PRICE, "chars4"
    deployment["model"] = f"sim-{shape.name}"  # a deployment of its own: only its warm-up is its history
    gateway = await bench.job_gateway(f"quotes-{shape.name}", document)
    _, key = await gateway.team(shape.name)
    headers = {"authorization": f"Bearer {key}"}
    client = BatchClient(bench, gateway, key)

    warm_up = await client.submit(input_file(PROVIDER, shape.lines("warm")))
    await client.finished(warm_up.id, JOB_TIMEOUT_S, 0.1)
    data = input_file(PROVIDER, shape.lines("job"))
    lines = [json.loads(row) for row in data.decode().splitlines()]
    reply = await bench.http.post(
        f"{gateway.base_url}/v1/gateway/batches/quote", json={"lines": lines}, headers=headers
    )
    reply.raise_for_status()
    lane = gateway_lane(reply.json())
    batch = await client.submit(data)
    final = await client.finished(batch.id, JOB_TIMEOUT_S, 0.1)
    reply = await bench.http.get(f"{gateway.base_url}/v1/gateway/batches/{batch.id}", headers=headers)
    reply.raise_for_status()
    measured = reply.json()
    return figures(shape, lane, measured, final.status)


def figures(shape: Shape, lane: dict[str, Any], measured: dict[str, Any], status: str) -> list[Figure]:
    tokens, took = lane["tokens"], lane["duration"]
    quoted_tokens = (tokens["prompt"], tokens["cached"], tokens["output"])
    measured_tokens = (measured["prompt_tokens"], measured["cached_tokens"], measured["completion_tokens"])
    quoted_cost, measured_cost = Decimal(lane["cost"]), Decimal(measured["cost"])
    span = (measured.get("throughput") or {}).get("span_s")
    low, high = took["p10_s"], took["p90_s"]
    within = span is not None and low is not None and high is not None and low <= span <= high
    name = shape.name
    return [
        context(name, "setup", f"{shape.what}; job {status}, {measured['requests']} records"),
        context(
            name, "tokens quoted (prompt / cached / output, chars4)", " / ".join(map(str, quoted_tokens))
        ),
        context(name, "tokens measured (the simulator's counts)", " / ".join(map(str, measured_tokens))),
        judged(name, "tokens: measured = quoted", "equal", 1.0, measured_tokens == quoted_tokens),
        context(name, "cost quoted / measured (USD)", f"{quoted_cost} / {measured_cost}"),
        judged(
            name,
            "cost: measured - quoted",
            "0",
            float(measured_cost - quoted_cost),
            measured_cost == quoted_cost,
            " USD",
        ),
        context(
            name,
            "duration quoted: expected (p10-p90), history lines' batches",
            f"{took['expected_s']} s ({low}-{high} s), {took['history_batches']}",
        ),
        judged(name, "duration measured (records' span)", "within the quote's p10-p90", span, within, " s"),
    ]
