"""Crashes mid-job: a 10,000-line job on two gateway processes sharing PostgreSQL (jobs `lease_s: 2`).
The process holding the job is SIGKILLed three times while its lines run, and once while the job
is `finalizing` (seen by polling GET /v1/batches/{id}); each time it is started again.

What must hold: one line per custom_id across the output and error files, none missing; the usage
records of the job's batch id add up exactly to the usage of its output lines; a kill re-runs at
most the lines that were in flight (`jobs.concurrency`); the job moves again soon after each kill.

The simulator's requests are counted by its admissions: every line's prompt has the same length,
so `/_sim/stats`' prompt tokens (counted once per admitted request) over that length is the count.
A kill's re-runs are the requests seen by then, minus the outcomes stored by then, minus the
re-runs of the kills before: the killed process's lines in flight, none of which it could store."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from bench.batch_jobs.lines import Line, input_file, prompt_tokens, read_job_files
from bench.batch_jobs.stack import PROVIDER, BatchClient, JobGateway, JobsRun, Ledger, jobs_catalog
from bench.scheduling.figures import Figure, context, judged
from bench.scheduling.processes import Simulator
from bench.scheduling.prompts import chat, text

NAME = "crash"
LINES = 10_000
PROMPT_TOKENS, OUTPUT_TOKENS = 24, 8
CONCURRENCY = 128  # jobs.concurrency: the lines in flight at the holder
LEASE_S = 2
TIME_SCALE = 1.0
KILLS_AT = (0.2, 0.45, 0.7)  # shares of the lines stored when the holder is killed mid-run
SETTLE_S = 0.3  # after a kill: the killed process's last requests have reached the simulator
MOVING_TARGET_S = 10.0
JOB_TIMEOUT_S = 300.0


def job_lines() -> list[Line]:
    return [Line(f"line-{n}", chat(text(PROMPT_TOKENS, f"Line {n}."), OUTPUT_TOKENS)) for n in range(LINES)]


@dataclass(frozen=True, slots=True)
class Kill:
    phase: str  # what the job was doing: running (its lines) or finalizing
    landed: bool  # the job was still in that phase once its holder was dead
    rerun: int  # the killed process's lines in flight, run again by the next holder
    moving_s: float | None  # from the kill until the job moved again; None: not within the timeout


class Crashes:
    """The job, the two processes that may hold it, and what each kill did."""

    def __init__(self, simulator: Simulator, gateways: list[JobGateway], clients: list[BatchClient]) -> None:
        self.simulator = simulator
        self.gateways = gateways
        self.clients = clients
        self.ledger: Ledger | None = None
        self.tokens_per_line = prompt_tokens(job_lines()[0].chat)
        self.kills: list[Kill] = []

    async def admitted(self) -> int:
        """The requests the simulator has admitted since its last reset."""
        return int((await self.simulator.stats())["prompt_tokens"]) // self.tokens_per_line

    async def holder(self, job_id: str) -> JobGateway:
        """The live process holding the job's lease (waiting for one to claim it)."""
        assert self.ledger is not None
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            pid = await self.ledger.holder_pid(job_id)
            found = next((g for g in self.gateways if g.process.alive() and g.pid == pid), None)
            if found is not None:
                return found
            await asyncio.sleep(0.05)
        raise RuntimeError(f"no live process holds {job_id}")

    def other(self, gateway: JobGateway) -> BatchClient:
        return self.clients[1 - self.gateways.index(gateway)]

    async def wait_stored(self, job_id: str, lines: int) -> None:
        assert self.ledger is not None
        while True:
            if await self.ledger.stored_lines(job_id) >= lines:
                return
            await asyncio.sleep(0.05)

    async def kill_running(self, job_id: str) -> Kill:
        """Kill the holder while its lines run; restart it; time until another line is stored."""
        assert self.ledger is not None
        victim = await self.holder(job_id)
        victim.kill()
        killed_at = time.monotonic()
        await asyncio.sleep(SETTLE_S)
        stored = await self.ledger.stored_lines(job_id)
        rerun = await self.admitted() - stored - sum(kill.rerun for kill in self.kills)
        batch = await self.other(victim).retrieve(job_id)
        landed = batch.status == "in_progress"
        moving, _ = await asyncio.gather(self._stored_beyond(job_id, stored, killed_at), victim.start())
        return Kill("running", landed, rerun, moving)

    async def _stored_beyond(self, job_id: str, stored: int, killed_at: float) -> float | None:
        assert self.ledger is not None
        while (now := time.monotonic()) < killed_at + JOB_TIMEOUT_S:
            if await self.ledger.stored_lines(job_id) > stored:
                return now - killed_at
            await asyncio.sleep(0.05)
        return None

    async def kill_finalizing(self, job_id: str) -> Kill:
        """Poll the job from the process not holding it; kill the holder once it is finalizing."""
        victim = await self.holder(job_id)
        watcher = self.other(victim)
        while True:
            status = (await watcher.retrieve(job_id)).status
            if status in ("finalizing", "completed"):
                break
            await asyncio.sleep(0.005)
        if status == "completed":  # the window passed between two polls
            return Kill("finalizing", False, 0, None)
        victim.kill()
        killed_at = time.monotonic()
        landed = (await watcher.retrieve(job_id)).status == "finalizing"
        done, _ = await asyncio.gather(watcher.finished(job_id, JOB_TIMEOUT_S, 0.05), victim.start())
        return Kill("finalizing", landed, 0, time.monotonic() - killed_at if done else None)


