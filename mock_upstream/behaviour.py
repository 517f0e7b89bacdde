"""How the mock upstream behaves: `MockBehaviour`, and merging per-request overrides into it.

Precedence, lowest to highest: CLI flags, `PUT /_mock/behaviour`, the `x-mock-behaviour` header,
the body's `"mock"` object. Overrides are partial: only the fields they name change.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from gateway.providers.usage_bounds import MAX_TOKENS

NonNegative = Annotated[float, msgspec.Meta(ge=0)]
Count = Annotated[int, msgspec.Meta(ge=0)]
# What the fake generates is bounded: a knob set to a billion would take the process's memory.
Generated = Annotated[int, msgspec.Meta(ge=0, le=1_000_000)]
# A reported count is held to the bound the gateway believes: an override past it is a 400, so the
# mock never puts on the wire a count no real provider would send.
Reported = Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKENS)]


class MockBehaviour(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every knob of the fake provider; the defaults answer quickly and successfully."""

    latency_ms: NonNegative = 0.0  # before the first byte
    chunk_delay_ms: NonNegative = 0.0  # between stream frames
    chunks: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 4  # content chunks in a stream
    prompt_tokens: Reported | None = None  # None: counted from the request text
    completion_tokens: Generated = 16  # capped by max_tokens / max_completion_tokens
    cached_tokens: Reported | None = None  # None: a hit when the cache prefix was seen before
    fail_rate: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.0
    fail_status: Annotated[int, msgspec.Meta(ge=400, le=599)] = 500
    retry_after: NonNegative | None = None  # seconds, sent as `retry-after` with a failure
    fail_after_chunks: Count | None = None  # stream: drop the connection after N SSE frames
    garbage: bool = False  # answer 200 with a body that is not JSON
    hang: bool = False  # never answer
    omit_usage: bool = False
    seed: int = 0  # seeds the random source that decides `fail_rate`
    batch_delay_ms: NonNegative = 0.0  # a batch of the batch APIs ends this long after its creation
    # An agent's turn: call this function tool when the request offers it (chat, Responses and
    # Messages requests) and the conversation does not end with a tool's output, else answer with text
    call_tool: str | None = None
    call_arguments: dict[str, Any] | None = None  # the call's arguments; None: values its schema accepts
    # The service tier an answer says served it, whatever the request asked for (`default`: a flex
    # request downgraded); None: the tier asked for (`auto` served as `default`), and no
    # `service_tier` at all in answers to requests that asked for none
    serve_tier: str | None = None


class BehaviourError(ValueError):
    """An override or a replacement behaviour that does not validate."""


def decode_behaviour(raw: bytes) -> MockBehaviour:
    """A whole behaviour from JSON (`PUT /_mock/behaviour`): missing fields take their defaults."""
    try:
        return msgspec.json.decode(raw or b"{}", type=MockBehaviour)
    except msgspec.ValidationError as exc:
        raise BehaviourError(f"invalid mock behaviour: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise BehaviourError("mock behaviour must be a JSON object") from exc


def with_overrides(base: MockBehaviour, overrides: Any) -> MockBehaviour:
    """`base` with the fields named in `overrides` (a dict from a header or the body) replaced."""
    if overrides is None:
        return base
    if not isinstance(overrides, dict):
        raise BehaviourError("mock behaviour overrides must be a JSON object")
    if not overrides:
        return base
    merged = msgspec.structs.asdict(base) | overrides
    try:
        return msgspec.convert(merged, MockBehaviour)
    except msgspec.ValidationError as exc:
        raise BehaviourError(f"invalid mock behaviour: {exc}") from exc


def header_overrides(value: str | None) -> Any:
    """Parse the `x-mock-behaviour` header (JSON), or None when it is absent."""
    if not value:
        return None
    try:
        return msgspec.json.decode(value)
    except msgspec.DecodeError as exc:
        raise BehaviourError("x-mock-behaviour must be a JSON object") from exc


def encode_behaviour(behaviour: MockBehaviour) -> bytes:
    return msgspec.json.encode(behaviour)
