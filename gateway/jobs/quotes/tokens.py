"""A batch's prompts counted as the deployment counts them, and the part its prefix cache would serve.

A deployment's `tokenizer` (the catalog) names how: an OpenAI BPE (`o200k_base`, `cl100k_base`,
from `bpe-openai`, whose data ships in its wheel: nothing is downloaded), or `chars4`, four
characters a token of each message rendered as `<|role|>text` and a newline (the simulated vLLM's
count). Unset, an OpenAI or Azure deployment of a model the BPE package knows uses that model's
BPE; any other deployment gets the gateway's own estimate (~4 bytes a token of the prompt's text,
`gateway.providers.base.estimated_tokens`), and the quote says so.

The cached part is predicted by playing the lines in the order the runner sends them (grouped by
prompt prefix, `gateway.jobs.ledger.pending_lines`) against a prefix cache that forgets nothing:
a line's leading blocks that an earlier line already had are cached, in whole blocks of the
cache's size, and at least one token of every prompt is computed. A server that evicts a prefix
before its group is done caches less than this.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.jobs.line_sender import estimated_prompt
from gateway.settings import ProviderKind
from gateway.settings.catalog import DeploymentSpec, Provider

ESTIMATE = "estimate"
CHARS4 = "chars4"
BPE_NAMES = ("o200k_base", "cl100k_base")
BPE_KINDS = (ProviderKind.OPENAI, ProviderKind.AZURE)
# OpenAI's chat format: each message costs 3 tokens besides its text, a name 1 more, the reply 3
MESSAGE_TOKENS, NAME_TOKENS, REPLY_TOKENS = 3, 1, 3


@dataclass(frozen=True, slots=True)
class CacheRule:
    """A prefix cache: it holds whole blocks of `block` tokens, of prompts of `minimum` tokens or more."""

    block: int
    minimum: int = 0


# OpenAI caches prompts of 1,024 tokens or more, in steps of 128; vLLM in blocks of 16 tokens.
OPENAI_CACHE = CacheRule(block=128, minimum=1024)
BLOCK_CACHE = CacheRule(block=16)


@dataclass(frozen=True, slots=True)
class Prompt:
    """One line's prompt: its tokens, and the chained hashes of its full cache blocks."""

    tokens: int
    blocks: tuple[bytes, ...]


class PromptCounter(Protocol):
    @property
    def name(self) -> str: ...  # the tokenizer's name, or ESTIMATE

    @property
    def cache(self) -> CacheRule: ...

    def prompt(self, body: dict[str, Any], raw: str) -> Prompt: ...


def message_text(content: Any) -> str:
    """The text of a message's content: a string, or the text of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(message_text(part) for part in content)
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return str(content["text"])
    return ""


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []


def chained(pieces: Iterable[bytes]) -> tuple[bytes, ...]:
    """Each block's hash over the previous one's: equal hashes mean equal prefixes."""
    previous, hashes = b"", []
    for piece in pieces:
        previous = hashlib.blake2b(previous + piece, digest_size=16).digest()
        hashes.append(previous)
    return tuple(hashes)


@dataclass(frozen=True, slots=True)
class CharsCounter:
    """Four characters a token of `<|role|>text\\n` per message (the simulated vLLM's count)."""

    name: str = CHARS4
    cache: CacheRule = BLOCK_CACHE
    chars_per_token: int = 4

    def prompt(self, body: dict[str, Any], raw: str) -> Prompt:
        text = "".join(f"<|{m.get('role')}|>{message_text(m.get('content'))}\n" for m in _messages(body))
        tokens = max(1, math.ceil(len(text) / self.chars_per_token))
        width = self.cache.block * self.chars_per_token
        full = tokens // self.cache.block
        return Prompt(tokens, chained(text[i * width : (i + 1) * width].encode() for i in range(full)))


@dataclass(frozen=True, slots=True)
class BpeCounter:
    """An OpenAI BPE over the chat format's parts (role, name, text of each message)."""

    name: str
    cache: CacheRule = OPENAI_CACHE

    def prompt(self, body: dict[str, Any], raw: str) -> Prompt:
        encoding = _encoding(self.name)
        ids: list[int] = []
        for message in _messages(body):
            ids += [0] * MESSAGE_TOKENS  # the format's own tokens: the same in every message
            ids += encoding.encode_ordinary(str(message.get("role", "")))
            if isinstance(message.get("name"), str):
                ids += [0] * NAME_TOKENS + encoding.encode_ordinary(message["name"])
            ids += encoding.encode_ordinary(message_text(message.get("content")))
        tools = body.get("tools")
        if tools:
            ids += encoding.encode_ordinary(repr(tools))
        ids += [0] * REPLY_TOKENS
        return Prompt(len(ids), _id_blocks(ids, self.cache.block))


@dataclass(frozen=True, slots=True)
class EstimateCounter:
    """The gateway's estimate (~4 bytes a token of the prompt's text), as any request without
    upstream counts is metered; its blocks are 16 tokens of that text."""

    max_messages: int
    name: str = ESTIMATE
    cache: CacheRule = BLOCK_CACHE

    def prompt(self, body: dict[str, Any], raw: str) -> Prompt:
        tokens = estimated_prompt(raw, self.max_messages)
        text = "".join(message_text(m.get("content")) for m in _messages(body)).encode()
        width = self.cache.block * 4
        full = min(tokens, len(text) // 4) // self.cache.block
        return Prompt(tokens, chained(text[i * width : (i + 1) * width] for i in range(full)))


def _id_blocks(ids: Sequence[int], block: int) -> tuple[bytes, ...]:
    full = len(ids) // block
    return chained(
        b"".join(token.to_bytes(4, "little") for token in ids[i * block : (i + 1) * block])
        for i in range(full)
    )


def _bpe() -> Any:
    """The BPE package, imported on a quote's first use of it: importing it takes half a second,
    which no process start and no other command should pay."""
    import bpe_openai  # type: ignore[import-untyped]

    return bpe_openai


@functools.cache
def _encoding(name: str) -> Any:
    """The BPE, loaded once a process (its ranks take most of a second to build)."""
    return _bpe().get_encoding(name)


def tokenizer_name(spec: DeploymentSpec, provider: Provider) -> str:
    """The deployment's tokenizer: as configured, else its model's BPE where it is an OpenAI
    model, else the estimate."""
    if spec.tokenizer is not None:
        return spec.tokenizer
    if provider.kind in BPE_KINDS:
        try:
            name = _bpe().encoding_name_for_model(spec.model)
        except Exception:  # a model the package does not know
            return ESTIMATE
        return name if name in BPE_NAMES else ESTIMATE
    return ESTIMATE


def counter_for(name: str, max_messages: int) -> PromptCounter:
    if name == CHARS4:
        return CharsCounter()
    if name in BPE_NAMES:
        return BpeCounter(name)
    return EstimateCounter(max_messages)


def cached_tokens(prompts: Iterable[Prompt], cache: CacheRule) -> list[int]:
    """Each prompt's cached tokens, the prompts taken in order against a cache that forgets
    nothing: its leading blocks an earlier prompt had, leaving at least one token to compute."""
    seen: set[bytes] = set()
    cached = []
    for prompt in prompts:
        limit = (prompt.tokens - 1) // cache.block
        hits = 0
        if prompt.tokens >= cache.minimum:
            for block in prompt.blocks[:limit]:
                if block not in seen:
                    break
                hits += 1
        cached.append(hits * cache.block)
        seen.update(prompt.blocks)
    return cached
