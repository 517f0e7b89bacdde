"""Conversation affinity (SPEC section 3): the requests of one conversation prefer the deployment
and replica that served it last, so that its prompt cache stays warm there.

A conversation is named by the client: a `prompt_cache_key` (chat completions, Responses), a
`previous_response_id` chain (Responses: each answer's id names the conversation's next turn), or
an Anthropic `metadata.user_id` session (/v1/messages). Its name is scoped by team.

A preference, never a pin: it is followed only while that deployment is eligible and healthy
(`gateway.routing.policy.plan_route`) and that replica within the load bound and not failing
(`gateway.scheduling.replicas`); a request of a batch follows its batch's pin instead, and a
conversation is forgotten after `scheduling.conversation_ttl_s` without a request.

Kept in each process's memory, least recently used first out: a conversation whose requests reach
different gateway processes is remembered by each of them separately, so its first request at a
process goes where the prefix or key affinity sends it (the same replica for the same cache key
in every process). Sharing it through Redis would cost a round trip on every conversation's
request for what the rendezvous order mostly gives already.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from gateway.schemas.anthropic import MessagesRequest
from gateway.schemas.openai import ChatCompletionRequest
from gateway.schemas.responses import ResponsesRequest

# Conversations remembered per process: a few hundred bytes each.
CONVERSATIONS = 100_000


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a conversation was served last: a deployment id and its replica's base URL."""

    deployment: str
    replica: str | None


@dataclass(frozen=True, slots=True)
class Conversation:
    """A request's conversation: `key`, what it is looked up by; `then`, where it was last served."""

    key: str
    then: Placement | None = None


def conversation_key(team_id: str, typed: msgspec.Struct) -> str | None:
    """The team-scoped name of the conversation a request belongs to, if it names one."""
    name: str | None = None
    if isinstance(typed, ChatCompletionRequest) and typed.prompt_cache_key:
        name = "key:" + typed.prompt_cache_key
    elif isinstance(typed, ResponsesRequest):
        if typed.previous_response_id:
            name = "response:" + typed.previous_response_id
        elif typed.prompt_cache_key:
            name = "key:" + typed.prompt_cache_key
    elif isinstance(typed, MessagesRequest) and typed.metadata is not None and typed.metadata.user_id:
        name = "user:" + typed.metadata.user_id
    return None if name is None else scoped(team_id, name)


def next_turn_key(team_id: str, response_id: str) -> str:
    """The name of the conversation whose next request gives `response_id` as previous_response_id."""
    return scoped(team_id, "response:" + response_id)


class _Answer(msgspec.Struct):
    id: str | None = None


_ANSWER = msgspec.json.Decoder(_Answer)


def answer_id(body: bytes) -> str | None:
    """The id of a Responses answer, read from its body (None when it has none to read)."""
    try:
        return _ANSWER.decode(body).id
    except msgspec.DecodeError:
        return None


def scoped(team_id: str, name: str) -> str:
    return hashlib.sha256(f"{team_id}\x00{name}".encode()).hexdigest()[:32]


class Conversations:
    """Where each recent conversation was served last, for `ttl_s` after its last request."""

    def __init__(
        self, ttl_s: float, size: int = CONVERSATIONS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttl_s = ttl_s
        self._size = size
        self._clock = clock
        self._last: OrderedDict[str, tuple[Placement, float]] = OrderedDict()

    def find(self, key: str | None) -> Conversation | None:
        if key is None:
            return None
        found = self._last.get(key)
        if found is None or found[1] <= self._clock():
            return Conversation(key)
        return Conversation(key, found[0])

    def remember(self, key: str, placement: Placement) -> None:
        if self._ttl_s <= 0:
            return
        self._last[key] = (placement, self._clock() + self._ttl_s)
        self._last.move_to_end(key)
        while len(self._last) > self._size:
            self._last.popitem(last=False)

    def forget(self, key: str) -> None:
        self._last.pop(key, None)
