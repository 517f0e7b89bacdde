"""Prefix affinity across replicas: 50 long shared prefixes (a system prompt), each asked many
questions, sent in shuffled order through one provider of four replicas, three times: with
`X-Gateway-Cache-Key` naming the prefix; without any key (the gateway matches the prompt's leading
blocks, `gateway.routing.prefix`); and without a key through a gateway whose prefix affinity is
off (`scheduling.prefix_affinity_tokens: 0`: requests spread by load alone, the round robin both
are compared with). Each replica's prefix cache holds about 20 of the prefixes: a quarter of them
comfortably, all 50 by no means. Prefill costs compute (the simulator's prefill_s_per_token)."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from bench.scheduling.figures import Figure, context, judged
from bench.scheduling.load import Chat, Target, error_text, run_all
from bench.scheduling.processes import Simulator, catalog, provider
from bench.scheduling.prompts import chat, text
from bench.scheduling.scenario import Run

NAME = "affinity"
REPLICAS = 4
PREFIXES = 50
PER_PREFIX = 24
PREFIX_TOKENS, QUESTION_TOKENS, OUTPUT_TOKENS = 2048, 32, 16
BLOCK_SIZE = 16
HELD_PREFIXES = 20  # what one replica's KV cache holds, beside the sequences running
CONCURRENCY = 64
TIME_SCALE = 0.5


def requests(salt: str, keyed: bool) -> list[tuple[str, Chat]]:
    shuffled = [p for p in range(PREFIXES) for _ in range(PER_PREFIX)]
    random.Random(7).shuffle(shuffled)
    prefixes = [text(PREFIX_TOKENS, f"Document {salt} {p}.") for p in range(PREFIXES)]
    return [
        (
            str(p),
            chat(
                text(QUESTION_TOKENS, f"Question {i}."),
                OUTPUT_TOKENS,
                system=prefixes[p],
                headers={"X-Gateway-Cache-Key": f"{salt}-{p}"} if keyed else None,
            ),
        )
        for i, p in enumerate(shuffled)
    ]


@dataclass(frozen=True, slots=True)
class Pass:
    """One pass of every request: throughput and what the replicas' prefix caches did."""

    rps: float
    hits: int  # prompt tokens found in the prefix caches, over every replica
    queries: int  # prompt tokens looked up
    loads: list[int]  # requests each replica finished
    errors: str

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.queries if self.queries else 0.0

    @property
    def spread(self) -> float:
        return max(self.loads) / min(self.loads) if min(self.loads) else float("inf")

    def summary(self) -> str:
        loads = " / ".join(str(n) for n in self.loads)
        return f"{self.hit_ratio:.1%} / {self.rps:.1f} / {loads} / {self.errors}"


async def measured(simulator: Simulator, target: Target, salt: str, keyed: bool) -> Pass:
    await simulator.reset()
    started = time.monotonic()
    outcomes = await run_all(target, requests(salt, keyed), CONCURRENCY)
    seconds = time.monotonic() - started
    stats = await simulator.all_stats()
    return Pass(
        sum(o.ok for o in outcomes) / seconds,
        sum(s["prefix_cache_hits"] for s in stats),
        sum(s["prefix_cache_queries"] for s in stats),
        [s["requests_finished"] for s in stats],
        error_text(outcomes),
    )


def ceiling(keyed: Pass) -> float:
    """The hit ratio had each prefix missed once only: every later request finds its whole blocks."""
    shared = PREFIX_TOKENS // BLOCK_SIZE * BLOCK_SIZE
    return (PREFIXES * PER_PREFIX - PREFIXES) * shared / keyed.queries if keyed.queries else 0.0


async def run(bench: Run) -> list[Figure]:
    running = CONCURRENCY // REPLICAS * 2 * -(-(QUESTION_TOKENS + OUTPUT_TOKENS + 16) // BLOCK_SIZE)
    blocks = HELD_PREFIXES * PREFIX_TOKENS // BLOCK_SIZE + running
    simulator = await bench.simulator(
        replicas=REPLICAS, num_gpu_blocks=blocks, block_size=BLOCK_SIZE, time_scale=TIME_SCALE
    )
    document = catalog([provider("sim", simulator.base_urls)])
    gateway = await bench.gateway("affinity", document)
    _, key = await gateway.team("affinity")
    target = bench.target(gateway.base_url + "/v1", key, "sim")
    await target.warm_up()
    keyed = await measured(simulator, target, "keyed", keyed=True)
    keyless = await measured(simulator, target, "keyless", keyed=False)
    await gateway.stop()

    spread_only = await bench.gateway("round-robin", document | {"scheduling": {"prefix_affinity_tokens": 0}})
    _, key = await spread_only.team("round-robin")
    target = bench.target(spread_only.base_url + "/v1", key, "sim")
    await target.warm_up()
    round_robin = await measured(simulator, target, "round-robin", keyed=False)
    speedup = keyed.rps / round_robin.rps if round_robin.rps else 0.0
    keyless_speedup = keyless.rps / round_robin.rps if round_robin.rps else 0.0
    setup = (
        f"{REPLICAS} replicas of {blocks} blocks, {PREFIXES} prefixes of {PREFIX_TOKENS} tokens "
        f"x {PER_PREFIX} questions, {CONCURRENCY} at once, time scale {TIME_SCALE}"
    )
    columns = "hit ratio / req/s / requests per replica / errors"
    return [
        context(NAME, "setup", setup),
        context(NAME, f"round robin (no keys, prefix affinity off): {columns}", round_robin.summary()),
        context(NAME, f"no cache keys (prefix affinity): {columns}", keyless.summary()),
        context(NAME, f"with cache keys: {columns}", keyed.summary()),
        context(NAME, "hit ratio had each prefix missed only once", f"{ceiling(keyed):.1%}"),
        judged(
            NAME,
            "prefix-cache hit ratio with cache keys",
            ">= 85%",
            keyed.hit_ratio * 100,
            keyed.hit_ratio >= 0.85,
            "%",
        ),
        judged(NAME, "throughput with keys / round robin", ">= 2x", speedup, speedup >= 2, "x"),
        judged(NAME, "max / min requests per replica with keys", "<= 1.5", keyed.spread, keyed.spread <= 1.5),
        judged(
            NAME,
            "prefix-cache hit ratio without keys",
            ">= 85%",
            keyless.hit_ratio * 100,
            keyless.hit_ratio >= 0.85,
            "%",
        ),
        judged(
            NAME,
            "throughput without keys / round robin",
            ">= 1.8x",
            keyless_speedup,
            keyless_speedup >= 1.8,
            "x",
        ),
    ]
