"""A Responses request and the team's stored Responses: the body that goes to a deployment for a
request that continues a Response (`previous_response_id`), and the Response kept once answered.

A continuation is passed through as it came to an upstream that stores the previous Response
itself (its Responses API served natively, by the provider that answered it, as the store or the
ownership table says: gateway.responses_store.owners). Anywhere else the gateway rebuilds the
conversation: the input and output items of every Response of the chain, oldest first, then the
new input. The previous `instructions` are not carried over, as OpenAI documents. A previous
Response the team did not store is a 404, as OpenAI answers an id it does not know.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec

from gateway.dialects.responses.adapter import serves_responses_natively
from gateway.dialects.responses.response import IdSource, random_id
from gateway.errors import InvalidRequest, UnknownResponse
from gateway.responses_store.items import Item, input_items, resent_items
from gateway.responses_store.owners import ResponseOwners, refusal
from gateway.responses_store.store import ResponseStore, StoredRecord
from gateway.settings import Provider

# The events that end a Responses stream with the whole Response, as both the pass-through and
# the translation frame them (an `event:` line, then one `data:` line).
_TERMINAL_EVENTS = (b"event: response.completed\n", b"event: response.incomplete\n")
_ITEMS = msgspec.json.Decoder(list[dict[str, Any]])


def stores(body: dict[str, Any]) -> bool:
    """Whether the request asks for its Response to be kept (`store`, true when absent)."""
    return body.get("store") is not False


def terminal_response(chunk: bytes) -> dict[str, Any] | None:
    """The Response of a stream's last event, if `chunk` (whole SSE frames) holds that event."""
    for marker in _TERMINAL_EVENTS:
        at = chunk.find(marker)
        if at < 0:
            continue
        start = chunk.find(b"data: ", at) + len(b"data: ")
        end = chunk.find(b"\n\n", start)
        try:
            event = msgspec.json.decode(chunk[start : end if end >= 0 else len(chunk)])
        except msgspec.DecodeError:
            return None
        response = event.get("response") if isinstance(event, dict) else None
        return response if isinstance(response, dict) else None
    return None


def refuse_continuation(provider: Provider, body: dict[str, Any]) -> None:
    """Where no store is at hand (a Batch API job's lines), a continuation only an upstream that
    stores Responses can serve: anywhere else a 400, rather than an answer without its context."""
    if body.get("previous_response_id") is not None and not serves_responses_natively(provider):
        raise InvalidRequest(
            "previous_response_id is not supported here: this model's provider is served through its "
            "chat API; send the whole conversation in `input`",
            param="previous_response_id",
            code="unsupported_parameter",
        )


def _own_input(body: dict[str, Any]) -> list[Any]:
    given = body.get("input")
    if isinstance(given, str):
        return [{"role": "user", "content": given}]
    return list(given) if isinstance(given, list) else []


