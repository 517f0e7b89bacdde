"""Back-pressure from the server: with `load_metrics: true` and no static caps, a flood must wait
in the gateway, not in the server: the simulator's waiting queue (its /metrics, sampled) stays
short and nothing is preempted. The same flood straight at the simulator shows what it does
unprotected. Then the metrics endpoint points at a dead address: the gateway must fail nothing.

The simulator runs at most 32 sequences and its KV cache holds 24 whole requests (prompt and
output), so a server that admits freely runs out of blocks while decoding and preempts."""

from __future__ import annotations

import time
from collections.abc import Sequence

from bench.scheduling.figures import Figure, context, judged, percentile
from bench.scheduling.load import Chat, Outcome, Target, error_text, flood, until
from bench.scheduling.processes import Simulator, catalog, provider
from bench.scheduling.prompts import chat, text
from bench.scheduling.scenario import Run, Sampler
from bench.stack import free_port

NAME = "backpressure"
TIME_SCALE = 0.5
MAX_NUM_SEQS = 32
HOLDS = 24
PROMPT_TOKENS, OUTPUT_TOKENS, BLOCK_SIZE = 512, 64, 16
FLOOD = 128
FLOOD_S = 8.0


def request(number: int) -> Chat:
    return chat(text(PROMPT_TOKENS, f"Flood {number} {time.monotonic_ns()}."), OUTPUT_TOKENS)


async def flooded(simulator: Simulator, target: Target) -> tuple[list[Outcome], list[float], dict[str, int]]:
    """FLOOD clients for FLOOD_S: the outcomes, the sampled waiting queue, the simulator's stats."""
    await target.warm_up()
    await simulator.reset()
    waiting = Sampler(lambda: simulator.metric("vllm:num_requests_waiting"), 0.05).start()
    outcomes: list[Outcome] = []
    await flood(
        lambda n: target.send(request(n), "flood"), FLOOD, until(time.monotonic() + FLOOD_S), outcomes
    )
    await waiting.stop()
    return outcomes, waiting.values(), await simulator.stats()


def summary(
    outcomes: Sequence[Outcome], waiting: Sequence[float], stats: dict[str, int], seconds: float
) -> str:
    served = sum(o.ok for o in outcomes)
    p95 = percentile(waiting, 95)
    return (
        f"waiting p95 {p95 or 0:.1f}, max {max(waiting, default=0):.0f}; preemptions {stats['preemptions']}; "
        f"{served / seconds:.1f} req/s; errors {error_text(outcomes)}"
    )


async def run(bench: Run) -> list[Figure]:
    blocks = HOLDS * -(-(PROMPT_TOKENS + 8 + OUTPUT_TOKENS) // BLOCK_SIZE)
    simulator = await bench.simulator(
        max_num_seqs=MAX_NUM_SEQS, num_gpu_blocks=blocks, block_size=BLOCK_SIZE, time_scale=TIME_SCALE
    )
    reading = await bench.gateway(
        "backpressure", catalog([provider("sim", [simulator.base_url()], {"load_metrics": True})])
    )
    dead = f"http://127.0.0.1:{free_port()}/metrics"  # nothing listens there
    blind = await bench.gateway(
        "backpressure-dead-metrics",
        catalog([provider("sim", [simulator.base_url()], {"load_metrics": True, "metrics_url": dead})]),
    )
    _, key = await reading.team("backpressure")

    direct = await flooded(simulator, bench.target(simulator.base_url(), "direct", "sim-vllm"))
    outcomes, waiting, stats = await flooded(simulator, bench.target(reading.base_url + "/v1", key, "sim"))
    dead_outcomes, dead_waiting, dead_stats = await flooded(
        simulator, bench.target(blind.base_url + "/v1", key, "sim")
    )
    p95 = percentile(waiting, 95)
    failed = sum(not o.ok for o in dead_outcomes)
    return [
        context(
            NAME,
            "setup",
            f"max_num_seqs {MAX_NUM_SEQS}, KV cache for {HOLDS} requests, {FLOOD} clients "
            f"for {FLOOD_S:g} s, time scale {TIME_SCALE}",
        ),
        context(NAME, "direct flood", summary(*direct, FLOOD_S)),
        context(NAME, "through the gateway (load_metrics)", summary(outcomes, waiting, stats, FLOOD_S)),
        judged(NAME, "simulator's waiting queue p95", "<= 2", p95, p95 is not None and p95 <= 2),
        judged(NAME, "preemptions", "0", stats["preemptions"], stats["preemptions"] == 0),
        context(NAME, "metrics at a dead URL", summary(dead_outcomes, dead_waiting, dead_stats, FLOOD_S)),
        Figure(NAME, "metrics at a dead URL: gateway errors", "0", error_text(dead_outcomes), failed == 0),
    ]
