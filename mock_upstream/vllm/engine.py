"""The simulated vLLM's engine core: continuous batching over a paged KV cache with a prefix
cache (`share_prefix_blocks`, vLLM's prefix caching), one scheduler iteration per `step()`. Pure:
no I/O, the clock is injected.

Each step schedules the running sequences in admission order (a decode token each, or a chunk of
their prefill within `max_num_batched_tokens`), preempting the most recently admitted one when a
block is needed and none is left (recompute: its blocks are freed and it waits again), then admits
waiting sequences up to `max_num_seqs`. A prefill that completes samples the first token.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from mock_upstream.vllm.kv_cache import KVCache
from mock_upstream.vllm.tokens import PromptBlocks


class EngineError(Exception):
    """A request the engine can never serve (it would not fit the whole KV cache)."""


@dataclass(frozen=True, slots=True)
class EngineConfig:
    max_num_seqs: int = 256
    num_gpu_blocks: int = 2048
    block_size: int = 16
    max_num_batched_tokens: int = 2048  # prefill tokens per step (chunked prefill)
    prefill_s_per_token: float = 0.00005
    decode_step_s: float = 0.01
    decode_growth: float = 0.01  # each running sequence makes a step this much longer
    time_scale: float = 1.0  # multiplies every step's duration
    default_max_tokens: int = 16
    # vLLM's prefix caching (on by default since V1): running sequences whose prompts open alike
    # hold the same KV blocks, and a prompt's cached blocks are not prefilled again. Off, every
    # sequence allocates and prefills its whole prompt.
    share_prefix_blocks: bool = True


@dataclass(slots=True, eq=False)  # compared by identity
class Sequence:
    request_id: str
    prompt: PromptBlocks
    max_tokens: int
    output_tokens: int = 0
    computed: int = 0  # tokens whose KV the sequence's blocks hold
    prefill_end: int = 0  # `computed` at which the current prefill (or recompute) is done
    blocks: list[int] = field(default_factory=list)
    registered: int = 0  # leading blocks already in the prefix cache
    cached_tokens: int | None = None  # prefix-cache hit tokens of the first admission


@dataclass(frozen=True, slots=True)
class TokenEvent:
    sequence: Sequence
    index: int  # of the output token, from 0
    finished: bool


@dataclass(frozen=True, slots=True)
class StepOutcome:
    duration: float  # seconds, time-scaled
    batch: int  # sequences scheduled
    prefilled: int
    events: list[TokenEvent]


@dataclass(slots=True)
class EngineStats:
    """Counters since the start or the last reset; the ground truth `/_sim/stats` reports."""

    prefill_tokens: int = 0  # computed, prefix-cache hits excluded, recomputation included
    generation_tokens: int = 0
    prompt_tokens: int = 0  # of the requests admitted, counted once each
    prefix_cache_queries: int = 0  # tokens looked up at each admission
    prefix_cache_hits: int = 0
    preemptions: int = 0
    requests_finished: int = 0
    steps: int = 0
    max_running: int = 0
    max_waiting: int = 0
    simulated_seconds: float = 0.0  # the steps' durations before time scaling
    started_at: float | None = None  # clock of the first request
    last_step_at: float | None = None


class Engine:
    def __init__(self, config: EngineConfig, clock: Callable[[], float]) -> None:
        self.config = config
        self.clock = clock
        self.kv = KVCache(config.num_gpu_blocks)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.stats = EngineStats()

    @property
    def kv_cache_usage(self) -> float:
        return self.kv.used_blocks / self.kv.num_blocks

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def reset_stats(self) -> None:
        self.stats = EngineStats(
            max_running=len(self.running),
            max_waiting=len(self.waiting),
            started_at=self.clock() if self.has_work() else None,  # rates then span the work in flight
        )

    def add(self, request_id: str, prompt: PromptBlocks, max_tokens: int) -> Sequence:
        needed = math.ceil((prompt.tokens + max_tokens) / self.config.block_size)
        if needed > self.config.num_gpu_blocks:
            capacity = self.config.num_gpu_blocks * self.config.block_size
            raise EngineError(
                f"{prompt.tokens} prompt tokens and {max_tokens} output tokens exceed the KV cache's "
                f"{capacity} tokens"
            )
        sequence = Sequence(request_id, prompt, max_tokens, prefill_end=prompt.tokens)
        self.waiting.append(sequence)
        if self.stats.started_at is None:
            self.stats.started_at = self.clock()
        self.stats.max_waiting = max(self.stats.max_waiting, len(self.waiting))
        return sequence

    def abort(self, sequence: Sequence) -> None:
        if sequence in self.running:
            self.running.remove(sequence)
        elif sequence in self.waiting:
            self.waiting.remove(sequence)
        self.kv.release(sequence.blocks)
        sequence.blocks = []

    def step(self) -> StepOutcome | None:
        """Schedule and run one iteration; None when there is nothing to run."""
        budget = self.config.max_num_batched_tokens
        scheduled: list[tuple[Sequence, int]] = []
        preempted = False
        for sequence in list(self.running):
            if sequence not in self.running:  # preempted earlier in this step
                continue
            prefilling = sequence.computed < sequence.prefill_end
            count = min(sequence.prefill_end - sequence.computed, budget) if prefilling else 1
            if count == 0:
                continue
            reserved, preempted_now = self._reserve(sequence, sequence.computed + count)
            preempted = preempted or preempted_now
            if reserved:
                budget -= count if prefilling else 0
                scheduled.append((sequence, count))
                self._register_full_blocks(sequence, sequence.computed + count)
        if not preempted:  # as vLLM: no new admissions in a step that had to preempt
            self._admit(budget, scheduled)
        self.stats.max_running = max(self.stats.max_running, len(self.running))
        self.stats.max_waiting = max(self.stats.max_waiting, len(self.waiting))
        if not scheduled:
            return None
        return self._run(scheduled)

    def _reserve(self, sequence: Sequence, tokens: int) -> tuple[bool, bool]:
        """Blocks for `tokens` tokens of `sequence`, preempting from the newest admission as needed:
        (reserved, preempted any)."""
        needed = math.ceil(tokens / self.config.block_size) - len(sequence.blocks)
        preempted = False
        while needed > 0:
            blocks = self.kv.allocate(needed)
            if blocks is not None:
                sequence.blocks.extend(blocks)
                break
            victim = self.running[-1]
            self._preempt(victim)
            preempted = True
            if victim is sequence:
                return False, True
        return True, preempted

    def _preempt(self, sequence: Sequence) -> None:
        self.running.remove(sequence)
        self.kv.release(sequence.blocks)
        sequence.blocks, sequence.computed, sequence.registered = [], 0, 0
        sequence.prefill_end = sequence.prompt.tokens + sequence.output_tokens
        self.waiting.appendleft(sequence)
        self.stats.preemptions += 1

    def _admit(self, budget: int, scheduled: list[tuple[Sequence, int]]) -> None:
        block_size = self.config.block_size
        while self.waiting and len(self.running) < self.config.max_num_seqs and budget > 0:
            sequence = self.waiting[0]
            # At least one token is computed, so a fully cached prompt still samples.
            hit_limit = (sequence.prefill_end - 1) // block_size
            sharing = self.config.share_prefix_blocks
            hits = self.kv.lookup(sequence.prompt.block_hashes[:hit_limit]) if sharing else []
            computed = len(hits) * block_size
            count = min(sequence.prefill_end - computed, budget)
            fresh = self.kv.allocate(math.ceil((computed + count) / block_size) - len(hits))
            if fresh is None:
                self.kv.release(hits)
                return
            self.waiting.popleft()
            sequence.blocks, sequence.computed, sequence.registered = hits + fresh, computed, len(hits)
            if sequence.cached_tokens is None:
                sequence.cached_tokens = computed
                self.stats.prompt_tokens += sequence.prompt.tokens
            self.stats.prefix_cache_queries += sequence.prefill_end if sharing else 0
            self.stats.prefix_cache_hits += computed
            self.running.append(sequence)
            budget -= count
            scheduled.append((sequence, count))
            self._register_full_blocks(sequence, computed + count)

    def _run(self, scheduled: list[tuple[Sequence, int]]) -> StepOutcome:
        prefilled = 0
        events: list[TokenEvent] = []
        for sequence, count in scheduled:
            if sequence.computed < sequence.prefill_end:
                prefilled += count
            sequence.computed += count
            if sequence.computed >= sequence.prefill_end:
                events.append(self._sample(sequence))
        config = self.config
        simulated = config.prefill_s_per_token * prefilled + config.decode_step_s * (
            1 + config.decode_growth * len(scheduled)
        )
        stats = self.stats
        stats.steps += 1
        stats.prefill_tokens += prefilled
        stats.generation_tokens += len(events)
        stats.simulated_seconds += simulated
        stats.last_step_at = self.clock()
        return StepOutcome(simulated * config.time_scale, len(scheduled), prefilled, events)

    def _register_full_blocks(self, sequence: Sequence, computed: int) -> None:
        """Make the prompt's blocks full once `computed` tokens are, findable. As vLLM V1 does,
        at scheduling: a sequence admitted later in the same step already shares them, the step
        writing every block's KV before its attention reads any."""
        if not self.config.share_prefix_blocks:  # no prefix cache: no block is ever found again
            return
        hashes = sequence.prompt.block_hashes
        full = min(computed // self.config.block_size, len(hashes))
        for index in range(sequence.registered, full):
            self.kv.register(sequence.blocks[index], hashes[index])
        sequence.registered = max(sequence.registered, full)

    def _sample(self, sequence: Sequence) -> TokenEvent:
        sequence.output_tokens += 1
        finished = sequence.output_tokens >= sequence.max_tokens
        if finished:
            self.running.remove(sequence)
            self.kv.release(sequence.blocks)
            sequence.blocks = []
            self.stats.requests_finished += 1
        return TokenEvent(sequence, sequence.output_tokens - 1, finished)
