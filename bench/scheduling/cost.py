"""What scheduling costs: CPU per request of the gateway's serving process (utime + stime from
/proc) against an upstream that answers at once, with no capacity configured and with caps that
never bind. The gateways run side by side and are measured in alternating rounds, so that the
machine's drift falls on all; each figure is the median of its rounds.

A provider with `capacity` also measures each chat completion's time to first token by default
(streaming it from the upstream and assembling the answer: `docs/batches.md`), which is metering,
not scheduling: the target is judged with `measure_ttft: false`, and the default's cost is shown
beside it."""

from __future__ import annotations

import statistics

from bench.procstat import cpu_seconds
from bench.scheduling.figures import Figure, context, judged
from bench.scheduling.load import Target, error_text, run_all
from bench.scheduling.processes import Gateway, catalog, provider
from bench.scheduling.prompts import chat
from bench.scheduling.scenario import Run

NAME = "cost"
ROUNDS = 5
REQUESTS = 2000
CONCURRENCY = 32
TARGET_ADDED_MS = 0.03
UNBINDING = {"max_concurrency": 100_000, "max_tokens_in_flight": 1_000_000_000}
CAPS, MEASURED = "caps on", "caps on, measuring TTFT (the default)"


async def cpu_ms_per_request(gateway: Gateway, target: Target, requests: int) -> tuple[float, str]:
    chats = [("cost", chat(f"Say something short, number {i}.", 16)) for i in range(requests)]
    before = cpu_seconds(gateway.pid)
    outcomes = await run_all(target, chats, CONCURRENCY)
    return (cpu_seconds(gateway.pid) - before) * 1000 / requests, error_text(outcomes)


async def run(bench: Run) -> list[Figure]:
    upstream = await bench.plain_upstream()
    plain = await bench.gateway("cost-no-capacity", catalog([provider("fast", [upstream.base_url])]))
    unmeasured = provider("fast", [upstream.base_url], UNBINDING) | {"measure_ttft": False}
    capped = await bench.gateway("cost-caps", catalog([unmeasured]))
    measured = await bench.gateway(
        "cost-measured", catalog([provider("fast", [upstream.base_url], UNBINDING)])
    )
    _, key = await plain.team("cost")
    gateways = {"no capacity": plain, CAPS: capped, MEASURED: measured}
    targets = {name: bench.target(g.base_url + "/v1", key, "fast") for name, g in gateways.items()}
    for name, gateway in gateways.items():  # warm-up: pools, key cache, code paths
        await cpu_ms_per_request(gateway, targets[name], REQUESTS // 5)
    rounds: dict[str, list[float]] = {name: [] for name in gateways}
    errors: dict[str, str] = {}
    for _ in range(ROUNDS):
        for name, gateway in gateways.items():
            ms, errors[name] = await cpu_ms_per_request(gateway, targets[name], REQUESTS)
            rounds[name].append(ms)
    plain_ms, capped_ms, measured_ms = (statistics.median(rounds[name]) for name in gateways)
    added = capped_ms - plain_ms
    return [
        context(
            NAME,
            "setup",
            f"{ROUNDS} alternating rounds of {REQUESTS:,} requests at {CONCURRENCY}, "
            "one worker each, plain mock upstream",
        ),
        *(
            context(
                NAME,
                f"{name}: CPU ms per request (rounds; errors)",
                f"{statistics.median(ms):.3f} ({', '.join(f'{m:.3f}' for m in ms)}; {errors[name]})",
            )
            for name, ms in rounds.items()
        ),
        context(NAME, "added CPU per request measuring TTFT too", f"{measured_ms - plain_ms:.3f} ms"),
        judged(
            NAME,
            "added CPU per request with caps on",
            f"<= +{TARGET_ADDED_MS} ms",
            added,
            added <= TARGET_ADDED_MS,
            " ms",
        ),
    ]
