"""A prompt's leading part as digests: what replica choice matches, and what names a shared prefix.

Requests that share a prefix should meet on the replica whose prefix (KV) cache holds it, even when
the client names no cache key. Two ways are known from other routers:

- SGLang's router keeps a radix tree of the prompt texts each worker served and sends a request to
  the worker with the longest matching prefix. It keeps prompt text in memory.
- llm-d's prefix scorer cuts the prompt into fixed-size blocks, hashes them as a chain (each
  block's digest covers every block before it, so one digest names a whole leading part), and
  scores each server by the longest run of leading blocks it recently served.

The gateway does the second: it keeps digests only, never text; a lookup is one dictionary probe
per block; and the chain is cheap to make once on the hot path (one pass over a bounded window of
the prompt, `scheduling.prefix_affinity_tokens`). The chain is seeded with the team id, so two
teams never share a digest. `gateway.scheduling.replicas` scores replicas with it.

Beside the chain, the prompt's *shared part* gets a digest of its own: the leading turns that a
workload repeats (the tools and every message before the last user message, or the prefix up to
the last `cache_control` breakpoint). It names the prefix on the scheduling ticket (`Ticket.prefix`,
the same in every process) and is where a cold prefix is placed (rendezvous hashing on it), so that
every gateway process sends a new shared prompt to the same replica without talking to the others.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from gateway.providers.base import estimated_tokens
from gateway.providers.cache_hints import last_message_breakpoint
from gateway.schemas.anthropic import ContentBlock, MessagesRequest
from gateway.schemas.openai import ChatCompletionRequest, ChatMessage, CompletionRequest
from gateway.schemas.responses import InputItem, ResponsesRequest

# About 256 tokens: a prefix shorter than that saves little prefill; longer blocks would be fewer
# digests to make, but would blur where two prompts part.
BLOCK_BYTES = 1024
_SEPARATOR = "\x1f"  # between pieces, so that "ab" + "c" and "a" + "bc" differ


@dataclass(frozen=True, slots=True)
class PromptPrefix:
    """The digests of a prompt's leading blocks (`blocks[i]` covers blocks 0..i), and its shared
    part: a digest naming it (None when shorter than a block) and its size in bytes."""

    blocks: tuple[bytes, ...] = ()
    shared: str | None = None
    shared_bytes: int = 0

    @property
    def shared_tokens(self) -> int:
        return estimated_tokens(self.shared_bytes) if self.shared is not None else 0

    @property
    def shared_blocks(self) -> int:
        """The whole blocks inside the shared part (or the whole prompt, without one)."""
        return self.shared_bytes // BLOCK_BYTES if self.shared is not None else len(self.blocks)

    @property
    def anchor(self) -> str | None:
        """Where a prefix no replica has served yet goes (rendezvous hashing): its shared part,
        else its first block; None for a prompt shorter than a block."""
        if self.shared is not None:
            return self.shared
        return self.blocks[0].hex() if self.blocks else None


NO_PREFIX = PromptPrefix()

Piece = str | bytes
Turn = Iterable[Piece]


class _Chain:
    """Feeds pieces of text into one running digest, noting it at each block's end."""

    def __init__(self, team_id: str, limit: int) -> None:
        self._hasher = hashlib.sha256(team_id.encode() + b"\x00")
        self.limit = limit
        self.size = 0
        self.blocks: list[bytes] = []

    @property
    def full(self) -> bool:
        return self.size >= self.limit

    def feed(self, piece: Piece) -> None:
        room = self.limit - self.size
        if room <= 0:
            return
        # A text is cut before it is encoded, so a long one costs only the window's bytes.
        data = (piece[:room] + _SEPARATOR).encode() if isinstance(piece, str) else piece + b"\x1f"
        view = memoryview(data)[:room]
        while view:
            take = BLOCK_BYTES - self.size % BLOCK_BYTES
            self._hasher.update(view[:take])
            self.size += min(take, len(view))
            view = view[take:]
            if self.size % BLOCK_BYTES == 0:
                self.blocks.append(self._hasher.copy().digest()[:16])

    def digest(self) -> str:
        return self._hasher.hexdigest()[:32]


