"""The metering writer as a process of its own: `gateway metering-writer`, and `gateway serve`'s child.

With Redis, serving workers only append usage events to the stream; one writer process moves them
into the database (`GATEWAY_METERING_WRITER=process`, what `auto` means for `gateway serve` with
Redis). Decoding a batch and
encoding its COPY then never holds up a worker's event loop, and several workers share one writer
instead of running one each. `external` leaves the writer to be run on its own (`gateway
metering-writer`, one or several: the stream's consumer group hands each entry to one of them).

A worker still writes what it spooled itself while Redis was unreachable (`services.open_services`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading

import structlog

from gateway.db.session import create_engine, session_factory
from gateway.metering.storage.redis_buffer import RedisStreamBuffer, process_consumer_name
from gateway.metering.storage.writer import UsageWriter
from gateway.redis.client import redis_client
from gateway.server.gc_tuning import tune_for_serving
from gateway.settings import Settings

log = structlog.get_logger("gateway.metering")

DRAIN_TIMEOUT_S = 10.0
RESTART_DELAY_S = 1.0
PARENT_CHECK_S = 1.0  # where there is no pidfd


async def run_writer(
    settings: Settings,
    stop: asyncio.Event | None = None,
    parent_pid: int | None = None,
    *,
    tune_gc: bool = False,
) -> None:
    """Write usage records from the Redis stream until SIGTERM or SIGINT (or `stop`, or the end of
    the process `parent_pid`), then drain what was read. `tune_gc`: this process is the writer
    (`gateway metering-writer`); tune its garbage collector once started, as a serving worker's."""
    assert settings.redis_url is not None
    redis, engine = redis_client(settings.redis_url), create_engine(settings.database_url)
    buffer = RedisStreamBuffer(redis, consumer=process_consumer_name())
    writer = UsageWriter.configured(settings, buffer, session_factory(engine))
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread (tests)
            loop.add_signal_handler(signum, stop.set)
    if tune_gc:  # a batch is a thousand events: with CPython's defaults, a few young collections
        # each, and every hundredth a full one through all that the imports left (a fifth of the
        # writer's CPU, bench/metering_writer.py)
        tune_for_serving()
    tasks = [asyncio.create_task(writer.run(), name="usage-writer")]
    if parent_pid is not None:
        tasks.append(asyncio.create_task(_stop_when_orphaned(parent_pid, stop), name="parent-watch"))
    log.info("metering_writer_started")
    try:
        await stop.wait()
    finally:
        await writer.stop(drain_timeout_s=DRAIN_TIMEOUT_S)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await engine.dispose()
        await redis.aclose()
        log.info("metering_writer_stopped", written=writer.records_written, rejected=writer.records_rejected)


async def _stop_when_orphaned(parent_pid: int, stop: asyncio.Event) -> None:
    """`gateway serve` killed outright (SIGKILL, a crash) must not leave its writer running."""
    try:
        parent = os.pidfd_open(parent_pid)  # readable once that process has ended (Linux)
    except ProcessLookupError:
        parent = None
    except (AttributeError, OSError):  # no pidfd here: look at the parent now and then
        while os.getppid() == parent_pid:  # noqa: ASYNC110 - nothing to wait on instead
            await asyncio.sleep(PARENT_CHECK_S)
        parent = None
    if parent is not None:
        ended = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_reader(parent, ended.set)
        try:
            await ended.wait()
        finally:
            loop.remove_reader(parent)
            os.close(parent)
    log.warning("metering_writer_orphaned", parent=parent_pid)
    stop.set()


class WriterProcess:
    """`gateway serve`'s writer: started before the workers, started again if it dies, stopped
    (and drained) after them. It has a session of its own, so a Ctrl-C stops the workers first;
    and it stops by itself if `gateway serve` is killed."""

    def __init__(self, command: list[str] | None = None) -> None:
        self.command = command or [
            sys.executable, "-m", "gateway.cli", "metering-writer", "--parent-pid", str(os.getpid()),
        ]  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # a restart and a stop never cross
        self._watcher: threading.Thread | None = None

    def start(self) -> None:
        self._spawn()
        self._watcher = threading.Thread(target=self._watch, name="metering-writer-watch", daemon=True)
        self._watcher.start()

    def stop(self, timeout_s: float = DRAIN_TIMEOUT_S + 5) -> int | None:
        with self._lock:
            self._stopping.set()
            process = self.process
        if process is None:
            return None
        if process.poll() is None:
            process.terminate()
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()

    def _spawn(self) -> None:
        self.process = subprocess.Popen(self.command, start_new_session=True)  # noqa: S603 - our own command

    def _watch(self) -> None:
        while not self._stopping.is_set():
            assert self.process is not None
            code = self.process.wait()
            if self._stopping.wait(RESTART_DELAY_S):
                return
            with self._lock:
                if self._stopping.is_set():
                    return
                log.warning("metering_writer_restarted", exit_code=code)
                self._spawn()
