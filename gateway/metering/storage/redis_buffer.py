"""The usage buffer on a Redis stream, shared by every gateway process.

Each event is one stream entry (its msgspec JSON in the `event` field). Writers read through one
consumer group, so each entry goes to one writer; an entry is acked and deleted only after its
record is committed. Entries a dead writer left pending are taken over with XAUTOCLAIM. The stream
is never trimmed by length (that would drop unwritten records): `append` refuses new events with
MeteringBacklogFull once about `maxlen` entries are waiting. Since a written entry is deleted, the
stream's first entry is the oldest unwritten one, and its id says when it was added.

While Redis is unreachable, `append` keeps events in a bounded in-process spool instead of
failing the request; `read` hands spooled events out first, so the writer persists them straight
to the database without waiting for Redis. The spool is memory: a killed process loses it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from collections.abc import Sequence
from typing import Any

import msgspec
import structlog
from redis.exceptions import RedisError, ResponseError

from gateway.metering.events import UsageEvent
from gateway.metering.storage.buffer import MemoryBuffer, MeteringBacklogFull
from gateway.redis.client import RedisClient
from gateway.redis.group_commit import PipelineBatcher

EVENT_FIELD = b"event"
LENGTH_CHECK_EVERY = 100  # appends between two XLEN round trips, while far from the bound
SPOOL_PREFIX = "spool:"  # ids of spooled events; stream ids are "<ms>-<seq>"
REDIS_DOWN = (RedisError, OSError)
# KEYS[1] the stream; ARGV the events' JSON: one entry each, as XADD <stream> * event <json> would add.
_APPEND = """
for i = 1, #ARGV do redis.call('XADD', KEYS[1], '*', 'event', ARGV[i]) end
return #ARGV
"""
# KEYS[1] the stream; ARGV[1] the group, then the ids of written entries: acked and deleted at once
# (as XACK then XDEL in a MULTI would), 1,000 ids at a time (under Lua's limit on unpacked values).
_ACK = """
local acked = 0
for i = 2, #ARGV, 1000 do
  local last = math.min(i + 999, #ARGV)
  acked = acked + redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, i, last))
  redis.call('XDEL', KEYS[1], unpack(ARGV, i, last))
end
return acked
"""


def unique_consumer_name() -> str:
    """host-pid-random: distinct for every writer process, readable in XINFO CONSUMERS."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def process_consumer_name() -> str:
    """host-pid: the consumer of a gateway process's writer (a worker's, or the writer process's)."""
    return f"{socket.gethostname()}-{os.getpid()}"


