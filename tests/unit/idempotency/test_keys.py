"""A keyed request's slot is its team's and holds only the key's digest; its fingerprint changes
with any byte of the body, the method or the path; a malformed key is a 400."""

from __future__ import annotations

import pytest

from gateway.errors import InvalidRequest
from gateway.idempotency.keys import MAX_KEY_CHARS, idempotent_request

BODY = b'{"model":"m","messages":[]}'


def test_the_same_request_of_the_same_team_names_the_same_slot() -> None:
    first = idempotent_request("team-a", "key-1", "POST", "/v1/chat/completions", BODY)
    again = idempotent_request("team-a", "key-1", "POST", "/v1/chat/completions", BODY)

    assert first == again


def test_another_team_names_another_slot() -> None:
    ours = idempotent_request("team-a", "key-1", "POST", "/v1/chat/completions", BODY)
    theirs = idempotent_request("team-b", "key-1", "POST", "/v1/chat/completions", BODY)

    assert ours.slot != theirs.slot
    assert ours.fingerprint == theirs.fingerprint


def test_the_slot_holds_a_digest_of_the_key_not_the_key() -> None:
    request = idempotent_request("team-a", "customer-order-1234", "POST", "/v1/embeddings", BODY)

    assert "customer-order-1234" not in request.slot
    assert request.slot.startswith("team-a:")


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/chat/completions", BODY + b" "),
        ("POST", "/v1/completions", BODY),
        ("PUT", "/v1/chat/completions", BODY),
    ],
)
def test_any_difference_in_method_path_or_body_changes_the_fingerprint(
    method: str, path: str, body: bytes
) -> None:
    first = idempotent_request("team-a", "key-1", "POST", "/v1/chat/completions", BODY)
    other = idempotent_request("team-a", "key-1", method, path, body)

    assert other.slot == first.slot
    assert other.fingerprint != first.fingerprint


@pytest.mark.parametrize("key", ["", "x" * (MAX_KEY_CHARS + 1), "caf\u00e9", "a\nb"])
def test_a_malformed_key_is_a_400_naming_the_header(key: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        idempotent_request("team-a", key, "POST", "/v1/chat/completions", BODY)

    assert refused.value.status == 400
    assert refused.value.param == "Idempotency-Key"


def test_a_key_of_the_longest_length_is_taken() -> None:
    assert idempotent_request("team-a", "k" * MAX_KEY_CHARS, "POST", "/v1/responses", BODY).slot