class StoredResponses:
    """The proxy's side of the store: `prepare` before each attempt, `keep` once answered."""

    def __init__(
        self,
        store: ResponseStore,
        owners: ResponseOwners | None,
        *,
        clock: Callable[[], float] = time.time,
        new_id: IdSource = random_id,
    ) -> None:
        self.store = store
        self._owners = owners
        self._clock = clock
        self._new_id = new_id

    # --- before the request goes out ------------------------------------------------------

    async def prepare(self, provider: Provider, team_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """The body to send `provider` for the client's `body`."""
        if self._owners is not None and body.get("conversation") is not None:
            await self._owners.check(provider, team_id, {"conversation": body["conversation"]})
        previous = body.get("previous_response_id")
        if not isinstance(previous, str):
            return body
        native = serves_responses_natively(provider)
        stored = await self.store.get(team_id, previous)
        if native and await self._upstream_keeps(provider, team_id, previous, stored):
            return body
        return await self._rebuilt(body, previous, stored, native=native)

    async def conversation(self, team_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """`body` with the conversation it continues in `input` (the input a translated provider
        is sent): what POST /v1/responses/input_tokens counts."""
        previous = body.get("previous_response_id")
        if not isinstance(previous, str):
            return body
        return await self._rebuilt(body, previous, await self.store.get(team_id, previous), native=False)

    async def _rebuilt(
        self, body: dict[str, Any], previous: str, stored: StoredRecord | None, *, native: bool
    ) -> dict[str, Any]:
        if stored is None:
            raise refusal("previous_response_id", previous)
        chain = await self.store.chain(stored)
        if isinstance(chain, str):
            raise UnknownResponse(
                f"Previous response with id '{previous}' continues response '{chain}', which is no "
                "longer stored.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        history: list[Item] = []
        for record in chain:
            history += _ITEMS.decode(record.input_items)
            output = msgspec.json.decode(record.response).get("output")
            history += [item for item in output or () if isinstance(item, dict)]
        rebuilt = {**body, "input": [*resent_items(history, native=native), *_own_input(body)]}
        if native:  # the upstream does not know the id; a translated Response repeats it back
            del rebuilt["previous_response_id"]
        return rebuilt

    async def _upstream_keeps(
        self, provider: Provider, team_id: str, response_id: str, stored: StoredRecord | None
    ) -> bool:
        """Whether `provider` (served natively) stores `response_id` for this team itself."""
        if stored is not None:
            return stored.upstream_provider == provider.name
        if self._owners is None:
            return False
        try:  # created at this provider before the gateway stored Responses, or kept without store
            await self._owners.check(provider, team_id, {"previous_response_id": response_id})
        except UnknownResponse:
            return False
        return True

    # --- once answered --------------------------------------------------------------------

    def record(
        self, team_id: str, provider: Provider, body: dict[str, Any], document: dict[str, Any]
    ) -> StoredRecord | None:
        """What to store of the Response `document` answering the client's `body`; None if nothing."""
        response_id = document.get("id")
        if not stores(body) or not isinstance(response_id, str) or not response_id:
            return None
        created_at = document.get("created_at")
        previous = body.get("previous_response_id")
        upstream_keeps = serves_responses_natively(provider) and document.get("store") is not False
        return StoredRecord(
            team_id=team_id,
            response_id=response_id,
            created_at=float(created_at) if isinstance(created_at, int | float) else self._clock(),
            model=str(body.get("model", "")),
            previous_response_id=previous if isinstance(previous, str) else None,
            upstream_provider=provider.name if upstream_keeps else None,
            input_items=msgspec.json.encode(input_items(body, self._new_id)),
            response=msgspec.json.encode(document),
        )

    async def keep_answer(
        self, team_id: str, provider: Provider, body: dict[str, Any], answer: bytes
    ) -> None:
        """Keep the Response `answer` (JSON) to `body` when it asks to be stored."""
        if not stores(body):
            return
        try:
            document = msgspec.json.decode(answer)
        except msgspec.DecodeError:
            return
        record = self.record(team_id, provider, body, document) if isinstance(document, dict) else None
        if record is not None:
            self.store.keep(record)
            await self.store.share(record)

    def stream_keeper(self, team_id: str, provider: Provider, body: dict[str, Any]) -> StreamKeeper | None:
        """What watches a Responses stream's frames for its last Response; None if not stored."""
        return StreamKeeper(self, team_id, provider, body) if stores(body) else None


class StreamKeeper:
    """Called with each chunk of frames before it is sent: keeps the Response of the stream's last
    event as the chunk goes out, so that it is readable before the client has it (`kept`: shared
    once the stream is over)."""

    __slots__ = ("_body", "_owner", "_provider", "_team_id", "kept")

    def __init__(
        self, owner: StoredResponses, team_id: str, provider: Provider, body: dict[str, Any]
    ) -> None:
        self._owner, self._team_id, self._provider, self._body = owner, team_id, provider, body
        self.kept: StoredRecord | None = None

    def __call__(self, chunk: bytes) -> None:
        if self.kept is not None:
            return
        document = terminal_response(chunk)
        if document is None:
            return
        self.kept = self._owner.record(self._team_id, self._provider, self._body, document)
        if self.kept is not None:
            self._owner.store.keep(self.kept)
