"""The simulated KV cache: a pool of fixed-size blocks, reference-counted, with a prefix cache
(full blocks keyed by the hash chain of their tokens, unreferenced ones evicted least recently
used first)."""

from __future__ import annotations

from collections import OrderedDict, deque


class KVCache:
    """`num_blocks` blocks; a block is in use (referenced), cached and evictable, or free."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self._refs = [0] * num_blocks
        self._free: deque[int] = deque(range(num_blocks))  # blocks holding nothing worth keeping
        self._evictable: OrderedDict[int, bytes] = OrderedDict()  # unreferenced cached blocks, LRU first
        self._by_hash: dict[bytes, int] = {}
        self._hash_of: dict[int, bytes] = {}

    @property
    def used_blocks(self) -> int:
        return self.num_blocks - len(self._free) - len(self._evictable)

    def allocate(self, count: int) -> list[int] | None:
        """`count` fresh blocks (free ones first, then evicting cached ones), or None if too few."""
        if count > len(self._free) + len(self._evictable):
            return None
        blocks: list[int] = []
        for _ in range(count):
            if self._free:
                block = self._free.popleft()
            else:
                block, block_hash = self._evictable.popitem(last=False)
                del self._by_hash[block_hash], self._hash_of[block]
            self._refs[block] = 1
            blocks.append(block)
        return blocks

    def lookup(self, block_hashes: tuple[bytes, ...]) -> list[int]:
        """The cached blocks of the longest cached prefix of `block_hashes`, now referenced."""
        blocks: list[int] = []
        for block_hash in block_hashes:
            block = self._by_hash.get(block_hash)
            if block is None:
                break
            if self._refs[block] == 0:
                del self._evictable[block]
            self._refs[block] += 1
            blocks.append(block)
        return blocks

    def register(self, block: int, block_hash: bytes) -> None:
        """Make a full block findable by its hash (the first block with a given hash is kept)."""
        if block_hash not in self._by_hash:
            self._by_hash[block_hash] = block
            self._hash_of[block] = block_hash

    def release(self, blocks: list[int]) -> None:
        """Drop one reference to each block; a sequence's tail is released first, so evicted first."""
        for block in reversed(blocks):
            self._refs[block] -= 1
            if self._refs[block]:
                continue
            block_hash = self._hash_of.get(block)
            if block_hash is None:
                self._free.append(block)
            else:
                self._evictable[block] = block_hash
