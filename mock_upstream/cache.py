"""The mock's prompt cache: which prefixes it has seen, and the cached-token counts that follow.

The first request with a given prefix writes it (Anthropic reports cache_creation_input_tokens);
every later one reads it (cache_read_input_tokens, or OpenAI's prompt_tokens_details.cached_tokens).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from mock_upstream.behaviour import MockBehaviour
from mock_upstream.prompt import PromptShape

MAX_PREFIXES = 100_000


@dataclass(frozen=True, slots=True)
class PromptUsage:
    """A prompt's tokens; `cache_read` and `cache_write` are parts of `tokens`."""

    tokens: int
    cache_read: int = 0
    cache_write: int = 0


class PromptCache:
    """Remembers prefixes, least recently used first out, so memory stays bounded."""

    def __init__(self, capacity: int = MAX_PREFIXES) -> None:
        self._seen: OrderedDict[bytes, None] = OrderedDict()
        self._capacity = capacity

    def account(self, shape: PromptShape, behaviour: MockBehaviour) -> PromptUsage:
        """The prompt's usage for this request, and remember its prefix for the next ones."""
        tokens = shape.tokens if behaviour.prompt_tokens is None else behaviour.prompt_tokens
        if behaviour.cached_tokens is not None:
            return PromptUsage(tokens, cache_read=min(behaviour.cached_tokens, tokens))
        if shape.prefix_key is None:
            return PromptUsage(tokens)
        prefix_tokens = min(shape.prefix_tokens, tokens)
        if self._remember(shape.prefix_key):
            return PromptUsage(tokens, cache_read=prefix_tokens)
        return PromptUsage(tokens, cache_write=prefix_tokens)

    def clear(self) -> None:
        self._seen.clear()

    def _remember(self, key: bytes) -> bool:
        """Whether `key` was seen before; it is now the most recently used."""
        if key in self._seen:
            self._seen.move_to_end(key)
            return True
        self._seen[key] = None
        if len(self._seen) > self._capacity:
            self._seen.popitem(last=False)
        return False
