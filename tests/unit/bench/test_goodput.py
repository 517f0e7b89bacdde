"""The pure parts of the goodput scenario (bench/scheduling/goodput.py): its KV sizing, checked
against the simulator's own engine, its workloads, and the idle slot-time integral."""

from __future__ import annotations

from typing import Any, cast

from bench.scheduling import goodput
from bench.scheduling.goodput import (
    HOLDS,
    MAX_NUM_SEQS,
    OUTPUT_TOKENS,
    Occupancy,
    gather_chats,
    kv_blocks,
    slots,
)
from bench.scheduling.prompts import tokens_of
from mock_upstream.vllm.engine import Engine, EngineConfig
from mock_upstream.vllm.tokens import prompt_blocks, prompt_text


def engine_after(requests: int, sharing: bool) -> Engine:
    """The scenario's engine given `requests` gather requests at once, all prefilled in one step."""
    config = EngineConfig(
        num_gpu_blocks=kv_blocks(),
        block_size=goodput.BLOCK_SIZE,
        max_num_seqs=MAX_NUM_SEQS,
        max_num_batched_tokens=10**7,
        share_prefix_blocks=sharing,
        time_scale=0.0,
    )
    engine = Engine(config, clock=lambda: 0.0)
    for i, chat in enumerate(gather_chats("test", requests)):
        prompt = prompt_blocks("sim", prompt_text(chat.messages), goodput.BLOCK_SIZE)
        engine.add(str(i), prompt, OUTPUT_TOKENS)
    while engine.has_work():
        engine.step()
    return engine


def test_without_sharing_the_kv_cache_holds_exactly_holds_requests() -> None:
    assert engine_after(HOLDS, sharing=False).stats.preemptions == 0
    assert engine_after(HOLDS + 1, sharing=False).stats.preemptions > 0


def test_with_sharing_every_sequence_runs_at_once_without_preempting() -> None:
    stats = engine_after(2 * MAX_NUM_SEQS, sharing=True).stats
    assert slots(True) == MAX_NUM_SEQS and slots(False) == HOLDS
    assert stats.preemptions == 0 and stats.max_running == MAX_NUM_SEQS


def test_the_skew_has_32_long_requests_among_480_short_ones() -> None:
    chats = goodput.skew_chats("test")
    longs = [tokens_of(chat) for label, chat in chats if label == "long"]
    assert len(chats) == goodput.REQUESTS and len(longs) == goodput.LONG_REQUESTS
    assert all(abs(tokens - goodput.LONG_TOKENS) < 16 for tokens in longs)
    shorts = [chat for label, chat in chats if label == "short"]
    assert len({chat.messages[0]["content"] for chat in shorts}) == 1  # one shared system prompt


def test_idle_slot_time_counts_free_slots_only_while_requests_are_held_outside_the_server() -> None:
    occupancy = Occupancy(cast(Any, None), requests=100, slots=10)
    occupancy.samples = [
        (0.0, 0, 0),  # 100 held, 10 free: 10 idle slots for 1 s
        (1.0, 0, 4),  # 96 held, 6 free: 6 for 1 s
        (2.0, 0, 10),  # full: none
        (3.0, 95, 3),  # 2 held, 7 free: 2 for 1 s
        (4.0, 97, 3),  # nothing held: none, up to the end at 5 s
    ]
    assert occupancy.idle_slot_s(0.0, 5.0) == 18.0
    assert occupancy.idle_slot_s(2.0, 4.0) == 2.0  # the samples within the window