def prompt_prefix(team_id: str, typed: msgspec.Struct, window_tokens: int) -> PromptPrefix:
    """The prefix digests of a request's prompt (from its typed view), over at most `window_tokens`
    leading tokens (~4 bytes each); NO_PREFIX when the window is 0 or the endpoint has no prompt
    worth caching (embeddings)."""
    turns = _turns(typed)
    if turns is None or window_tokens <= 0:
        return NO_PREFIX
    leading, shared_turns = turns
    chain = _Chain(team_id, window_tokens * 4)
    _feed(chain, leading[:shared_turns])
    # A shared part longer than the window is named by the window's worth of it.
    shared: str | None = chain.digest()
    shared_bytes = chain.size
    _feed(chain, leading[shared_turns:])
    if shared_bytes < BLOCK_BYTES:
        shared, shared_bytes = None, 0
    return PromptPrefix(tuple(chain.blocks), shared, shared_bytes)


def _feed(chain: _Chain, turns: list[Turn]) -> None:
    for turn in turns:
        if chain.full:
            return
        for piece in turn:
            chain.feed(piece)


def _turns(typed: msgspec.Struct) -> tuple[list[Turn], int] | None:
    """The prompt as turns in the order a server renders them (tools first), and how many leading
    turns are its shared part; None for a request without a cacheable prompt."""
    if isinstance(typed, ChatCompletionRequest):
        return _chat_turns(typed)
    if isinstance(typed, MessagesRequest):
        return _messages_turns(typed)
    if isinstance(typed, ResponsesRequest):
        return _responses_turns(typed)
    if isinstance(typed, CompletionRequest) and isinstance(typed.prompt, str):
        return [[typed.prompt]], 0
    return None


def _json(value: Any) -> bytes:
    return msgspec.json.encode(value)


def _shared_turns(roles: list[str | None], breakpoint_: int | None, tool_turns: int) -> int:
    """The leading turns shared with other requests: up to the last breakpoint when there is one,
    else every turn before the last user turn."""
    if breakpoint_ is not None:
        return tool_turns + breakpoint_ + 1
    last_user = next((i for i in reversed(range(len(roles))) if roles[i] == "user"), len(roles) - 1)
    return tool_turns + max(last_user, 0)


def _chat_turns(chat: ChatCompletionRequest) -> tuple[list[Turn], int]:
    tools: list[Turn] = [[_json(chat.tools)]] if chat.tools else []
    turns = tools + [_chat_message(m) for m in chat.messages]
    breakpoint_ = last_message_breakpoint(chat.messages)
    return turns, _shared_turns([m.role for m in chat.messages], breakpoint_, len(tools))


def _chat_message(message: ChatMessage) -> Iterator[Piece]:
    yield message.role
    if isinstance(message.content, str):
        yield message.content
    else:
        for part in message.content or ():
            yield part.text if part.text is not None else _json(part)
    if message.tool_calls:
        yield _json(message.tool_calls)
    if message.tool_call_id:
        yield message.tool_call_id


def _messages_turns(request: MessagesRequest) -> tuple[list[Turn], int]:
    leading: list[Turn] = [[_json(request.tools)]] if request.tools else []
    if request.system is not None:
        leading.append(_blocks("system", request.system))
    turns = leading + [_blocks(m.role, m.content) for m in request.messages]
    return turns, _shared_turns([m.role for m in request.messages], None, len(leading))


def _blocks(role: str, content: str | list[ContentBlock]) -> Iterator[Piece]:
    yield role
    if isinstance(content, str):
        yield content
        return
    for block in content:
        yield block.text if block.text is not None else _json(block)


def _responses_turns(request: ResponsesRequest) -> tuple[list[Turn], int]:
    leading: list[Turn] = [[_json(request.tools)]] if request.tools else []
    if request.instructions:
        leading.append(["instructions", request.instructions])
    if isinstance(request.input, str) or request.input is None:
        return [*leading, ["user", request.input or ""]], len(leading)
    turns = leading + [_input_item(item) for item in request.input]
    return turns, _shared_turns([item.role or item.type for item in request.input], None, len(leading))


def _input_item(item: InputItem) -> Iterator[Piece]:
    yield item.role or item.type or ""
    if isinstance(item.content, str):
        yield item.content
    elif item.content is not None:
        for part in item.content:
            yield part.text if part.text is not None else _json(part)
    for value in (item.name, item.arguments, item.output):
        if value is not None:
            yield value if isinstance(value, str) else _json(value)
