"""A client seeding more work than the server's KV cache holds: 512 requests at once, each a 2k-token
system prompt shared by all plus a question of its own, straight at the simulator and through the
gateway with `max_concurrency` set from the simulator's size.

The KV cache is sized for 64 of these requests counting what each one really occupies: the shared
prompt's blocks once (the prefix cache shares them) and each request's own question and output.
Sized as 64 times the whole prompt and output instead, it would hold several hundred of them and
never preempt. Each run has a system prompt of its own, so that neither starts with a warm cache."""

from __future__ import annotations

import time

from bench.scheduling.figures import Figure, context, judged
from bench.scheduling.load import Chat, Target, error_text, run_all
from bench.scheduling.processes import catalog, provider
from bench.scheduling.prompts import chat, text, tokens_of
from bench.scheduling.scenario import Run

NAME = "seed"
REQUESTS = 512
SHARED_TOKENS = 2048
QUESTION_TOKENS = 256
OUTPUT_TOKENS = 128
HOLDS = 64  # requests the KV cache holds
BLOCK_SIZE = 16
TIME_SCALE = 0.25


def seed_requests(salt: str) -> list[tuple[str, Chat]]:
    system = text(SHARED_TOKENS, f"System prompt {salt}.")
    return [
        (salt, chat(text(QUESTION_TOKENS, f"Question {i}."), OUTPUT_TOKENS, system=system))
        for i in range(REQUESTS)
    ]


def kv_blocks() -> int:
    """The shared prompt's full blocks once, plus HOLDS requests' own blocks, plus a little slack."""
    _, sample = seed_requests("size")[0]
    whole = -(-(tokens_of(sample) + OUTPUT_TOKENS) // BLOCK_SIZE)
    shared = SHARED_TOKENS // BLOCK_SIZE
    return shared + HOLDS * (whole - shared) + 8


async def seeded(target: Target, salt: str) -> tuple[float, str, int]:
    """Every request at once: (seconds until the last answer, the errors, how many failed)."""
    started = time.monotonic()
    outcomes = await run_all(target, seed_requests(salt), REQUESTS)
    return time.monotonic() - started, error_text(outcomes), sum(not o.ok for o in outcomes)


async def run(bench: Run) -> list[Figure]:
    blocks = kv_blocks()
    simulator = await bench.simulator(num_gpu_blocks=blocks, block_size=BLOCK_SIZE, time_scale=TIME_SCALE)
    document = catalog([provider("sim", [simulator.base_url()], {"max_concurrency": HOLDS})])
    gateway = await bench.gateway("seed", document)
    _, key = await gateway.team("seed")
    direct_target = bench.target(simulator.base_url(), "direct", "sim-vllm")
    gateway_target = bench.target(gateway.base_url + "/v1", key, "sim")
    await direct_target.warm_up()
    await gateway_target.warm_up()

    await simulator.reset()
    direct_s, direct_errors, _ = await seeded(direct_target, "direct")
    direct = await simulator.stats()
    await simulator.reset()
    through_s, through_errors, failed = await seeded(gateway_target, "gateway")
    through = await simulator.stats()
    engine = f"engine busy {direct['simulated_s'] * TIME_SCALE:.2f} s / {through['simulated_s'] * TIME_SCALE:.2f} s"
    return [
        context(
            NAME,
            "simulator",
            f"{blocks} blocks of {BLOCK_SIZE} tokens (holds {HOLDS}), time scale {TIME_SCALE}",
        ),
        context(
            NAME,
            "direct: preemptions / max running / errors / time",
            f"{direct['preemptions']} / {direct['max_running']} / {direct_errors} / {direct_s:.2f} s",
        ),
        context(NAME, "gateway: max running at the simulator", str(through["max_running"])),
        context(NAME, "direct / gateway: the simulator's own step time", engine),
        judged(NAME, "gateway: preemptions", "0", through["preemptions"], through["preemptions"] == 0),
        Figure(NAME, "gateway: errors", "0", through_errors, failed == 0),
        judged(
            NAME,
            "gateway: total time",
            f"<= direct ({direct_s:.2f} s)",
            through_s,
            through_s <= direct_s,
            " s",
        ),
    ]
