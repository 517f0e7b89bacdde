"""Response ownership: a Responses request passed through to a provider that stores Responses may
name only the response ids its own team created.

OpenAI and Azure keep each Response (`store: true`, their default) under the provider's
credential, which every team of that provider shares: a `previous_response_id` (or a
`conversation`) naming another team's id would read that team's conversation. Each id an upstream
returns is carried on its usage record, and the usage writer records its team as the owner
(gateway.db.response_owners); until then the process remembers its own recent ids, and with Redis
each id is shared under a key of its own for an hour, written when the reply completes, so that an
immediate follow-up at another process is let through. An id no team of the caller's created is
refused with a 404, as OpenAI answers an unknown id, before anything goes upstream. The gateway
serves no POST /v1/conversations, so no conversation id is ever its team's: every one is refused.

The gateway's own store of Responses (gateway.responses_store) decides first whether a
`previous_response_id` is passed through (this check then applies) or rebuilt for the provider;
translated providers refuse `conversation` themselves (gateway.dialects.responses.request).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import structlog
from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.response_owners import MAX_RESPONSE_ID, owner_of
from gateway.dialects.responses.adapter import serves_responses_natively
from gateway.errors import InvalidRequest, ServiceUnavailable, UnknownResponse
from gateway.redis.client import RedisClient
from gateway.settings import Provider

log = structlog.get_logger("gateway.responses")

RECENT_IDS = 10_000  # the ids this process saw last: a follow-up there reads nothing else
SHARED_TTL_S = 3600  # long past the metering writer's lag, short enough to keep Redis small


def owner_key(response_id: str) -> str:
    return f"gateway:response-owner:{response_id}"


def named_ids(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(param, id) for each stored object the request body names: its previous response, its
    conversation (an id, or an object with one)."""
    named: list[tuple[str, str]] = []
    previous = body.get("previous_response_id")
    if isinstance(previous, str):
        named.append(("previous_response_id", previous))
    conversation = body.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
        if not isinstance(conversation, str):
            raise InvalidRequest("conversation.id must be a string", param="conversation")
    if isinstance(conversation, str):
        named.append(("conversation", conversation))
    return named


def refusal(param: str, object_id: str) -> UnknownResponse:
    what = "Previous response" if param == "previous_response_id" else "Conversation"
    code = "previous_response_not_found" if param == "previous_response_id" else "conversation_not_found"
    return UnknownResponse(
        f"{what} with id '{object_id[:MAX_RESPONSE_ID]}' not found.", param=param, code=code
    )


class ResponseOwners:
    """The check before a Responses request goes upstream, and the note of each id it returned."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        redis: RedisClient | None,
        *,
        recent: int = RECENT_IDS,
        shared_ttl_s: int = SHARED_TTL_S,
    ) -> None:
        self._sessions = sessions  # the primary's: an owner row is read as soon as it is written
        self._redis = redis
        self._recent: OrderedDict[str, str] = OrderedDict()
        self._recent_size = recent
        self._shared_ttl_s = shared_ttl_s

    async def check(self, provider: Provider, team_id: str, body: dict[str, Any]) -> None:
        """Refuse (404) an id the body names that `team_id` did not create, when `provider` is
        sent the request as it came (its own Responses API)."""
        named = named_ids(body)
        if not named or not serves_responses_natively(provider):
            return  # nothing stored is named, or translated (the adapter refuses both fields)
        for param, object_id in named:
            if await self._owner(object_id) != team_id:
                raise refusal(param, object_id)

    async def remember(self, team_id: str, response_id: str) -> None:
        """`team_id` created `response_id`: known here at once, and to every process through Redis
        (the usage record makes it durable)."""
        if len(response_id) > MAX_RESPONSE_ID:
            return
        self._note(response_id, team_id)
        if self._redis is None:
            return
        try:
            await self._redis.set(owner_key(response_id), team_id, ex=self._shared_ttl_s)
        except (RedisError, OSError) as exc:  # other processes find it in the database once written
            log.warning("response_owner_not_shared", error=type(exc).__name__)

    def _note(self, response_id: str, team_id: str) -> None:
        self._recent[response_id] = team_id
        self._recent.move_to_end(response_id)
        if len(self._recent) > self._recent_size:
            self._recent.popitem(last=False)

    async def _owner(self, response_id: str) -> str | None:
        if len(response_id) > MAX_RESPONSE_ID:
            return None  # never recorded
        owner = self._recent.get(response_id)
        if owner is not None:
            return owner
        owner = await self._shared_owner(response_id)
        if owner is None:
            try:
                async with self._sessions() as session:
                    owner = await owner_of(session, response_id)
            except (SQLAlchemyError, OSError) as exc:
                raise ServiceUnavailable(
                    "Cannot check who created the response named in this request: the database is "
                    "unreachable. Retry later."
                ) from exc
        if owner is not None:  # an owner never changes: keep it (an unknown id may be written soon)
            self._note(response_id, owner)
        return owner

    async def _shared_owner(self, response_id: str) -> str | None:
        if self._redis is None:
            return None
        try:
            owner = await self._redis.get(owner_key(response_id))
        except (RedisError, OSError) as exc:  # the database still knows every written id
            log.debug("response_owner_unread", error=type(exc).__name__)
            return None
        if owner is None:
            return None
        return owner.decode() if isinstance(owner, bytes) else str(owner)