def kill_figures(kills: list[Kill]) -> list[Figure]:
    running = [kill for kill in kills if kill.phase == "running"]
    moving = [kill.moving_s for kill in kills]
    slowest = None if None in moving else max(m for m in moving if m is not None)
    most_rerun = max((kill.rerun for kill in running), default=0)
    listed = ", ".join(
        f"{kill.phase}{'' if kill.landed else ' (missed)'}: {kill.rerun} re-run, "
        + ("-" if kill.moving_s is None else f"{kill.moving_s:.2f} s")
        for kill in kills
    )
    finalizing = [kill for kill in kills if kill.phase == "finalizing"]
    return [
        context(NAME, "kills: phase, lines re-run, time until the job moved again", listed),
        judged(
            NAME,
            "lines re-run by one kill (most)",
            f"<= {CONCURRENCY}",
            most_rerun,
            most_rerun <= CONCURRENCY,
        ),
        judged(
            NAME,
            "from a kill to the job moving again (slowest)",
            f"<= {MOVING_TARGET_S:g} s",
            slowest,
            slowest is not None and slowest <= MOVING_TARGET_S,
            " s",
        ),
        Figure(
            NAME,
            "kill while finalizing landed in finalizing",
            "yes",
            "yes" if finalizing and finalizing[0].landed else "no",
            bool(finalizing and finalizing[0].landed),
        ),
    ]


async def run(bench: JobsRun) -> list[Figure]:
    simulator = await bench.simulator(time_scale=TIME_SCALE)
    document = jobs_catalog(simulator, lease_s=LEASE_S, concurrency=CONCURRENCY)
    gateways = [await bench.job_gateway("crash-a", document), await bench.job_gateway("crash-b", document)]
    _, key = await gateways[0].team("crash")
    crashes = Crashes(simulator, gateways, [BatchClient(bench, g, key) for g in gateways])
    crashes.ledger = await Ledger.connect()
    try:
        return await _crash(crashes)
    finally:
        await crashes.ledger.close()


async def _crash(crashes: Crashes) -> list[Figure]:
    lines = job_lines()
    await crashes.simulator.reset()
    started = time.monotonic()
    batch = await crashes.clients[0].submit(input_file(PROVIDER, lines))
    for share in KILLS_AT:
        await crashes.wait_stored(batch.id, int(share * LINES))
        crashes.kills.append(await crashes.kill_running(batch.id))
    crashes.kills.append(await crashes.kill_finalizing(batch.id))
    final = await crashes.clients[0].finished(batch.id, JOB_TIMEOUT_S)
    seconds = time.monotonic() - started
    client = crashes.clients[0]
    files = read_job_files(
        await client.content(final.output_file_id), await client.content(final.error_file_id)
    )
    assert crashes.ledger is not None
    metered = await crashes.ledger.metered(batch.id)
    extra = await crashes.admitted() - LINES
    running_kills = sum(1 for kill in crashes.kills if kill.phase == "running")
    usage = final.usage
    metered_sums = (metered.prompt_tokens, metered.completion_tokens, metered.cached_tokens)
    file_sums = (files.prompt_tokens, files.completion_tokens, files.cached_tokens)
    batch_sums = (
        (usage.input_tokens, usage.output_tokens, usage.input_tokens_details.cached_tokens) if usage else None
    )
    exact = metered_sums == file_sums == batch_sums and metered.records == files.succeeded
    missing = files.missing(line.custom_id for line in lines)
    errors = ", ".join(f"{code}: {count}" for code, count in files.error_codes.items()) or "none"
    return [
        context(
            NAME,
            "setup",
            f"{LINES:,} lines of {crashes.tokens_per_line} prompt + {OUTPUT_TOKENS} output tokens, "
            f"2 processes, jobs.concurrency {CONCURRENCY}, lease {LEASE_S} s, time scale {TIME_SCALE}",
        ),
        context(
            NAME, "job: final status, wall clock, error lines", f"{final.status}, {seconds:.1f} s, {errors}"
        ),
        judged(NAME, "output + error lines", f"= {LINES:,}", files.lines, files.lines == LINES),
        judged(NAME, "custom_ids missing", "0", missing, missing == 0),
        judged(NAME, "duplicate custom_ids", "0", files.duplicates, files.duplicates == 0),
        Figure(
            NAME,
            "metered answered runs = output lines = batch usage (records; prompt / completion / cached tokens)",
            "exactly equal",
            f"{metered.records:,} = {files.succeeded:,}; {metered_sums} = {file_sums} = {batch_sums}"
            f" (and {metered.lost_runs} records of runs lost at the kills)",
            exact,
        ),
        judged(
            NAME,
            f"upstream requests - {LINES:,}, per mid-run kill",
            f"<= {CONCURRENCY}",
            extra / running_kills,
            extra / running_kills <= CONCURRENCY,
        ),
        *kill_figures(crashes.kills),
    ]
