"""Priority classes: a batch floods one replica at ten times its cap while interactive requests
arrive at a steady trickle. Interactive requests must barely wait and keep their time to first
token; the batch must still use the capacity they leave.

Capacity is counted in slots of the cap: what the simulator holds (running + waiting, sampled
every 50 ms) is the whole use; interactive requests hold a slot from their dispatch (their start
plus their `x-gateway-queue-ms`) to their end; the batch's share is the rest of the use over the
rest of the cap. Batch lines ask for 16 to 64 tokens, so that they do not finish in lockstep."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Sequence

from bench.scheduling.figures import Figure, context, judged, percentile
from bench.scheduling.load import Chat, Outcome, Target, error_text, flood, trickle, until
from bench.scheduling.processes import Simulator, catalog, provider
from bench.scheduling.prompts import chat, text
from bench.scheduling.scenario import Run, Sampler

NAME = "priority"
TIME_SCALE = 1.0
CAP = 32
BATCH_OUTSTANDING = 10 * CAP
INTERACTIVE_PER_S = 5.0
INTERACTIVE_TOKENS, BATCH_TOKENS = 512, 256
PHASE_S = 15.0
WARM_UP_S = 2.0
BATCH_HEADERS = {"X-Gateway-Batch": "bench-priority", "X-Gateway-Priority": "batch"}


def interactive(number: int) -> Chat:
    return chat(text(INTERACTIVE_TOKENS, f"Interactive {number} {time.monotonic_ns()}."), 32, stream=True)


def batch(number: int) -> Chat:
    max_tokens = 16 + number * 37 % 49
    return chat(
        text(BATCH_TOKENS, f"Batch line {number} {time.monotonic_ns()}."), max_tokens, headers=BATCH_HEADERS
    )


def slot_seconds(outcomes: Sequence[Outcome], label: str, start: float, end: float) -> float:
    """The time `label`'s requests held a slot of the cap within [start, end]."""
    held = 0.0
    for o in outcomes:
        if o.label != label or not o.ok:
            continue
        dispatched = o.started + (o.queue_ms or 0.0) / 1000
        held += max(0.0, min(o.ended, end) - max(dispatched, start))
    return held


async def trickle_alone(target: Target) -> list[Outcome]:
    outcomes: list[Outcome] = []
    await trickle(
        lambda n: target.send(interactive(n), "interactive"),
        INTERACTIVE_PER_S,
        time.monotonic() + PHASE_S,
        outcomes,
    )
    return outcomes


async def trickle_beside_batch(
    simulator: Simulator, target: Target
) -> tuple[list[Outcome], float, float, float]:
    """The batch floods from the start; the trickle runs after a warm-up; the window is the
    trickle's. Also returns what the simulator held on average in the window."""
    outcomes: list[Outcome] = []
    held = Sampler(lambda: in_flight(simulator), 0.05).start()
    start = time.monotonic() + WARM_UP_S
    end = start + PHASE_S
    batch_flood = asyncio.create_task(
        flood(lambda n: target.send(batch(n), "batch"), BATCH_OUTSTANDING, until(end), outcomes)
    )
    await asyncio.sleep(WARM_UP_S)
    await trickle(lambda n: target.send(interactive(n), "interactive"), INTERACTIVE_PER_S, end, outcomes)
    await held.stop()
    batch_flood.cancel()  # the lines still queued leave with their clients: nothing to wait for
    with contextlib.suppress(asyncio.CancelledError):
        await batch_flood
    window = held.values(start, end)
    return outcomes, start, end, statistics.fmean(window) if window else 0.0


async def in_flight(simulator: Simulator) -> float:
    stats = await simulator.stats()
    return float(stats["running"] + stats["waiting"])


def ttft_p99(outcomes: Sequence[Outcome]) -> float | None:
    return percentile(
        [o.ttft_s * 1000 for o in outcomes if o.label == "interactive" and o.ttft_s is not None], 99
    )


SETUP = (
    f"cap {CAP}, batch of {BATCH_TOKENS}-token prompts {BATCH_OUTSTANDING} outstanding, interactive "
    f"{INTERACTIVE_TOKENS}-token prompts {INTERACTIVE_PER_S:g}/s streamed, time scale {TIME_SCALE}"
)


def interactive_figures(alone: Sequence[Outcome], mixed: Sequence[Outcome]) -> list[Figure]:
    baseline, loaded = ttft_p99(alone), ttft_p99(mixed)
    waits = [o.queue_ms for o in mixed if o.label == "interactive" and o.queue_ms is not None]
    wait_p99 = percentile(waits, 99)
    ratio = loaded / baseline if loaded is not None and baseline else None
    return [
        judged(
            NAME,
            "interactive p99 queue wait",
            "<= 50 ms",
            wait_p99,
            wait_p99 is not None and wait_p99 <= 50,
            " ms",
        ),
        context(
            NAME,
            "interactive TTFT p99 alone / beside the batch",
            f"{baseline or 0:.1f} ms / {loaded or 0:.1f} ms",
        ),
        judged(
            NAME,
            "interactive TTFT p99 beside the batch / alone",
            "<= 1.25",
            ratio,
            ratio is not None and ratio <= 1.25,
            "x",
        ),
    ]


def batch_figures(mixed: Sequence[Outcome], start: float, end: float, held: float) -> list[Figure]:
    interactive_slots = slot_seconds(mixed, "interactive", start, end) / (end - start)
    share = (held - interactive_slots) / (CAP - interactive_slots) if interactive_slots < CAP else None
    return [
        judged(
            NAME,
            "batch's share of the capacity interactive work leaves",
            ">= 90%",
            None if share is None else share * 100,
            share is not None and share >= 0.9,
            "%",
        ),
        context(
            NAME,
            "slots held at the simulator / by interactive requests",
            f"{held:.1f} / {interactive_slots:.1f} of {CAP}",
        ),
    ]


async def run(bench: Run) -> list[Figure]:
    simulator = await bench.simulator(time_scale=TIME_SCALE)
    document = catalog([provider("sim", [simulator.base_url()], {"max_concurrency": CAP})])
    gateway = await bench.gateway("priority", document)
    _, key = await gateway.team("priority")
    target = bench.target(gateway.base_url + "/v1", key, "sim")
    await target.warm_up()

    alone = await trickle_alone(target)
    mixed, start, end, held = await trickle_beside_batch(simulator, target)
    errors = " / ".join(
        error_text([o for o in outcomes if o.label == label])
        for outcomes, label in ((alone, "interactive"), (mixed, "interactive"), (mixed, "batch"))
    )
    return [
        context(NAME, "setup", SETUP),
        *interactive_figures(alone, mixed),
        *batch_figures(mixed, start, end, held),
        context(NAME, "errors: interactive alone / beside the batch / batch", errors),
    ]
