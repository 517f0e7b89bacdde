"""A chat request's prompt as the simulator sees it: a token count and the hash chain of its full
blocks. A token is four characters of the prompt's text (each message rendered as `<|role|>`, its
text and a newline), so requests that open with the same system prompt share their first blocks."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

from mock_upstream.prompt import content_text

CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class PromptBlocks:
    tokens: int
    block_hashes: tuple[bytes, ...]  # one per full block of `block_size` tokens, chained


def prompt_text(messages: list[Any]) -> str:
    parts = []
    for message in messages:
        if isinstance(message, dict):
            parts.append(f"<|{message.get('role')}|>{content_text(message.get('content'))}\n")
    return "".join(parts)


def prompt_blocks(model: str, text: str, block_size: int) -> PromptBlocks:
    """Hash block i over block i-1's hash and block i's text: a block is reused only after the same prefix."""
    tokens = max(1, math.ceil(len(text) / CHARS_PER_TOKEN))
    block_chars = block_size * CHARS_PER_TOKEN
    previous = model.encode()
    hashes = []
    for start in range(0, (tokens // block_size) * block_chars, block_chars):
        previous = hashlib.blake2b(
            previous + text[start : start + block_chars].encode(), digest_size=16
        ).digest()
        hashes.append(previous)
    return PromptBlocks(tokens, tuple(hashes))
