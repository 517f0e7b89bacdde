"""Which replica of a provider a request goes to: `choose_replica` is pure (loads and the prefix
matches are read before and handed in); `PrefixIndex` remembers which leading blocks each replica
was recently sent.

With a cache key: consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam, 2018)
over a rendezvous order, so a shared prefix keeps meeting the replica whose prefix cache holds it,
unless that replica carries more than `bound` times the mean load; then the next in the key's
order, which is where that key's overflow always goes.

Without a key, from the prompt's own leading blocks (`gateway.routing.prefix`, llm-d's prefix
scorer): among the replicas within the bound, the one that was recently sent the longest run of
this prompt's leading blocks, counted only when it covers at least half of the prompt's shared part
(a common opening of a few hundred tokens does not pull every prompt onto one replica); ties go by
the rendezvous order of the prompt's shared part. A prefix no replica holds yet goes to the less
loaded of the first two replicas in that order (the power of two choices): every process places a
new shared prompt on one of the same two replicas without asking the others, and the prefixes
spread by load where hashing alone leaves some replicas with more of them. A prompt shorter than a
block goes to the least-loaded replica.

The index is per process and approximate: it records where requests were sent, not what the
server still caches, and forgets the least recently sent blocks past its size. A process that has
not seen a prefix yet still agrees with the others through the rendezvous order.

A conversation (`gateway.routing.conversations`) may name the replica that served it last: it is
preferred while within the bound and not failing.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Collection, Sequence

from gateway.routing.policy import rendezvous_order
from gateway.routing.prefix import PromptPrefix

# Leading-block digests remembered per provider: about 16 MB, some 40,000 prompts of 4k tokens
# (far more than the replicas' prefix caches hold).
INDEX_BLOCKS = 131_072
# How long a replica whose request failed (a retryable error) is passed over: long enough for that
# request's retry and the conversations there to move on, short enough that one transient error
# does not send its keys' traffic, and their cache misses, elsewhere for long.
FAILED_REPLICA_S = 5.0


def choose_replica(
    cache_key: str | None,
    names: Sequence[str],
    loads: Sequence[int],
    bound: float,
    rotation: int = 0,
    *,
    prefix: PromptPrefix | None = None,
    matched: Sequence[int] = (),
    preferred: int | None = None,
    failing: Collection[int] = (),
) -> int:
    """The index of the replica to use; `loads[i]`: what replica `names[i]` has in flight and queued
    here. `matched[i]`: the leading blocks of `prefix` replica i was recently sent (for a request
    without a key). `preferred`: the replica a conversation was served by last. `failing`: replicas
    whose last request failed lately, passed over while another is within the bound. `rotation`
    breaks ties between equally loaded replicas when nothing else decides."""
    count = len(loads)
    if count == 1:
        return 0
    # The mean counts this request too; the one request of slack keeps a key home at low load,
    # where the bound alone (below two) would already spill it.
    capacity = math.ceil(bound * (sum(loads) + 1) / count) + 1
    within = [i for i in range(count) if loads[i] < capacity and i not in failing]
    if preferred is not None and preferred in within:
        return preferred
    key = cache_key if cache_key is not None else (prefix.anchor if prefix is not None else None)
    if key is None:
        return min(within or range(count), key=lambda i: (loads[i], (i - rotation) % count))
    order = rendezvous_order(key, names)
    candidates = [i for i in order if i in within]
    if cache_key is None and prefix is not None:
        held = max(1, math.ceil(prefix.shared_blocks / 2))
        holders = [i for i in candidates if matched and matched[i] >= held]
        if holders:
            return max(holders, key=lambda i: matched[i])  # the first in order among the longest
        # A new prefix: the less loaded of its first two replicas (the power of two choices), so
        # that prefixes spread by load as well as by hash; at most two places for any one prefix.
        return min(candidates[:2], key=lambda i: loads[i], default=order[0])
    return candidates[0] if candidates else order[0]


class PrefixIndex:
    """Which replicas were recently sent which leading blocks: digest -> a bit per replica, least
    recently sent first, at most `size` digests. Digests only: no prompt text is kept."""

    def __init__(self, replicas: int, size: int = INDEX_BLOCKS) -> None:
        self._replicas = replicas
        self._size = size
        self._sent: OrderedDict[bytes, int] = OrderedDict()

    def matched(self, prefix: PromptPrefix) -> list[int]:
        """For each replica, how many of the prefix's leading blocks it was sent, in a row."""
        runs = [0] * self._replicas
        alive = (1 << self._replicas) - 1
        for depth, digest in enumerate(prefix.blocks):
            alive &= self._sent.get(digest, 0)
            if not alive:
                break
            for i in range(self._replicas):
                if alive >> i & 1:
                    runs[i] = depth + 1
        return runs

    def record(self, prefix: PromptPrefix, replica: int) -> None:
        """The request with this prefix was sent to `replica`."""
        bit = 1 << replica
        sent = self._sent
        for digest in prefix.blocks:
            sent[digest] = sent.get(digest, 0) | bit
            sent.move_to_end(digest)
        while len(sent) > self._size:
            sent.popitem(last=False)