class RedisStreamBuffer:
    def __init__(
        self,
        redis: RedisClient,
        stream: str = "gateway:usage",
        group: str = "writers",
        consumer: str | None = None,
        maxlen: int = 1_000_000,
        logger: structlog.typing.FilteringBoundLogger | None = None,
        spool_maxlen: int = 100_000,
        stream_retry_s: float = 1.0,
        batcher: PipelineBatcher | None = None,
    ) -> None:
        self.redis = redis
        self.stream = stream
        self.group = group
        self.consumer = consumer or unique_consumer_name()
        self.maxlen = maxlen
        self._log = logger or structlog.get_logger("gateway.metering")
        self._encoder = msgspec.json.Encoder()
        self._decoder = msgspec.json.Decoder(UsageEvent)
        self._group_ready = False
        self._known_length = 0
        self._known_oldest_ms: int | None = None  # the first entry's id time, as last seen
        self._unchecked_appends = LENGTH_CHECK_EVERY  # the first append checks
        self.spool = MemoryBuffer(maxlen=spool_maxlen, id_prefix=SPOOL_PREFIX)
        self.spooling = False  # the last append found Redis unreachable
        # While spooling, the stream is tried again at most this often: an unreachable Redis can take
        # its connect timeout to fail, and the request should not wait for that on every append.
        self.stream_retry_s = stream_retry_s
        self._next_stream_try = 0.0
        self._batcher = batcher or PipelineBatcher(redis)
        self._append_script = redis.register_script(_APPEND)
        self._ack_script = redis.register_script(_ACK)

    async def append(self, event: UsageEvent) -> None:
        if self.spooling and time.monotonic() < self._next_stream_try:
            await self.spool.append(event)
            return
        try:
            await self._append_to_stream(event)
        except REDIS_DOWN as exc:
            if not self.spooling:
                self._log.warning("usage_buffer_spooling", stream=self.stream, error=type(exc).__name__)
            self.spooling = True
            self._next_stream_try = time.monotonic() + self.stream_retry_s
            await self.spool.append(event)  # MeteringBacklogFull once the spool is full too
            return
        if self.spooling:
            self._log.info("usage_buffer_recovered", stream=self.stream, spooled=await self.spool.depth())
        self.spooling = False

    async def _append_to_stream(self, event: UsageEvent) -> None:
        if self._length_check_due():
            self._unchecked_appends = 0  # claimed before the await: concurrent appends don't all check
            self._known_length = int(await self.redis.xlen(self.stream))
            if self._known_length >= self.maxlen:
                raise MeteringBacklogFull(f"metering backlog is full ({self.maxlen} records); retry later")
        await self._xadd(self._encoder.encode(event))
        self._unchecked_appends += 1

    async def _xadd(self, payload: bytes) -> None:
        """The appends queued before the next round trip go out as one script call adding an entry
        each (see gateway.redis.group_commit)."""
        await self._batcher.merge_script(
            self._append_script, self.stream, payload, self._append_args, durable=True
        )

    def _append_args(self, payloads: list[bytes]) -> tuple[list[str], list[bytes]]:
        return [self.stream], payloads

    def _length_check_due(self) -> bool:
        """XLEN every LENGTH_CHECK_EVERY appends, and before each one once the stream is near its bound.

        The bound is soft: processes together may overshoot it by LENGTH_CHECK_EVERY each.
        """
        near_bound = self._known_length + self._unchecked_appends >= self.maxlen * 0.9
        return near_bound or self._unchecked_appends >= LENGTH_CHECK_EVERY

    async def read(self, max_count: int, block_ms: int) -> list[tuple[str, UsageEvent]]:
        spooled = await self.spool.read(max_count, block_ms=0)
        if spooled:
            return spooled
        response = await self._group_call(
            self.redis.xreadgroup,
            self.group,
            self.consumer,
            {self.stream: ">"},
            count=max_count,
            block=block_ms if block_ms > 0 else None,  # BLOCK 0 would wait forever
        )
        return await self._decode(_stream_entries(response))

    async def ack(self, ids: list[str]) -> None:
        await self.spool.ack([i for i in ids if i.startswith(SPOOL_PREFIX)])
        ids = [i for i in ids if not i.startswith(SPOOL_PREFIX)]
        if not ids:
            return
        # One script call through the batcher: a batch's thousand ids acked and deleted in one
        # command, shared with any other ack of the same moment.
        await self._batcher.merge_script(self._ack_script, ("ack", self.stream), ids, self._ack_args)

    def _ack_args(self, id_lists: list[list[str]]) -> tuple[list[str], list[str]]:
        return [self.stream], [self.group, *(entry_id for ids in id_lists for entry_id in ids)]

    async def depth(self) -> int:
        """Stream entries plus spooled events; the last length seen while Redis is unreachable."""
        with contextlib.suppress(*REDIS_DOWN):
            self._known_length = int(await self.redis.xlen(self.stream))
        return self._known_length + await self.spool.depth()

    async def oldest_age_s(self) -> float | None:
        """The older of the stream's first entry (its id time, by the Redis server's clock) and the
        oldest spooled event; while Redis is unreachable, the first entry last seen."""
        with contextlib.suppress(*REDIS_DOWN):
            first = await self.redis.xrange(self.stream, count=1)
            entry_id = first[0][0] if first else None
            self._known_oldest_ms = None if entry_id is None else int(_text(entry_id).split("-")[0])
        spooled = await self.spool.oldest_age_s()
        if self._known_oldest_ms is None:
            return spooled
        streamed = max(time.time() - self._known_oldest_ms / 1000, 0.0)
        return streamed if spooled is None else max(streamed, spooled)

    async def reclaim(self, min_idle_ms: int, max_count: int) -> list[tuple[str, UsageEvent]]:
        """Stream entries only: spooled ones belong to this process's writer, which holds them."""
        claimed: list[tuple[Any, Any]] = []
        start: Any = "0-0"
        while len(claimed) < max_count:
            response = await self._group_call(
                self.redis.xautoclaim,
                self.stream,
                self.group,
                self.consumer,
                min_idle_time=min_idle_ms,
                start_id=start,
                count=max_count - len(claimed),
            )
            start, entries = response[0], response[1]
            claimed.extend(entries)
            if _text(start) == "0-0":
                break
        return await self._decode(claimed)

    async def _group_call(self, command: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a consumer-group command, creating the group first (and again if the stream vanished)."""
        if not self._group_ready:
            await self._create_group()
        try:
            return await command(*args, **kwargs)
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
        await self._create_group()
        return await command(*args, **kwargs)

    async def _create_group(self) -> None:
        try:
            await self.redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True

    async def _decode(self, entries: Sequence[tuple[Any, Any]]) -> list[tuple[str, UsageEvent]]:
        """Decode entries; ones deleted or unreadable are acked away so they cannot jam the writer."""
        events: list[tuple[str, UsageEvent]] = []
        unusable: list[str] = []
        for raw_id, fields in entries:
            if raw_id is None:
                continue
            entry_id = _text(raw_id)
            payload = _event_payload(fields)
            try:
                if payload is None:
                    raise msgspec.DecodeError("no event field")
                events.append((entry_id, self._decoder.decode(payload)))
            except msgspec.DecodeError:
                unusable.append(entry_id)
        if unusable:
            self._log.error("usage_entries_unreadable", stream=self.stream, ids=unusable)
            await self.ack(unusable)
        return events


def _stream_entries(response: Any) -> list[tuple[Any, Any]]:
    """The entries of the one stream read, whichever reply shape (RESP2/RESP3) the client uses."""
    if not response:
        return []
    entries = next(iter(response.values())) if isinstance(response, dict) else response[0][1]
    if entries and isinstance(entries[0], list):  # RESP3's legacy shape wraps them once more
        entries = entries[0]
    return list(entries or [])


def _event_payload(fields: Any) -> bytes | str | None:
    if not fields:
        return None
    value = fields.get(EVENT_FIELD)
    if value is None:
        value = fields.get(EVENT_FIELD.decode())
    return value  # type: ignore[no-any-return]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
