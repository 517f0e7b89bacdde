"""Fairness between teams: two teams flood one replica, one with 8k-token prompts and one with
256-token prompts. Tokens served per team (uncached prompt plus completion, from the answers'
usage) are counted per window and compared: with equal weights by Jain's
index, then with the heavy team's weight set to 2 by the ratio of the shares.

Each team keeps half as many requests again outstanding as the cap lets through: either alone
would fill the replica, and both keep requests waiting, which is when fairness applies (a team
whose queue runs dry cannot claim its share); the light team's queue wait includes its own small
backlog. The window is the target's 30 s scaled by the simulator's time scale (the simulator runs
that much faster, so as much work goes through a scaled window as through 30 s of a real server);
one window of warm-up comes first."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

from bench.scheduling.figures import Figure, context, jain_index, judged, percentile
from bench.scheduling.load import Chat, Outcome, Target, error_text, flood
from bench.scheduling.processes import catalog, provider
from bench.scheduling.prompts import chat, text
from bench.scheduling.scenario import Run

NAME = "fairness"
TIME_SCALE = 0.2
WINDOW_S = 30 * TIME_SCALE
WINDOWS = 3
WARM_UP_S = WINDOW_S  # the first dispatches go before any team has a count: not the steady state
CAP = 16
OUTSTANDING = CAP * 3 // 2  # per team: more than the cap lets through, so both teams keep waiting
HEAVY_TOKENS, LIGHT_TOKENS, OUTPUT_TOKENS = 8192, 256, 32
WEIGHT = 2.0
KV_BLOCKS = 16384  # room for everything the cap lets in: preemption is not what this measures


def request(team: str, number: int) -> Chat:
    size = HEAVY_TOKENS if team == "heavy" else LIGHT_TOKENS
    return chat(text(size, f"{team} {number} {time.monotonic_ns()}."), OUTPUT_TOKENS)  # unique: no cache hits


def window_tokens(outcomes: Sequence[Outcome], team: str, start: float) -> list[float]:
    """Tokens served to `team` in each window from `start`, each answer's spread evenly over the
    time it held the replica (its dispatch, its start plus its queue wait, to its end): counted
    whole where it ended, an 8k-token answer either side of a boundary would swing a window."""
    totals = [0.0] * WINDOWS
    for outcome in outcomes:
        if not outcome.ok or outcome.label != team:
            continue
        dispatched = min(outcome.started + (outcome.queue_ms or 0.0) / 1000, outcome.ended)
        span = outcome.ended - dispatched
        for index in range(WINDOWS):
            low, high = start + index * WINDOW_S, start + (index + 1) * WINDOW_S
            if span <= 0:
                totals[index] += outcome.served_tokens if low <= outcome.ended < high else 0.0
            else:
                overlap = max(0.0, min(outcome.ended, high) - max(dispatched, low))
                totals[index] += outcome.served_tokens * overlap / span
    return totals


async def both_teams_flood(targets: dict[str, Target]) -> tuple[list[Outcome], float]:
    """Both teams flood for the warm-up and WINDOWS windows; returns the outcomes and when the
    first window starts."""
    outcomes: list[Outcome] = []
    end = time.monotonic() + WARM_UP_S + WINDOWS * WINDOW_S

    def going() -> bool:
        return time.monotonic() < end

    await asyncio.gather(
        *(flood(sender(target, team), OUTSTANDING, going, outcomes) for team, target in targets.items())
    )
    return outcomes, end - WINDOWS * WINDOW_S


def sender(target: Target, team: str) -> Callable[[int], Awaitable[Outcome]]:
    return lambda number: target.send(request(team, number), team)


def light_queue_p99(outcomes: Sequence[Outcome], start: float) -> float | None:
    waits = [
        o.queue_ms for o in outcomes if o.label == "light" and o.ended >= start and o.queue_ms is not None
    ]
    return percentile(waits, 99)


def per_window(heavy: Sequence[float], light: Sequence[float]) -> str:
    return ", ".join(f"{h:,.0f} / {li:,.0f}" for h, li in zip(heavy, light, strict=True))


async def equal_weights(targets: dict[str, Target]) -> list[Figure]:
    outcomes, start = await both_teams_flood(targets)
    heavy, light = window_tokens(outcomes, "heavy", start), window_tokens(outcomes, "light", start)
    jain = min(jain_index(pair) for pair in zip(heavy, light, strict=True))
    wait_p99 = light_queue_p99(outcomes, start)
    return [
        context(NAME, "equal weights: tokens per window, heavy / light", per_window(heavy, light)),
        judged(NAME, "equal weights: Jain's index, worst window", ">= 0.99", jain, jain >= 0.99),
        judged(
            NAME,
            "light team: p99 queue wait",
            "<= 250 ms",
            wait_p99,
            wait_p99 is not None and wait_p99 <= 250,
            " ms",
        ),
        context(NAME, "equal weights: errors", error_text(outcomes)),
    ]


async def heavy_weighted(targets: dict[str, Target]) -> list[Figure]:
    outcomes, start = await both_teams_flood(targets)
    heavy, light = window_tokens(outcomes, "heavy", start), window_tokens(outcomes, "light", start)
    ratios = [h / li if li else float("inf") for h, li in zip(heavy, light, strict=True)]
    worst = max(ratios, key=lambda r: abs(r - WEIGHT))
    return [
        context(NAME, "weights 2:1: tokens per window, heavy / light", per_window(heavy, light)),
        judged(
            NAME, "weights 2:1: heavy / light share, worst window", "1.8 .. 2.2", worst, 1.8 <= worst <= 2.2
        ),
        context(NAME, "weights 2:1: errors", error_text(outcomes)),
    ]


async def run(bench: Run) -> list[Figure]:
    simulator = await bench.simulator(num_gpu_blocks=KV_BLOCKS, time_scale=TIME_SCALE)
    document = catalog([provider("sim", [simulator.base_url()], {"max_concurrency": CAP})])
    gateway = await bench.gateway("fairness", document)
    teams = {team: await gateway.team(f"fairness-{team}") for team in ("heavy", "light")}
    targets = {team: bench.target(gateway.base_url + "/v1", key, "sim") for team, (_, key) in teams.items()}
    for target in targets.values():
        await target.warm_up()
    setup = (
        f"cap {CAP}, {OUTSTANDING} outstanding per team, window {WINDOW_S:g} s "
        f"(30 s x time scale {TIME_SCALE}), {WINDOWS} windows"
    )
    figures = [context(NAME, "setup", setup), *await equal_weights(targets)]
    await gateway.set_weight(teams["heavy"][0], WEIGHT)
    return [*figures, *await heavy_weighted(targets)]
