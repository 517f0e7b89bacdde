"""The simulated vLLM's engine core, stepped by hand with a fake clock."""

from __future__ import annotations

from mock_upstream.vllm.engine import Engine, EngineConfig, TokenEvent
from mock_upstream.vllm.tokens import prompt_blocks

SYSTEM = "You are a careful assistant. " * 40  # 1,160 characters: 290 tokens, 18 full blocks of 16


def engine(**overrides: float) -> Engine:
    config = EngineConfig(time_scale=0.0, **overrides)  # type: ignore[arg-type]
    return Engine(config, clock=lambda: 0.0)


def run(sim: Engine) -> list[TokenEvent]:
    events: list[TokenEvent] = []
    while sim.has_work():
        outcome = sim.step()
        if outcome is not None:
            events.extend(outcome.events)
    return events


def test_the_running_batch_never_exceeds_max_num_seqs() -> None:
    sim = engine(max_num_seqs=4)
    for i in range(20):
        sim.add(f"r{i}", prompt_blocks("m", f"question {i}", 16), 5)
    seen = 0
    while sim.has_work():
        outcome = sim.step()
        seen = max(seen, len(sim.running))
        assert outcome is None or outcome.batch <= 4
    assert seen == 4 and sim.stats.max_running == 4
    assert sim.stats.requests_finished == 20 and sim.stats.generation_tokens == 100


def test_a_shared_prefix_is_prefilled_once() -> None:
    sim = engine()
    first = sim.add("a", prompt_blocks("m", SYSTEM + "first question", 16), 2)
    run(sim)
    second = sim.add("b", prompt_blocks("m", SYSTEM + "second question", 16), 2)
    run(sim)
    shared_blocks = len(SYSTEM) // 4 // 16
    assert first.cached_tokens == 0
    assert second.cached_tokens == shared_blocks * 16
    assert sim.stats.prefix_cache_hits == shared_blocks * 16
    assert sim.stats.prefill_tokens == first.prompt.tokens + second.prompt.tokens - shared_blocks * 16


def test_kv_exhaustion_preempts_and_every_request_completes() -> None:
    sim = engine(num_gpu_blocks=16, max_num_seqs=8)  # 256 tokens of KV for 8 sequences of ~100
    sequences = [sim.add(f"r{i}", prompt_blocks("m", f"{i} " * 120, 16), 40) for i in range(8)]
    events = run(sim)
    assert sim.stats.preemptions > 0
    assert all(sequence.output_tokens == 40 for sequence in sequences)
    assert sum(event.finished for event in events) == 8
    for sequence in sequences:  # each token index exactly once, in order, despite recomputation
        indexes = [event.index for event in events if event.sequence is sequence]
        assert indexes == list(range(40))
    assert sim.kv.used_blocks == 0


def test_chunked_prefill_samples_the_first_token_when_the_prefill_completes() -> None:
    sim = engine(max_num_batched_tokens=32)
    sequence = sim.add("r", prompt_blocks("m", "x" * 400, 16), 3)  # 100 tokens: 4 chunks
    outcomes = []
    while sim.has_work():
        outcome = sim.step()
        assert outcome is not None
        outcomes.append(outcome)
    assert [outcome.prefilled for outcome in outcomes] == [32, 32, 32, 4, 0, 0]
    assert [len(outcome.events) for outcome in outcomes] == [0, 0, 0, 1, 1, 1]
    assert sequence.output_tokens == 3


def test_a_step_lasts_its_prefill_and_decode_cost_times_the_scale() -> None:
    config = EngineConfig(prefill_s_per_token=0.001, decode_step_s=0.01, decode_growth=0.5, time_scale=0.1)
    sim = Engine(config, clock=lambda: 0.0)
    sim.add("r", prompt_blocks("m", "x" * 40, 16), 2)  # 10 tokens
    outcome = sim.step()
    assert outcome is not None
    assert abs(outcome.duration - 0.1 * (0.001 * 10 + 0.01 * 1.5)) < 1e-12


def test_stats_rates_use_the_injected_clock() -> None:
    now = [10.0]
    sim = Engine(EngineConfig(time_scale=0.0), clock=lambda: now[0])
    sim.add("r", prompt_blocks("m", "x" * 40, 16), 4)
    while sim.has_work():
        now[0] += 0.5
        sim.step()
    assert (sim.stats.started_at, sim.stats.last_step_at) == (10.0, 12.0)
    sim.reset_stats()
    assert sim.stats.generation_tokens == 0 and sim.stats.started_at is None


def hold_four_sequences_of_one_prefix(share_prefix_blocks: bool) -> Engine:
    """Four prompts opening with SYSTEM, admitted in one step and all running when it has run."""
    sim = Engine(EngineConfig(time_scale=0.0, share_prefix_blocks=share_prefix_blocks), clock=lambda: 0.0)
    for i in range(4):
        sim.add(f"r{i}", prompt_blocks("m", SYSTEM + f"question {i}", 16), 8)
    assert sim.step() is not None
    assert len(sim.running) == 4
    return sim


def test_sharing_sequences_hold_a_common_prefix_once() -> None:
    sim = hold_four_sequences_of_one_prefix(share_prefix_blocks=True)
    shared_blocks = len(SYSTEM) // 4 // 16
    own_blocks = [len(sequence.blocks) - shared_blocks for sequence in sim.running]
    assert sim.kv.used_blocks == shared_blocks + sum(own_blocks)
    assert len({tuple(sequence.blocks[:shared_blocks]) for sequence in sim.running}) == 1
    assert [sequence.cached_tokens for sequence in sim.running] == [0] + [shared_blocks * 16] * 3
    assert sim.stats.prefix_cache_hits == 3 * shared_blocks * 16


def test_without_sharing_each_sequence_holds_and_prefills_its_whole_prompt() -> None:
    sim = hold_four_sequences_of_one_prefix(share_prefix_blocks=False)
    assert sim.kv.used_blocks == sum(len(sequence.blocks) for sequence in sim.running)
    assert all(len(sequence.blocks) == -(-sequence.prompt.tokens // 16) for sequence in sim.running)
    assert len({block for sequence in sim.running for block in sequence.blocks}) == sim.kv.used_blocks
    assert sim.stats.prefill_tokens == sum(sequence.prompt.tokens for sequence in sim.running)
    assert sim.stats.prefix_cache_hits == 0 and all(sequence.cached_tokens == 0 for sequence in sim.running)
    run(sim)
    again = sim.add("again", prompt_blocks("m", SYSTEM + "question 0", 16), 1)  # after all have ended
    run(sim)
    assert again.cached_tokens == 0
