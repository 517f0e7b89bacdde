"""Global caps: two gateway processes share one replica's `max_concurrency`; the simulator must
never see more. Then one process is SIGKILLed under load, and the survivor must get the whole cap
back within the permits' lease.

What the simulator holds is read from its own ground truth: `/_sim/stats`' `max_running` (the most
sequences one step scheduled) and, sampled every 10 ms, running + waiting. After the kill, the
killed process's last requests still run at the simulator for one service time, so recovery is
the first moment the simulator holds the cap again after it fell below it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bench.scheduling.figures import Figure, context, judged
from bench.scheduling.load import Chat, Outcome, Target, error_text, flood, run_all
from bench.scheduling.processes import Gateway, Simulator, catalog, provider
from bench.scheduling.prompts import chat, text
from bench.scheduling.scenario import Run, Sampler

NAME = "caps"
CAP = 32
REQUESTS = 2000
CONCURRENCY = 500
OUTPUT_TOKENS = 16
TIME_SCALE = 0.5
STEADY_S = 3.0  # load on both processes before the kill
DIP_WINDOW_S = 2.0  # the killed process's requests have left the simulator by then
RECOVERY_TIMEOUT_S = 30.0
RECOVERY_TARGET_S = 10.0


async def engine_load(simulator: Simulator) -> float:
    stats = await simulator.stats()
    return float(stats["running"] + stats["waiting"])


def request(number: int) -> Chat:
    return chat(text(24, f"Request {number}."), OUTPUT_TOKENS)


def sender(target: Target, label: str) -> Callable[[int], Awaitable[Outcome]]:
    return lambda number: target.send(request(number), label)


async def both(targets: list[Target]) -> tuple[list[Outcome], float]:
    """REQUESTS at CONCURRENCY, split evenly between the two processes."""
    chats = [(str(i % 2), request(i)) for i in range(REQUESTS)]
    started = time.monotonic()
    halves = await asyncio.gather(*(run_all(t, chats[i::2], CONCURRENCY // 2) for i, t in enumerate(targets)))
    return [o for half in halves for o in half], time.monotonic() - started


async def recovery(simulator: Simulator, killed_at: float) -> tuple[float | None, bool]:
    """Seconds from the kill until the simulator holds the cap again after a dip, and whether a
    dip was seen (none: the survivor kept the cap full throughout)."""
    dipped = False
    while (now := time.monotonic()) < killed_at + RECOVERY_TIMEOUT_S:
        load = await engine_load(simulator)
        if load < CAP:
            dipped = True
        elif dipped:
            return now - killed_at, True
        elif now > killed_at + DIP_WINDOW_S:
            return 0.0, False
        await asyncio.sleep(0.01)
    return None, dipped


@dataclass(frozen=True, slots=True)
class Kill:
    recovered_s: float | None  # None: not within RECOVERY_TIMEOUT_S
    dipped: bool
    survivor: list[Outcome]  # the survivor's requests that ended after the kill
    lost: int  # the killed process's requests that failed


async def kill_under_load(simulator: Simulator, victim: Gateway, targets: list[Target]) -> Kill:
    """Both processes flooded; after STEADY_S the second is SIGKILLed, its clients stop, and the
    survivor's go on until the cap is back."""
    kept: list[Outcome] = []
    lost: list[Outcome] = []
    stop = asyncio.Event()
    floods = [
        flood(sender(targets[0], "survivor"), CONCURRENCY // 2, lambda: not stop.is_set(), kept),
        flood(
            sender(targets[1], "victim"),
            CONCURRENCY // 2,
            lambda: not stop.is_set() and victim.process.alive(),
            lost,
        ),
    ]
    tasks = [asyncio.create_task(f) for f in floods]
    await asyncio.sleep(STEADY_S)
    victim.kill()
    killed_at = time.monotonic()
    recovered_s, dipped = await recovery(simulator, killed_at)
    await asyncio.sleep(1.0)
    stop.set()
    await asyncio.gather(*tasks)
    return Kill(recovered_s, dipped, [o for o in kept if o.ended > killed_at], sum(not o.ok for o in lost))


async def run(bench: Run) -> list[Figure]:
    simulator = await bench.simulator(time_scale=TIME_SCALE)
    document = catalog([provider("sim", [simulator.base_url()], {"max_concurrency": CAP})])
    gateways = [await bench.gateway("caps-a", document), await bench.gateway("caps-b", document)]
    _, key = await gateways[0].team("caps")
    targets = [bench.target(g.base_url + "/v1", key, "sim") for g in gateways]
    for target in targets:
        await target.warm_up()

    sampler = Sampler(lambda: engine_load(simulator), 0.01).start()
    outcomes, seconds = await both(targets)
    stats = await simulator.stats()
    await simulator.reset()
    kill = await kill_under_load(simulator, gateways[1], targets)
    after_kill = await simulator.stats()
    await sampler.stop()
    sampled = max(sampler.values(), default=0.0)
    seen = max(stats["max_running"], after_kill["max_running"], sampled)
    recovered = kill.recovered_s
    unit = " s" if kill.dipped else " s (no dip: the cap stayed full)"
    return [
        context(
            NAME,
            f"{REQUESTS} requests at {CONCURRENCY}, two processes",
            f"{seconds:.2f} s, errors {error_text(outcomes)}",
        ),
        context(
            NAME,
            "simulator: max running / max waiting (stats), max running+waiting (sampled)",
            f"{stats['max_running']} / {stats['max_waiting']}, {sampled:.0f}; after the kill {after_kill['max_running']}",
        ),
        judged(NAME, "max requests at the simulator", f"<= {CAP}", seen, seen <= CAP),
        judged(
            NAME,
            "SIGKILL of one process: the cap usable again",
            f"<= {RECOVERY_TARGET_S:g} s",
            recovered,
            recovered is not None and recovered <= RECOVERY_TARGET_S,
            unit,
        ),
        context(
            NAME,
            "after the kill: survivor's errors / requests lost with the killed process",
            f"{error_text(kill.survivor)} / {kill.lost}",
        ),
    ]
