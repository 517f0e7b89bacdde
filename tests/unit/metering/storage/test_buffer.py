from __future__ import annotations

import asyncio
import time

import pytest

from gateway.metering.storage.buffer import MemoryBuffer, MeteringBacklogFull
from tests.unit.metering.conftest import EventFactory


async def test_events_come_out_in_order_and_leave_on_ack(make_event: EventFactory) -> None:
    buffer = MemoryBuffer()
    events = [make_event() for _ in range(5)]
    for event in events:
        await buffer.append(event)

    first = await buffer.read(3, block_ms=0)
    rest = await buffer.read(10, block_ms=0)

    assert [event for _, event in first + rest] == events
    assert await buffer.depth() == 5  # handed out is not written
    await buffer.ack([entry_id for entry_id, _ in first + rest])
    assert await buffer.depth() == 0
    assert await buffer.read(10, block_ms=0) == []


async def test_read_waits_for_the_first_event(make_event: EventFactory) -> None:
    buffer = MemoryBuffer()
    event = make_event()

    async def append_later() -> None:
        await asyncio.sleep(0.05)
        await buffer.append(event)

    appender = asyncio.create_task(append_later())
    entries = await buffer.read(10, block_ms=2000)
    await appender
    assert [e for _, e in entries] == [event]


async def test_read_gives_up_after_block_ms() -> None:
    started = time.monotonic()
    assert await MemoryBuffer().read(10, block_ms=50) == []
    assert 0.04 <= time.monotonic() - started < 1


async def test_unacked_entries_are_reclaimed_once_idle(make_event: EventFactory) -> None:
    buffer = MemoryBuffer()
    await buffer.append(make_event())
    await buffer.append(make_event())
    handed_out = await buffer.read(10, block_ms=0)
    await buffer.ack([handed_out[0][0]])

    assert await buffer.reclaim(min_idle_ms=60_000, max_count=10) == []
    await asyncio.sleep(0.02)
    assert await buffer.reclaim(min_idle_ms=10, max_count=10) == handed_out[1:]
    assert await buffer.read(10, block_ms=0) == []  # a reclaimed entry is not new


async def test_appending_over_the_bound_is_refused(make_event: EventFactory) -> None:
    buffer = MemoryBuffer(maxlen=2)
    await buffer.append(make_event())
    await buffer.append(make_event())

    with pytest.raises(MeteringBacklogFull) as refused:
        await buffer.append(make_event())

    assert (refused.value.status, refused.value.code) == (503, "metering_backlog_full")
    assert await buffer.depth() == 2
    entries = await buffer.read(1, block_ms=0)
    await buffer.ack([entries[0][0]])
    await buffer.append(make_event())  # room again
    assert await buffer.depth() == 2


async def test_the_oldest_unwritten_event_is_the_first_not_yet_acked(make_event: EventFactory) -> None:
    buffer = MemoryBuffer()
    assert await buffer.oldest_age_s() is None
    await buffer.append(make_event())
    await asyncio.sleep(0.2)
    await buffer.append(make_event())

    first_age = await buffer.oldest_age_s()
    assert first_age is not None and 0.2 <= first_age < 5
    batch = await buffer.read(1, block_ms=0)
    assert await buffer.oldest_age_s() == pytest.approx(first_age, abs=0.1)  # read is not written
    await buffer.ack([entry_id for entry_id, _ in batch])
    second_age = await buffer.oldest_age_s()
    assert second_age is not None and second_age < 0.2
    await buffer.ack([entry_id for entry_id, _ in await buffer.read(1, block_ms=0)])
    assert await buffer.oldest_age_s() is None
