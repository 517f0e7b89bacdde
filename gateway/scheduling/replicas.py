"""Which replica of a provider a request goes to. Pure: loads are read before and handed in.

With a cache key: consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam, 2018)
over a rendezvous order, so a shared prefix keeps meeting the replica whose prefix cache holds it,
unless that replica carries more than `bound` times the mean load; then the next in the key's
order, which is where that key's overflow always goes. Without a key: the least-loaded replica.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gateway.routing.policy import rendezvous_order


def choose_replica(
    cache_key: str | None, names: Sequence[str], loads: Sequence[int], bound: float, rotation: int = 0
) -> int:
    """The index of the replica to use; `loads[i]`: what replica `names[i]` has in flight and queued
    here. `rotation` breaks ties between equally loaded replicas when there is no key."""
    count = len(loads)
    if count == 1:
        return 0
    if cache_key is None:
        return min(range(count), key=lambda i: (loads[i], (i - rotation) % count))
    # The mean counts this request too; the one request of slack keeps a key home at low load,
    # where the bound alone (below two) would already spill it.
    capacity = math.ceil(bound * (sum(loads) + 1) / count) + 1
    order = rendezvous_order(cache_key, names)
    return next((i for i in order if loads[i] < capacity), order[0])
