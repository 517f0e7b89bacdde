"""A replica's capacity learned from what the server publishes. Pure: readings and requests are
handed in, nothing is read here.

vLLM labels `vllm:cache_config_info` with its KV cache's size (`num_gpu_blocks` x `block_size`
tokens). `LearnedCapacity` admits a request while what every request in flight may hold at its
peak (prompt and its whole `max_tokens`, a block of rounding each) stays within `kv_cache_high` of
that size, less what requests of other clients hold there (counted from the server's running and
waiting counts beyond this process's). The rest is learned at each read:

- **Whether the server shares a prefix's blocks** among its running sequences. While all of this
  process's requests are running there and nothing waits, the KV cache the server reports used is
  compared with two predictions, the shared prefixes counted once and counted per request: above
  their geometric mean is a vote against sharing, within 10% of the shared one at its peak a vote
  for it, and between the two no vote (prompts part-way through a chunked prefill hold part of
  their blocks); nor when the predictions differ by less than half. Two votes in a row for
  sharing are needed to count a prefix once, one against is enough to stop: the costly mistake is
  to believe in sharing that is not there. Until then a prefix is counted per request. The
  `enable_prefix_caching` label is not trusted alone: a server may cache prefixes without sharing
  the blocks of running sequences.
- **How many real tokens a prompt estimate is** (the estimate is the body's bytes / 4): the
  upstream's prompt counts of the requests that ended, real over estimated tokens summed with a
  decay (a long prompt weighs more than a short one, whose estimate is mostly JSON), bounded.
- **The server's usage.** A read that shows the KV cache used to `kv_cache_high` already holds
  dispatch until the next read, whatever the prediction says: prompts longer than estimated (the
  ratio below is learned from the requests that ended, not from those running).
- **Preemptions.** When `vllm:num_preemptions_total` moves, the fill backs off at once (x0.9 per
  read that saw it move while this process had requests there, down to half) and sharing is no
  longer assumed; each read without one gives back a little (+0.01), so the fill creeps back toward
  `kv_cache_high` over a second or more.
- **A server held by its sequence limit** (`max_num_seqs`): requests wait there at five reads in a
  row with the same number running, while the KV cache has room (a server slowed by its prefill
  budget also leaves requests waiting, but its running count moves as they finish). That number is then the server's
  limit, and this process keeps at most that many plus `max(target_waiting, 1)` in flight there,
  counting other clients' requests too: fed, with no deep queue there. A read with more running
  forgets it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.scheduling.in_flight import InFlight
from gateway.scheduling.ticket import Ticket

BACKOFF = 0.9  # the fill's factor at each read that saw the preemption counter move
MIN_FILL = 0.5
RECOVER = 0.01  # given back to the fill at each read without a preemption
SLOT_LIMIT_READS = 5  # reads in a row with requests waiting and the same number running
SHARING_VOTES = 2  # reads in a row that must show sharing before a prefix counts once
DECISIVE = 1.5  # the predictions must differ by this factor for a read to vote
SHARED_SLACK = 1.1  # a vote for sharing: no more used than the shared prediction at its peak, +10%
RATIO_BOUNDS = (0.25, 4.0)  # real prompt tokens per estimated token, at most this far off
# The ratio is real over estimated tokens summed with decay, so that a long prompt weighs more than
# a short one (whose estimate is mostly the body's JSON); it starts from 1 as if this many tokens
# had been seen, so a first short request cannot swing it
RATIO_PRIOR_TOKENS = 16_384
RATIO_DECAY = 0.98  # each ended request's sums are kept at this weight at the next one


@dataclass(frozen=True, slots=True)
class LoadReading:
    """One read of a replica's /metrics, each value summed over the server's series (one per model,
    engine...), the KV-cache usage the highest of them; None where the server does not report it."""

    waiting: float  # requests queued at the server
    running: float
    kv_usage: float | None  # 0..1
    read_at: float  # the reader's clock at the read
    kv_tokens: int | None = None  # num_gpu_blocks x block_size, from vllm:cache_config_info
    block_size: int | None = None
    preemptions: float | None = None  # the preemption counter


class LearnedCapacity:
    def __init__(self, kv_cache_high: float, target_waiting: int) -> None:
        self.kv_cache_high = kv_cache_high
        self.target_waiting = target_waiting
        self.kv_tokens: int | None = None  # None: the server has not said; the model holds nothing
        self.block_size = 16
        self.shares_prefix = False
        self._sharing_votes = 0
        self.prompt_ratio = 1.0
        self._estimated_sum = self._real_sum = float(RATIO_PRIOR_TOKENS)
        self.fill = 1.0
        self.preemptions: float | None = None
        self.foreign = 0.0  # tokens held at the server by requests this process did not send
        self.others = 0  # those requests, running or waiting there
        self.slot_limit: int | None = None
        self._queued_running: float | None = None  # running at the last read where requests waited
        self._queued_reads = 0  # reads in a row that showed it
        self.budget = 0.0  # the tokens this process may have in flight at their peak
        self.full = False  # the server said its KV cache is used to kv_cache_high already

    # The hot path: one request at a time

    def peak(self, held: InFlight) -> float:
        """The KV tokens the requests in flight may hold at once, at their peak (each one's last
        block half empty on average)."""
        prompt = held.prompt - (held.prefix_each - held.prefix_once if self.shares_prefix else 0)
        return self.prompt_ratio * prompt + held.output + held.count * self.block_size / 2

    def need(self, ticket: Ticket, held: InFlight) -> float:
        """What `ticket` adds to `peak`."""
        prompt = ticket.prompt_tokens
        if self.shares_prefix and held.holds_prefix(ticket):
            prompt -= min(ticket.prefix_tokens, prompt)
        return self.prompt_ratio * prompt + ticket.tokens - ticket.prompt_tokens + self.block_size / 2

    def admits(self, ticket: Ticket, held: InFlight, share: float = 1.0) -> bool:
        """Whether `ticket` may go now, on top of `held`; `share`: the part of the budget its class
        may fill (batch work leaves the interactive reserve while interactive work is about)."""
        if self.kv_tokens is None:
            return True
        limit = self.slot_limit
        if limit is not None and held.count + self.others >= limit + max(self.target_waiting, 1):
            return False
        if held.count == 0 and self.others == 0:  # alone it always goes: it could never go otherwise
            return True
        if self.full:  # the estimates were short: what the server says wins until the next read
            return False
        return self.peak(held) + self.need(ticket, held) <= self.budget * share

    def learn_prompt(self, estimated: int, real: int) -> None:
        """A request ended: its prompt was `real` tokens where `estimated` were counted."""
        if estimated <= 0 or real <= 0:
            return
        self._estimated_sum = self._estimated_sum * RATIO_DECAY + estimated
        self._real_sum = self._real_sum * RATIO_DECAY + real
        low, high = RATIO_BOUNDS
        self.prompt_ratio = min(max(self._real_sum / self._estimated_sum, low), high)

    # Each read

    def observe(self, reading: LoadReading, held: InFlight) -> None:
        """Learn from one read of the server's metrics, `held` being what is in flight here now."""
        if reading.kv_tokens:
            self.kv_tokens = reading.kv_tokens
            self.block_size = reading.block_size or self.block_size
        if self.kv_tokens is None:
            return
        self._count_preemptions(reading.preemptions, held)
        used = None if reading.kv_usage is None else reading.kv_usage * self.kv_tokens
        self.full = reading.kv_usage is not None and reading.kv_usage >= self.kv_cache_high
        others = reading.running + reading.waiting - held.count
        self.others = max(0, math.ceil(others))
        self.foreign = 0.0
        if others > 0:  # another client's requests: each as much as a running request holds
            if used is not None and reading.running:
                self.foreign = others * used / reading.running
            elif held.count:
                self.foreign = others * self.peak(held) / held.count
        elif used is not None and reading.waiting == 0:
            self._vote_sharing(used, reading.running, held)
        self.budget = self.kv_tokens * self.kv_cache_high * self.fill - self.foreign
        self._find_slot_limit(reading, held)

    def _count_preemptions(self, counter: float | None, held: InFlight) -> None:
        if counter is None:
            return
        # Only preemptions among this process's requests move its fill: another client's flood on
        # an idle replica says nothing about what this process sends
        if self.preemptions is not None and counter > self.preemptions and held.count:
            self.fill = max(MIN_FILL, self.fill * BACKOFF)
            self.shares_prefix, self._sharing_votes = False, 0
        else:  # none since the last read (or the server restarted and its counter with it)
            self.fill = min(1.0, self.fill + RECOVER)
        self.preemptions = counter

    def _vote_sharing(self, used: float, running: float, held: InFlight) -> None:
        """All of this process's requests run there (give or take the ones on their way) and no
        other's: which prediction of its KV use is nearer what the server says it uses?"""
        ours = held.count
        if ours < 2 or held.prefix_each <= held.prefix_once or ours - running > max(1, ours // 16):
            return
        generated = held.output / 2  # running sequences are on average halfway through
        shared = self.prompt_ratio * (held.prompt - held.prefix_each + held.prefix_once) + generated
        whole = self.prompt_ratio * held.prompt + generated
        if whole < DECISIVE * shared:
            return  # too close to tell, and too close to matter
        seen = running / ours  # the ones still on their way hold nothing there yet
        if used >= math.sqrt(shared * whole) * seen:
            self.shares_prefix, self._sharing_votes = False, 0
        elif used <= SHARED_SLACK * (shared + held.output / 2) * seen:
            self._sharing_votes += 1
            self.shares_prefix = self._sharing_votes >= SHARING_VOTES
        # Between the two: long prompts part-way through a chunked prefill hold part of their
        # blocks, which looks like sharing to the boundary alone; no vote

    def _find_slot_limit(self, reading: LoadReading, held: InFlight) -> None:
        running = reading.running
        if self.slot_limit is not None and running > self.slot_limit:
            self.slot_limit = None  # it runs more than that after all
        room = held.count == 0 or self.peak(held) * (1 + 1 / held.count) < self.budget
        if reading.waiting > 0 and room and running >= 1:
            same = self._queued_running == running
            self._queued_reads = self._queued_reads + 1 if same else 1
            self._queued_running = running
            if self._queued_reads >= SLOT_LIMIT_READS:
                self.slot_limit = int(running)
        else:
            self._queued_running, self._queued_reads = None, 0
